"""Admission: how many records a micro-batch may read, so that batches stay short under any
load and the loop keeps deciding every window.

A fixed ``maxOffsetsPerTrigger`` lets one batch of a heavy operator grow into minutes of
engine work when a backlog builds (20,000 events at 8 ms each on one engine is 160 s), and
while it runs nothing else happens: no window closes, no executor is asked for. DStreams had
a PID rate estimator for this; Structured Streaming has none, and Flink's backpressure is
built in. Here the bound follows the measured cost: a batch reads no more than the engines
it runs on can do in about one window (``fill`` × Δ, less the batch's fixed cost), so a
backlog is taken over several short batches and a decision comes at the end of each window.

The cost is measured on the batch's critical engine task, the one the batch waits for:
``critical_s`` seconds for ``events / engines`` events an engine. The recent batches give a
line ``critical_s = a + k · events / engines`` (least squares): ``k`` the engine-seconds an
event costs, skew included, ``a`` the task's fixed part (a Python worker's dispatch, the
state's fetch), which reading less does not shorten. A cheap operator on a cluster spends
most of a small batch in ``a``; the ratio ``critical_s · engines / events`` would call it
costly per event and shrink its batches for nothing. A bound of
``(fill·Δ − overhead − a) · engines / k`` then ends the critical task within the window.
Until the line is determined (four recent batches of sizes 1.5× apart that it fits within
20 %), the ratio stands in for ``k`` (an upper bound), so a shrink is then a probe of one
``step`` a window, and the smaller batches it brings determine the line. The bound moves only by a factor of ``step`` or more:
Spark reads the limit when the query starts, so a new bound is a restart of the query in
place (``keyshift.streaming.query_lifecycle.swap_source``), about a second each; at most one
a window. The user's ``max_offsets_per_trigger`` stays the ceiling.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AdmissionSettings:
    """``window_s``: Δ; ``ceiling``: the user's ``max_offsets_per_trigger``; ``initial``: the
    first batch's bound while no cost is known; ``least``: the smallest bound it sets;
    ``fill``: the share of a window a batch may take; ``step``: the factor a bound must move
    by before the query restarts with it."""

    window_s: float
    ceiling: int
    initial: int = 1000
    least: int = 10
    fill: float = 0.8
    step: float = 2.0
    history: int = 8  # the recent batches the cost line is fitted on
    spread: float = 1.5  # the largest of them at least this × the smallest: a line
    points: int = 4  # ... from at least this many batches
    residual: float = 0.2  # ... whose median relative miss is at most this

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"controller.window_s: must be > 0, got {self.window_s}")
        if self.ceiling < 1:
            raise ValueError(f"spark.max_offsets_per_trigger: must be >= 1, got {self.ceiling}")
        if not 0 < self.fill <= 1:
            raise ValueError(f"spark.admission_fill: must be in (0, 1], got {self.fill}")
        if self.step <= 1:
            raise ValueError(f"admission step: must be > 1, got {self.step}")

    @property
    def start(self) -> int:
        """The bound of a run's first query: ``initial`` under the ceiling."""
        return max(1, min(self.initial, self.ceiling))


@dataclass(frozen=True)
class BatchLoad:
    """What one batch read and cost: its events, the seconds its critical engine task worked,
    the live engines it ran on, its whole duration, the records still unread after it
    (None: unknown) and whether it moved state (a migration's fetches are in its time)."""

    events: int
    critical_s: float
    engines: int
    duration_s: float
    lag: float | None = None
    moved: bool = False


