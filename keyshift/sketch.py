"""SpaceSaving (Metwally, Agrawal and El Abbadi, ICDT 2005): the heavy hitters of a stream in
``capacity`` counters, with a bound on every estimate.

Why a sketch and not the exact histogram: a key-splitting policy (``dc``, ``wc``) must know
the hot keys while the tuples arrive, before the statistic window closes, and each engine
sees only its own share of the stream. A SpaceSaving summary per engine costs ``capacity``
counters whatever the number of keys, and two summaries merge into one with the same kind of
bound, so the engines' summaries can be combined at the driver.

Guarantees (property-tested in tests/keyshift/test_sketch.py), N the weight seen so far:

- every estimate is an upper bound and ``count − error`` a lower bound of the true count;
- a key absent from the summary has a true count ≤ :attr:`SpaceSaving.floor`;
- without merges ``floor ≤ N / capacity``, so every key heavier than N / capacity is kept;
  one merge of two summaries of equal capacity keeps ``floor < 2N / capacity``.

Weighted updates (``update(key, n)``) are the weighted variant: a new key replaces the
minimum counter ``m`` and starts at ``m + n`` with error ``m``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


class SketchError(ValueError):
    """A bad sketch parameter or update (one line naming it)."""


@dataclass(frozen=True)
class Estimate:
    """A key's estimated count: ``count`` ≥ true count ≥ ``count − error``."""

    key: Hashable
    count: float
    error: float

    @property
    def lower(self) -> float:
        return self.count - self.error


class SpaceSaving:
    """The Stream-Summary of SpaceSaving, with a lazy min-heap in place of its bucket list.

    The heap holds (count, order, key) entries; an entry whose count is no longer the key's
    is stale and skipped when it reaches the top, and the heap is rebuilt once stale entries
    outnumber live ones, so an update costs O(log capacity) amortised.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise SketchError(f"capacity: must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self.total = 0.0
        self.floor = 0.0
        self._count: dict[Hashable, float] = {}
        self._error: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._count)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._count

    def _push(self, key: Hashable) -> None:
        heapq.heappush(self._heap, (self._count[key], next(self._order), key))
        if len(self._heap) > 2 * self.capacity + 16:
            self._heap = [(c, next(self._order), k) for k, c in self._count.items()]
            heapq.heapify(self._heap)

    def _pop_min(self) -> tuple[Hashable, float]:
        while True:
            count, _, key = heapq.heappop(self._heap)
            if self._count.get(key) == count:
                return key, count

    def update(self, key: Hashable, n: float = 1) -> None:
        """Count ``n`` more occurrences of ``key`` (n > 0; zero is ignored)."""
        n = float(n)
        if not n >= 0 or n == float("inf"):
            raise SketchError(f"n: must be a finite number >= 0, got {n}")
        if n == 0:
            return
        self.total += n
        if key in self._count:
            self._count[key] += n
        elif len(self._count) < self.capacity:
            self._count[key] = n
            self._error[key] = 0.0
        else:
            victim, m = self._pop_min()
            del self._count[victim], self._error[victim]
            self.floor = max(self.floor, m)
            self._count[key] = m + n
            self._error[key] = m
        self._push(key)

    def update_many(self, keys: Iterable[Hashable], counts: Iterable[float]) -> None:
        """Weighted updates in the given order (a tick's or a window's histogram)."""
        for key, n in zip(keys, counts, strict=True):
            self.update(key, n)

    def estimate(self, key: Hashable) -> Estimate:
        """The key's bounds; an absent key is somewhere in [0, floor]."""
        if key in self._count:
            return Estimate(key, self._count[key], self._error[key])
        return Estimate(key, self.floor, self.floor)

    def top(self, k: int | None = None) -> list[Estimate]:
        """The ``k`` largest estimates (all when None), largest first, ties by smaller error."""
        items = sorted(self._count, key=lambda key: (-self._count[key], self._error[key]))
        return [self.estimate(key) for key in items[: len(items) if k is None else max(k, 0)]]

    def heavy_hitters(self, fraction: float) -> list[Estimate]:
        """Every key whose estimate exceeds ``fraction`` of the total, largest first.

        No false negatives when ``fraction · N ≥ floor``: a key with a true count above
        that is kept and its estimate is at least its true count. ``Estimate.lower`` says
        which ones are guaranteed heavy.
        """
        if not 0 <= fraction <= 1:
            raise SketchError(f"fraction: must be within [0, 1], got {fraction}")
        cut = fraction * self.total
        return [e for e in self.top() if e.count > cut]

    def merge(self, other: SpaceSaving) -> SpaceSaving:
        """One summary of both streams (the engines' sketches at the driver).

        A key missing from one side may have up to that side's ``floor`` there, so it is
        added to both its count and its error; the ``capacity`` largest counters are kept and
        the largest one dropped raises the floor. Neither input changes.
        """
        if not isinstance(other, SpaceSaving):
            raise SketchError(f"merge: needs a SpaceSaving, got {type(other).__name__}")
        out = SpaceSaving(max(self.capacity, other.capacity))
        out.total = self.total + other.total
        merged: dict[Hashable, tuple[float, float]] = {}
        for key in itertools.chain(self._count, other._count):
            if key in merged:
                continue
            a, b = self.estimate(key), other.estimate(key)
            merged[key] = (a.count + b.count, a.error + b.error)
        ranked = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        kept, dropped = ranked[: out.capacity], ranked[out.capacity :]
        out.floor = max(self.floor + other.floor, dropped[0][1][0] if dropped else 0.0)
        for key, (count, error) in kept:
            out._count[key] = count
            out._error[key] = error
        out._heap = [(c, next(out._order), k) for k, c in out._count.items()]
        heapq.heapify(out._heap)
        return out
