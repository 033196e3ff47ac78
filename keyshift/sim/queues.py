"""Per-engine FIFO input queues as age cohorts: the simulator's whole notion of time in queue.

Each engine's queue is a row of K cohorts, column ``a`` holding the tuples that have waited
``a`` ticks (column 0 is the newest). One tick serves every engine's capacity oldest-cohort
first with a cumulative sum over the row — FIFO for all engines at once, no per-tuple or
per-engine Python work — and a tuple served from column ``a`` gets latency (a + ½)·tick.
Then the cohorts age by one column. What falls off the end either *expires* (it waited a
whole deadline: missed, elastic-cep Eq. 1–2) or piles up in the last column (back-pressure
mode, where nothing is dropped and the last column means "K-1 ticks or older").
"""

from __future__ import annotations

import numpy as np


class CohortQueues:
    """Queues of ``engines`` rows × ``ages`` age cohorts (tuples as floats: a fluid model)."""

    def __init__(self, engines: int, ages: int) -> None:
        if ages < 1:
            raise ValueError(f"ages must be >= 1, got {ages}")
        self.ages = ages
        self.q = np.zeros((engines, ages), dtype=np.float64)

    @property
    def engines(self) -> int:
        return int(self.q.shape[0])

    def grow(self, engines: int) -> None:
        """Add empty rows for new engine slots (slots are never renumbered)."""
        if engines > self.engines:
            extra = np.zeros((engines - self.engines, self.ages))
            self.q = np.vstack([self.q, extra])

    def lengths(self) -> np.ndarray:
        return self.q.sum(axis=1)

    def total(self) -> float:
        return float(self.q.sum())

    def push(self, per_engine: np.ndarray) -> None:
        """New tuples join the newest cohort."""
        self.q[:, 0] += per_engine

    def add(self, cohorts: np.ndarray) -> None:
        """Merge queued tuples with their ages (a migration buffer being released)."""
        self.q += cohorts

    def serve(self, capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Serve up to ``capacity`` tuples per engine, oldest first.

        Returns (served per engine, served per age summed over engines) — the second is the
        tick's contribution to the latency histogram.
        """
        oldest_first = self.q[:, ::-1]
        before = np.cumsum(oldest_first, axis=1) - oldest_first
        served = np.clip(capacity[:, None] - before, 0.0, None)
        np.minimum(served, oldest_first, out=served)
        self.q -= served[:, ::-1]
        np.clip(self.q, 0.0, None, out=self.q)  # float round-off must not go negative
        return served.sum(axis=1), served[:, ::-1].sum(axis=0)

    def drop_newest(self, amount: np.ndarray) -> np.ndarray:
        """Tail-drop up to ``amount`` tuples per engine from the newest cohort."""
        dropped = np.minimum(amount, self.q[:, 0])
        self.q[:, 0] -= dropped
        return dropped

    def age(self, expire: bool) -> np.ndarray:
        """Advance one tick. Returns per engine the tuples that expired (0 when not expiring)."""
        last = self.q[:, -1].copy()
        if self.ages == 1:
            if expire:
                self.q[:, 0] = 0.0
                return last
            return np.zeros_like(last)
        if expire:
            self.q[:, 1:] = self.q[:, :-1].copy()
            self.q[:, 0] = 0.0
            return last
        self.q[:, 1:] = self.q[:, :-1].copy()
        self.q[:, -1] += last
        self.q[:, 0] = 0.0
        return np.zeros_like(last)
