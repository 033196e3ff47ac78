"""Quantiles that travel: a task ships a few evenly ranked values of what it saw instead
of one number per event, and the driver merges them (keyshift.control.batch_cost's
end-to-end latency). Merging is exact at the points and linear between them: for 21
points the median and p95 are within a few per cent of the rank of the exact ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

QUANTILE_POINTS = 21  # ranks 0, 5 %, ..., 100 %


def sketch(values: Sequence[float], points: int = QUANTILE_POINTS) -> dict[str, Any] | None:
    """``values`` at ``points`` evenly spaced ranks, with their count: a few numbers a task
    ships instead of one per complex event; None for no value."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not xs.size:
        return None
    q = np.quantile(xs, np.linspace(0.0, 1.0, points))
    return {"n": int(xs.size), "q": [float(x) for x in q]}


def merged_quantiles(sketches: Iterable[Mapping[str, Any] | None],
                     qs: Sequence[float]) -> list[float] | None:
    """Quantiles of the union of the sketched values: each sketch's CDF is linear between its
    points, the union's is their count-weighted mean, inverted at ``qs``."""
    parts = [(int(s["n"]), np.asarray(s["q"], dtype=float)) for s in sketches
             if s and s.get("n")]
    if not parts:
        return None
    total = sum(n for n, _ in parts)
    xs = np.unique(np.concatenate([q for _, q in parts]))
    cdf = np.zeros(xs.size)
    for n, q in parts:
        ranks = np.linspace(0.0, 1.0, q.size)
        if q[-1] == q[0]:  # one value (or all equal): a step
            cdf += n * (xs >= q[0])
        else:
            cdf += n * np.interp(xs, q, ranks, left=0.0, right=1.0)
    cdf /= total
    return [float(np.interp(p, cdf, xs)) if xs.size > 1 else float(xs[0]) for p in qs]


def waits(s: Mapping[str, Any] | None, at: float) -> dict[str, Any] | None:
    """A sketch of times turned into one of the waits until ``at`` (``at`` - each time)."""
    if not s:
        return None
    return {"n": s["n"], "q": sorted(at - x for x in s["q"])}


def merged_sketch(sketches: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """One sketch for the union of several (their merged quantiles at the sketch's ranks)."""
    parts = [s for s in sketches if s and s.get("n")]
    if not parts:
        return None
    q = merged_quantiles(parts, np.linspace(0.0, 1.0, QUANTILE_POINTS))
    return {"n": sum(int(s["n"]) for s in parts), "q": q}
