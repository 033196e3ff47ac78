"""Fox's greedy for the minimax discrete separable resource allocation problem (blocking-rate §5.2).

Minimise ``max_j F_j(w_j)`` subject to ``Σ w_j = R`` and ``lower_j ≤ w_j ≤ upper_j`` with every
``F_j`` non-decreasing on the integer grid 0..L-1. Because each column is monotone, handing
the next unit to the column whose *next* value is smallest is optimal (an interchange
argument): the final objective is the (R - Σ lower)-th smallest "next value" overall. A heap
keyed by each column's next value makes that O(N + R log N).

The hot loop reads the function matrix through a ``memoryview`` of its flat buffer: indexing
it yields plain Python floats, several times cheaper than numpy scalar indexing, which is what
keeps R = 1000, N = 64 well under a millisecond.
"""

from __future__ import annotations

import heapq

import numpy as np

from keyshift.split.errors import SplitInputError


def _bounds(
    value: np.ndarray | list[int] | None, default: int, n: int, name: str
) -> np.ndarray:
    if value is None:
        return np.full(n, default, dtype=np.int64)
    arr = np.asarray(value)
    if arr.shape != (n,):
        raise SplitInputError(name, f"needs one integer per connection ({n}), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
        raise SplitInputError(name, "must be finite integers")
    as_int = arr.astype(np.int64)
    if not np.array_equal(as_int, arr):
        raise SplitInputError(name, "must be whole units (integers)")
    return as_int


def check_problem(
    functions: np.ndarray,
    total: int,
    lower: np.ndarray | list[int] | None = None,
    upper: np.ndarray | list[int] | None = None,
    *,
    monotone: bool = True,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Validate a minimax RAP instance; returns (F as C-contiguous float64, R, lower, upper).

    Each failure names the field, because the same checks guard the ``keyshift split`` input.
    """
    F = np.ascontiguousarray(functions, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] < 1 or F.shape[1] < 2:
        raise SplitInputError("functions", "must be a non-empty list of functions, each with ≥ 2 values")
    if not np.isfinite(F).all():
        raise SplitInputError("functions", "must hold finite numbers")
    if monotone and (np.diff(F, axis=1) < 0).any():
        bad = int(np.flatnonzero((np.diff(F, axis=1) < 0).any(axis=1))[0])
        raise SplitInputError(f"functions[{bad}]", "must be non-decreasing in the weight")
    n, width = F.shape
    if isinstance(total, bool) or int(total) != total:
        raise SplitInputError("total", "must be a whole number of units")
    total = int(total)
    lo = _bounds(lower, 0, n, "min")
    hi = _bounds(upper, width - 1, n, "max")
    if (lo < 0).any():
        raise SplitInputError("min", "must be ≥ 0")
    if (hi > width - 1).any():
        raise SplitInputError("max", f"must be ≤ {width - 1} (the functions' last weight)")
    if (lo > hi).any():
        j = int(np.flatnonzero(lo > hi)[0])
        raise SplitInputError("min", f"must be ≤ max for every connection (connection {j}: {lo[j]} > {hi[j]})")
    if total < lo.sum() or total > hi.sum():
        raise SplitInputError(
            "total", f"{total} is outside [Σ min, Σ max] = [{int(lo.sum())}, {int(hi.sum())}]"
        )
    return F, total, lo, hi


def fox_minimax(
    functions: np.ndarray,
    total: int,
    lower: np.ndarray | list[int] | None = None,
    upper: np.ndarray | list[int] | None = None,
    *,
    validate: bool = True,
) -> np.ndarray:
    """Integer weights (units) minimising the largest ``functions[j, w_j]``; sums to ``total``.

    ``functions`` has shape (N, L): row j is F_j at weights 0..L-1, non-decreasing. Ties go to
    the lower connection index, so the result is deterministic.
    """
    if validate:
        F, total, lo, hi = check_problem(functions, total, lower, upper)
    else:
        F = np.ascontiguousarray(functions, dtype=np.float64)
        n = F.shape[0]
        lo = np.zeros(n, np.int64) if lower is None else np.asarray(lower, np.int64)
        hi = np.full(n, F.shape[1] - 1, np.int64) if upper is None else np.asarray(upper, np.int64)
    width = F.shape[1]
    flat = memoryview(F.reshape(-1))
    weights = lo.tolist()
    caps = hi.tolist()
    remaining = total - sum(weights)
    heap = [
        (flat[j * width + w + 1], j) for j, (w, cap) in enumerate(zip(weights, caps)) if w < cap
    ]
    heapq.heapify(heap)
    replace, pop = heapq.heapreplace, heapq.heappop
    while remaining > 0:
        j = heap[0][1]
        w = weights[j] + 1
        weights[j] = w
        remaining -= 1
        if w < caps[j]:
            replace(heap, (flat[j * width + w + 1], j))
        else:
            pop(heap)
    return np.asarray(weights, dtype=np.int64)


def objective(functions: np.ndarray, weights: np.ndarray) -> float:
    """The minimax objective ``max_j F_j(w_j)`` of a weight vector."""
    F = np.asarray(functions, dtype=np.float64)
    w = np.asarray(weights, dtype=np.int64)
    return float(F[np.arange(F.shape[0]), w].max())
