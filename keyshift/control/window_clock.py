"""When a statistic window closes: after Δ seconds of input, or after a count of batches.

The loop decides once per window. The Spark job's windows are **timed**
(:class:`TimedWindows`): a window closes at the end of the first batch that ends Δ or more
after the window opened, so a window lasts Δ (rounded up to a batch end) however long the
batches are. Counting batches instead (round(Δ / trigger) of them) makes a "10-s" window last
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


@dataclass
class TimedWindows:
    """A window closes at the end of the first batch that ends ``window_s`` or more after it
    opened; the boundaries are t0 + kΔ from the first batch's start in this process."""

    window_s: float
    _t0: float | None = None
    _next: float | None = None  # the open window's end boundary
    _replay: _Replay = field(default_factory=_Replay)

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"controller.window_s: must be > 0, got {self.window_s}")

    def opened(self, batch_id: int, started: float) -> None:
        if self._t0 is None:
            self._t0 = float(started)
            self._next = self._t0 + self.window_s

    def close_at(self, batch_id: int, ended: float) -> Close | None:
        if self._next is None:  # no batch start was seen: this batch opened the window
            self.opened(batch_id, ended)
        recorded = self._replay.decide(batch_id)
        if recorded is not None:
            if not recorded:
                return None
            # the boundaries go on from the replayed close, as the crashed attempt's did
            self._next = max(self._next, ended + self.window_s)
            return Close(replayed=True)
        if ended < self._next:
            return None
        spanned = 1 + math.floor((ended - self._next) / self.window_s)
        self._next += spanned * self.window_s
        return Close(spanned=spanned)

    def replay(self, closing_batches: list[int]) -> None:
        self._replay = _Replay(sorted(closing_batches))

    def first_batch(self, batch_id: int, last_closed: int | None) -> int:
        return 0 if last_closed is None else min(last_closed + 1, batch_id)


def window_clock(window_s: float, per_window: int | None = None) -> WindowClock:
    """Timed windows of ``window_s``, or windows of ``per_window`` batches where given."""
    return BatchWindows(per_window) if per_window is not None else TimedWindows(window_s)
