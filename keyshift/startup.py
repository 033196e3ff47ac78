"""Where a run's time to its first batch goes, phase by phase.

On a standalone cluster a ``keyshift run`` took tens of seconds before its first batch, and
a user saw one silent pause: the JVM and SparkContext, the Maven jars, the master granting
executors, the warehouse's tables, the control state, the Kafka source's first offsets.
Each step marks its end on one :class:`StartupClock`; the run prints one line with the
phases and keeps them in ``run --json`` (``startup``), so the slow one is named, and what is
keyshift's own can be told from what is Spark's or the cluster manager's.

The clock starts at the process's own start (the interpreter and its imports are a phase
too), read from the operating system where it can be.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def process_started() -> float:
    """Epoch seconds this process started (psutil's view of the OS), else now."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 -- no psutil or no /proc: the phase starts here instead
        return time.time()


class StartupClock:
    """Phases of one process's start-up, each the seconds since the phase before it."""

    def __init__(self, t0: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.t0 = process_started() if t0 is None else float(t0)
        self._last = self.t0
        self.phases: list[tuple[str, float]] = []
        self.done = False

    def mark(self, phase: str) -> None:
        """``phase`` ended now (it began where the last one ended). Marks after
        :meth:`close` are ignored: a restart of the query in place is not start-up."""
        if self.done:
            return
        now = self.clock()
        self.phases.append((phase, max(0.0, now - self._last)))
        self._last = now

    def close(self) -> None:
        """The first batch's own work starts now: start-up is over."""
        self.done = True

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.phases)

    def as_dict(self) -> dict[str, float]:
        """Phase → seconds (in order), and ``total_s``."""
        out = {name: round(s, 3) for name, s in self.phases}
        out["total_s"] = round(self.total_s, 3)
        return out

    def line(self) -> str:
        """One line: the total, every phase of a tenth of a second or more, the largest
        named."""
        shown = [(n, s) for n, s in self.phases if s >= 0.1]
        parts = ", ".join(f"{n} {s:.1f} s" for n, s in shown) or "no phase over 0.1 s"
        largest = max(self.phases, key=lambda p: p[1], default=None)
        tail = (f"; the largest: {largest[0]} ({largest[1] / self.total_s:.0%})"
                if largest is not None and self.total_s > 0 else "")
        return f"start-up: {self.total_s:.1f} s to the first batch ({parts}){tail}"
