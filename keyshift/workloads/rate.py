"""An input rate that changes over time: the ramp an elasticity test is made of.

Schedule syntax (``keyshift produce --rate``)::

    2000                     2,000 events/s all the time
    100@0,800@60,100@180     100/s from 0 s, 800/s from 60 s, 100/s again from 180 s

Times are seconds since the producer started; each step holds until the next, like the
skew schedule's (:mod:`keyshift.workloads.skew`). A schedule starts at 0 s, its times
increase and every rate is a positive, finite number of events per second.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass

from .skew import WorkloadInputError

_STEP = re.compile(r"^\s*(?P<r>[0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(?:@\s*(?P<t>[0-9]*\.?[0-9]+)\s*)?$")


@dataclass(frozen=True)
class RateSchedule:
    """Piecewise-constant events per second: ``steps`` are (start_s, rate)."""

    steps: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise WorkloadInputError("rate", "needs at least one step")
        times = [t for t, _ in self.steps]
        if times[0] != 0.0:
            raise WorkloadInputError("rate", f"the first step must start at 0 s, got {times[0]:g}")
        if any(b <= a for a, b in zip(times, times[1:], strict=False)):
            raise WorkloadInputError("rate", f"step times must increase, got {times}")
        for _, r in self.steps:
            if not (r > 0 and math.isfinite(r)):
                raise WorkloadInputError("rate", f"every rate must be a positive number, got {r:g}")

    @classmethod
    def parse(cls, text: str | float) -> RateSchedule:
        """``RATE`` or ``RATE@SECONDS,...``; errors name ``rate`` and quote the bad part."""
        if isinstance(text, (int, float)):
            return cls(((0.0, float(text)),))
        steps = []
        for i, part in enumerate(str(text).split(",")):
            m = _STEP.match(part)
            if not m:
                raise WorkloadInputError(
                    "rate", f"step {part.strip()!r} is not EVENTS_PER_S[@SECONDS]")
            t = m.group("t")
            if t is None and i > 0:
                raise WorkloadInputError("rate", f"step {part.strip()!r} needs @SECONDS")
            steps.append((float(t) if t is not None else 0.0, float(m.group("r"))))
        return cls(tuple(steps))

    @property
    def constant(self) -> bool:
        return len(self.steps) == 1

    @property
    def peak(self) -> float:
        return max(r for _, r in self.steps)

    @property
    def last_start(self) -> float:
        return self.steps[-1][0]

    def at(self, t_s: float) -> float:
        """Events per second at ``t_s`` seconds after the start."""
        i = bisect.bisect_right([t for t, _ in self.steps], max(t_s, 0.0)) - 1
        return self.steps[max(i, 0)][1]

    def events(self, duration_s: float) -> int:
        """Events the schedule sends in its first ``duration_s`` seconds."""
        total = 0.0
        for i, (t, r) in enumerate(self.steps):
            end = self.steps[i + 1][0] if i + 1 < len(self.steps) else math.inf
            total += r * max(min(end, duration_s) - t, 0.0)
        return int(round(total))

    def text(self) -> str:
        if self.constant:
            return f"{self.steps[0][1]:g}/s"
        return ", ".join(f"{r:g}/s from {t:g} s" for t, r in self.steps)
