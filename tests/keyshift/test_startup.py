"""The start-up clock: phases to the first batch, one line naming the largest."""

from __future__ import annotations

import time

from keyshift.startup import StartupClock, process_started


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_each_phase_is_the_time_since_the_one_before_and_the_largest_is_named() -> None:
    c = Clock(100.0)
    s = StartupClock(t0=98.0, clock=c)
    s.mark("imports")  # 2 s since the process started
    c.t = 112.0
    s.mark("Spark session")
    c.t = 112.05
    s.mark("tables")  # under a tenth: kept in the dict, not in the line
    c.t = 120.05
    s.mark("first executor")
    s.close()
    c.t = 200.0
    s.mark("a restart in place")  # after the first batch: not start-up
    assert s.as_dict() == {"imports": 2.0, "Spark session": 12.0, "tables": 0.05,
                           "first executor": 8.0, "total_s": 22.05}
    line = s.line()
    assert line.startswith("start-up: 22.0 s to the first batch (imports 2.0 s, Spark "
                           "session 12.0 s, first executor 8.0 s)")
    assert line.endswith("the largest: Spark session (54%)") and "tables" not in line


def test_the_clock_starts_at_the_process_start() -> None:
    started = process_started()
    assert started <= time.time() and time.time() - started < 24 * 3600
    s = StartupClock()
    assert s.t0 == started and s.line().startswith("start-up: 0.0 s")
