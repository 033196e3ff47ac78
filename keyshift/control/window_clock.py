"""When a statistic window closes: after Δ seconds of input, or after a count of batches.

The loop decides once per window. The Spark job's windows are **timed**
(:class:`TimedWindows`): a window holds the batches that start in it and closes at the end
of the batch after which no more can, so a window lasts Δ (rounded to a batch end) however
long the batches are. Counting batches instead (round(Δ / trigger) of them) makes a "10-s" window last
minutes exactly when batches grow under load, and the loop falls silent when it is needed
most. A batch that itself runs longer than Δ closes every window boundary it crossed; the
loop decides once, at its end, on the rates measured during it, and the reason says how many
windows the batch spanned.

Boundaries are fixed on the clock of the process's first batch (t0 + kΔ), so they do not
drift by a batch's overrun each window.

:class:`BatchWindows` keeps the count of batches: the simulator's and the replay's windows
(one tick or one batch each) and tests that step the loop batch by batch.

A restarted driver must close the windows a crashed attempt closed at the same batches (the
recorded decision of a re-executed batch is replayed, not decided again): both clocks are
told the batches that closed windows in the store (:meth:`replay`) and close exactly there
until they are past them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Close:
    """A window closed at the end of a batch: how many window boundaries the batch crossed
    (1 normally; k > 1 when the batch ran over k − 1 whole windows) and whether the close was
    replayed from the store."""

    spanned: int = 1
    replayed: bool = False
    window_s: float | None = None  # the window's length in the clock (None: a count)


class WindowClock(Protocol):
    """Says at each batch's end whether it closes the open window."""

    def opened(self, batch_id: int, started: float) -> None:
        """A batch of the open window started at ``started`` (epoch s)."""

    def close_at(self, batch_id: int, ended: float) -> Close | None:
        """The batch ``batch_id`` ended at ``ended``: its close, or None (the window goes on)."""

    def replay(self, closing_batches: list[int]) -> None:
        """Batches that closed windows in a crashed attempt, to be closed at again."""

    def first_batch(self, batch_id: int, last_closed: int | None) -> int:
        """The first batch of the window open at ``batch_id`` after a (re)start, given the
        last batch that closed a window before it (None: none did)."""

    def index(self, first_batch: int, last_window: int | None) -> int:
        """The number of the window that starts at ``first_batch``, given the number of the
        last window closed before it (None: none was)."""


@dataclass
class _Replay:
    """Closing batches recorded at or after the restart's first batch, ascending."""

    batches: list[int] = field(default_factory=list)

    def decide(self, batch_id: int) -> bool | None:
        """True/False where the store says, None past the recorded batches."""
        if not self.batches or batch_id > self.batches[-1]:
            return None
        return batch_id in self.batches


@dataclass
class BatchWindows:
    """A window is ``per_window`` consecutive batches: window w is batches [w·k, (w+1)·k)."""

    per_window: int
    _replay: _Replay = field(default_factory=_Replay)

    def __post_init__(self) -> None:
        if self.per_window < 1:
            raise ValueError(f"controller.window_s: gives {self.per_window} batches a window")

    def opened(self, batch_id: int, started: float) -> None:
        return None

    def close_at(self, batch_id: int, ended: float) -> Close | None:
        recorded = self._replay.decide(batch_id)
        if recorded is not None:
            return Close(replayed=True) if recorded else None
        return Close() if (batch_id + 1) % self.per_window == 0 else None

    def replay(self, closing_batches: list[int]) -> None:
        self._replay = _Replay(sorted(closing_batches))

    def first_batch(self, batch_id: int, last_closed: int | None) -> int:
        return batch_id - batch_id % self.per_window

    def index(self, first_batch: int, last_window: int | None) -> int:
        return first_batch // self.per_window


@dataclass
class TimedWindows:
    """A window holds the batches that start in it: it closes at the end of a batch after
    which the next can only start at or past the window's end (the batch ended there, or
    its start plus the trigger is there). Boundaries are t0 + kΔ from the first batch's
    start in this process; Δ is at least the trigger (no window is shorter than the
    interval batches come at). Batches on time close a window every round(Δ / trigger)
    batches, as a count would; longer ones close it on time."""

    window_s: float
    trigger_s: float = 0.0
    _t0: float | None = None
    _next: float | None = None  # the open window's end boundary
    _started: float | None = None  # the last batch's start
    _replay: _Replay = field(default_factory=_Replay)

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"controller.window_s: must be > 0, got {self.window_s}")
        if self.trigger_s < 0:
            raise ValueError(f"spark.trigger_s: must be >= 0, got {self.trigger_s}")

    @property
    def delta(self) -> float:
        return max(self.window_s, self.trigger_s)

    def opened(self, batch_id: int, started: float) -> None:
        self._started = float(started)
        if self._t0 is None:
            self._t0 = float(started)
            self._next = self._t0 + self.delta

    def close_at(self, batch_id: int, ended: float) -> Close | None:
        if self._next is None:  # no batch start was seen: this batch opened the window
            self.opened(batch_id, ended)
        recorded = self._replay.decide(batch_id)
        if recorded is not None:
            if not recorded:
                return None
            # the boundaries go on from the replayed close, as the crashed attempt's did
            self._next = max(self._next, ended + self.delta)
            return Close(replayed=True)
        if self.window_s <= self.trigger_s:
            # a window no longer than the trigger: every batch is one (the finest the loop
            # can decide at); one that ran over several triggers says how many
            started = self._started if self._started is not None else ended
            self._next = ended + self.delta
            return Close(spanned=max(1, math.floor((ended - started) / self.delta)),
                         window_s=self.delta)
        # the earliest the next batch can start: now, or this one's trigger tick
        reach = max(ended, (self._started if self._started is not None else ended)
                    + self.trigger_s)
        # half a trigger of slack: Spark calls the batch a moment after its tick, by a
        # delay that varies, and a window must not miss its last batch by that delay
        slack = self.trigger_s / 2 + 1e-6
        if reach < self._next - slack:
            return None
        # the boundaries up to ``reach`` it crossed; the next window ends past it
        spanned = 1 + max(0, math.floor((reach + slack - self._next) / self.delta))
        self._next += spanned * self.delta
        return Close(spanned=spanned, window_s=self.delta)

    def replay(self, closing_batches: list[int]) -> None:
        self._replay = _Replay(sorted(closing_batches))

    def first_batch(self, batch_id: int, last_closed: int | None) -> int:
        return 0 if last_closed is None else min(last_closed + 1, batch_id)

    def index(self, first_batch: int, last_window: int | None) -> int:
        return 0 if last_window is None else last_window + 1


def window_clock(window_s: float, trigger_s: float = 0.0,
                 per_window: int | None = None) -> WindowClock:
    """Timed windows of ``window_s`` on a ``trigger_s`` trigger, or windows of
    ``per_window`` batches where given."""
    if per_window is not None:
        return BatchWindows(per_window)
    return TimedWindows(window_s, trigger_s)
