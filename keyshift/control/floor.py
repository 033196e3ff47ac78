"""The floor of a statistic window: what no key-granular plan can beat.

A plan keeps every key group on one engine, so the engine that holds the hottest key group
carries at least that group's load, and some engine carries at least the mean engine load.
Over a window with per-group loads y_i (the histogram Y_t), N live engines and total
T = Σ y_i, every plan's busiest engine therefore carries at least

    floor load = max(max_i y_i, T / N)

and the floor is that bound relative to the mean engine load T / N:

* ``ratio`` = max(max_i y_i, T/N) / (T/N) ≥ 1: the lowest max/mean engine load (the quantity
  a micro-batch's duration follows) any key-granular plan can reach;
* ``rstd``: the lowest imbScore (dlb Eq. 2, %) a key-granular plan can reach. With one
  engine at load x ≥ h (h the hottest group's load, above the mean m) the engines' variance
  is least when the other N−1 engines share T − x equally: (x − m)² / (N − 1), growing with
  x, so imbScore ≥ 100·(h − m) / (m·√(N − 1)) = 100·(ratio − 1)/√(N − 1); 0 when no group
  outweighs the mean (the bound then says nothing, a plan may still not reach 0).

Both are lower bounds, not promises: several hot groups can keep every plan above them (bin
packing), but no plan can go below them. Only splitting a key over engines can (the ``dc`` /
``wc`` policies, for operators with a summary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOOR_TOLERANCE = 0.01
"""A plan is *at the floor* when its busiest engine is within this fraction of its own load
of the floor load (or within ``controller.min_gain``, if larger: then no rebalance could
pass that veto anyway)."""

FLOOR_COLUMNS = ("floor_ratio", "floor_rstd", "hot_group", "hot_group_share")
"""The floor's columns of ``metrics`` and ``decisions`` (keyshift.schemas, version 2)."""


@dataclass(frozen=True)
class Floor:
    """The floor of one window (or one batch): see the module's docstring."""

    ratio: float
    rstd: float
    hot_group: int | None  # the key group with the most load; None: no load at all
    hot_group_share: float  # its load / the window's total load (0 without load)
    engines: int
    total: float

    @property
    def mean_load(self) -> float:
        return self.total / self.engines if self.engines else 0.0

    @property
    def load(self) -> float:
        """The floor load: the least load any key-granular plan's busiest engine carries."""
        return self.ratio * self.mean_load

    @property
    def binding(self) -> bool:
        """The hottest key group alone outweighs the mean engine load."""
        return self.ratio > 1.0

    def reached_by(self, max_load: float, tolerance: float = FLOOR_TOLERANCE) -> bool:
        """Whether a plan whose busiest engine carries ``max_load`` is at the floor: the
        floor binds and no plan could lower that engine by more than ``tolerance`` of its
        load."""
        return self.binding and max_load - self.load <= max(tolerance, 0.0) * max_load

    def reason(self) -> str:
        """The audit log's words for a window whose plan is at the floor."""
        return (f"at the floor: group {self.hot_group} holds {self.hot_group_share:.0%} of "
                f"the window; no key-granular plan gets the busiest of {self.engines} "
                f"engines below {self.ratio:.2f}x the mean (imbScore {self.rstd:.1f}%)")

    def columns(self) -> dict[str, Any]:
        """The floor's columns of ``metrics`` and ``decisions`` (keyshift.schemas)."""
        return dict(zip(FLOOR_COLUMNS, (self.ratio, self.rstd, self.hot_group,
                                        self.hot_group_share), strict=True))


def key_group_floor(group_loads: np.ndarray, engines: int) -> Floor:
    """The floor of a statistic window: its per-key-group loads on ``engines`` live engines."""
    y = np.asarray(group_loads, dtype=np.float64)
    total = float(y.sum()) if y.size else 0.0
    if engines < 1 or total <= 0:
        return Floor(1.0, 0.0, None, 0.0, max(int(engines), 0), max(total, 0.0))
    hot = int(np.argmax(y))
    mean = total / engines
    ratio = max(float(y[hot]), mean) / mean
    rstd = 100.0 * (ratio - 1.0) / math.sqrt(engines - 1) if engines > 1 else 0.0
    return Floor(ratio, rstd, hot, float(y[hot]) / total, int(engines), total)