class Admission:
    """The read bound of a run's query, from the measured cost of its batches."""

    def __init__(self, settings: AdmissionSettings, limit: int | None = None) -> None:
        self.settings = settings
        self.limit = limit if limit is not None else settings.start  # the bound in force
        self.cost_s: float | None = None  # engine-seconds per event (k)
        self.task_fixed_s = 0.0  # the critical task's part that does not scale (a)
        self.overhead_s: float | None = None  # a batch's time outside its critical task
        self.fitted = False  # k and a from a line over batches of different sizes
        self.last_change_at: float | None = None
        self._seen: deque[tuple[float, float, float]] = deque(maxlen=settings.history)
        self._warm = False  # a process's first batch with events was seen
        self._long = 0  # batches in a row longer than a window
        # a probe in flight: the bound before it, that batch's events an engine and seconds
        self._probe: tuple[int, float, float] | None = None
        self._no_less = 0  # a probe showed reading less does not shorten batches of this bound

    def observe(self, b: BatchLoad) -> None:
        """One finished batch's cost (a batch without events tells nothing of it). A
        process's first batch with events is cold (Python workers forked, the operator
        imported, the first Kafka read) and does not count."""
        if b.events <= 0 or b.critical_s <= 0 or b.engines < 1:
            return
        cold, self._warm = not self._warm, True
        if cold or b.moved:  # start-up's time, or a migration's: not the events'
            return
        self._seen.append((b.events / b.engines, b.critical_s,
                           max(b.duration_s - b.critical_s, 0.0)))
        per_engine, critical, over = (np.array(c) for c in zip(*self._seen))
        self.overhead_s = float(np.median(over))
        spread = bool(per_engine.max() >= self.settings.spread * per_engine.min()
                      and len(self._seen) >= self.settings.points)
        if spread:
            k, a = np.polyfit(per_engine, critical, 1)
            if a < 0:  # no fixed part in sight: the line through the origin
                k, a = float(np.dot(per_engine, critical) / np.dot(per_engine, per_engine)), 0.0
            # time that does not grow with the events: the smallest cost the data allows
            # (never 0: the bound stays finite)
            k = max(float(k), 1e-3 * float(np.median(critical / per_engine)))
            a = float(max(a, 0.0))
            miss = float(np.median(np.abs(a + k * per_engine - critical) / critical))
            if miss <= self.settings.residual:  # a line the batches follow: trusted
                self.cost_s, self.task_fixed_s, self.fitted = k, a, True
                return
        if self.fitted and self.cost_s is not None:
            # no line from the recent batches: the line fitted before stands while it still
            # predicts them (a changed operator or input shows as a miss)
            pred = self.task_fixed_s + self.cost_s * per_engine
            if float(np.median(np.abs(pred - critical) / critical)) < 0.25:
                return
        self.cost_s, self.task_fixed_s = float(np.median(critical / per_engine)), 0.0
        self.fitted = False

    def wanted(self, engines: int) -> int:
        """The bound that ends a batch on ``engines`` engines within ``fill`` of a window."""
        s = self.settings
        if self.cost_s is None:
            return self.limit
        fixed = (self.overhead_s or 0.0) + self.task_fixed_s
        budget = s.fill * s.window_s - fixed
        # a batch's fixed cost near a window leaves little room: still read something
        budget = max(budget, 0.25 * s.fill * s.window_s)
        n = budget * max(engines, 1) / self.cost_s
        # never so few that the batch's fixed cost outweighs its records' work: below that
        # a backlog drains at less than half the engines' speed and only grows (a window
        # shorter than a batch's fixed cost cannot be met by reading less)
        n = max(n, fixed * max(engines, 1) / self.cost_s)
        return int(max(s.least, min(n, s.ceiling)))

    def next_limit(self, b: BatchLoad, engines: int, now: float) -> int | None:
        """After batch ``b``, with ``engines`` live for the next one: the new bound when the
        query should restart with it, else None. Down when the wanted bound is a ``step``
        below the one in force, the batch read more than it wants and it was the second
        warm batch in a row longer than a window; up when it is a ``step`` above and the
        bound held the batch back (it read all it could, or records wait); at most once a
        window. A probe (a shrink on the ratio, the line unknown) that did not shorten the
        batches is undone, and no later probe goes below the bound it left."""
        warm = self._warm and not b.moved and b.events > 0
        self.observe(b)
        s = self.settings
        # a long cold batch or migration is not the events' doing: it neither counts nor
        # resets the run of long ones
        if warm:
            self._long = self._long + 1 if b.duration_s > s.window_s else 0
        undo = self._verdict(b) if warm else None
        if undo is not None:
            self.limit, self.last_change_at = undo, now
            return undo
        if self.last_change_at is not None and now - self.last_change_at < s.window_s:
            return None
        want = self.wanted(engines)
        if not self.fitted:  # the line unknown: a probe of one step, which determines it
            want = max(want, int(self.limit / s.step), self._no_less)
        # only a batch longer than its window is shrunk: a shorter one is already what the
        # loop needs, and under a fixed cost that dominates, fewer records shorten nothing
        shrink = want * s.step <= self.limit and b.events > want and self._long >= 2
        held = b.events >= 0.9 * self.limit or (b.lag is not None and b.lag > 0)
        grow = want >= self.limit * s.step and held and self.limit < s.ceiling
        if not (shrink or grow):
            return None
        if shrink and not self.fitted:
            self._probe = (self.limit, b.events / b.engines, b.critical_s)
        self.limit, self.last_change_at = want, now
        return want

    def _verdict(self, b: BatchLoad) -> int | None:
        """The first warm batch after a probe that read fewer events an engine: the bound
        from before the probe when the batch came out nearer the old time than the time
        proportional to its events (the fixed part rules), else None."""
        if self._probe is None or self.fitted:
            self._probe = None
            return None
        before, per_engine, critical = self._probe
        ratio = (b.events / b.engines) / per_engine
        if ratio > 0.75:  # not read at the smaller bound yet (or a larger input)
            return None
        self._probe = None
        if b.critical_s > critical * (1 + ratio) / 2:
            self._no_less = before
            return before
        return None

    def describe(self) -> str:
        """The bound and what set it, for a line of the run's output."""
        if self.cost_s is None:
            return f"{self.limit} records a batch (no cost measured yet)"
        how = (f"{self.task_fixed_s:.2g} s fixed a task" if self.fitted
               else "no line through the batches yet: a probe of one step")
        return (f"{self.limit} records a batch ({self.cost_s * 1000:.3g} ms an event on one "
                f"engine, {how}, {self.overhead_s or 0.0:.2g} s fixed a batch, "
                f"{self.settings.fill:g} of a {self.settings.window_s:g}-s window)")
