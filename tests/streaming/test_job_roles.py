"""Roles taken out of StreamJob, tested without Spark: the dc/wc split per batch
(streaming/split_windows.py), a migration's measured pause (streaming/migration.py
PauseMeter) and the staged bookkeeping's flushes (streaming/flush.py)."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.plan import Plan
from keyshift.streaming.migration import Migration, PauseMeter
from keyshift.streaming.split_windows import SplitWindows

GROUPS = 8


class Head:
    """A splitter whose head is every group above a quarter of the window's load."""

    def head(self, shares: np.ndarray, n: int):
        return [int(g) for g in np.argsort(-shares) if shares[g] > 0.25], None


def test_a_batch_splits_the_head_of_the_last_complete_window() -> None:
    reads: list[tuple[int, int]] = []
    sw = SplitWindows(Head(), GROUPS, 2, lambda a, b: reads.append((a, b)) or np.zeros(GROUPS))
    plan = Plan.hashed(GROUPS, 2)
    assert sw.split_for(0, plan) == ()  # the first window splits nothing
    sw.count(0, np.array([9, 1, 0, 0, 0, 0, 0, 0.0]))
    sw.count(1, np.array([9, 1, 0, 0, 0, 0, 0, 0.0]))
    assert sw.split_for(2, plan) == (0,) and sw.split_for(3, plan) == (0,)
    assert reads == []  # the window was counted here, nothing read back


def test_a_restart_reads_the_loads_it_did_not_count_and_splits_as_before() -> None:
    stored = {0: np.array([9, 1, 0, 0, 0, 0, 0, 0.0]), 1: np.array([9, 1, 0, 0, 0, 0, 0, 0.0]),
              2: np.array([1, 9, 0, 0, 0, 0, 0, 0.0])}

    def read(a: int, b: int) -> np.ndarray:
        return sum((stored[i] for i in range(a, b)), np.zeros(GROUPS))

    plan = Plan.hashed(GROUPS, 2)
    sw = SplitWindows(Head(), GROUPS, 2, read)  # a restart at batch 3: window 1 open
    assert sw.split_for(3, plan) == (0,)  # from window 0, read back
    sw.count(3, np.array([1, 9, 0, 0, 0, 0, 0, 0.0]))  # joins mid-window: batch 2 read back
    assert sw.split_for(4, plan) == (1,)
    assert SplitWindows(None, GROUPS, 2, read).split_for(4, plan) == ()  # no splitter


def test_a_pause_is_the_engine_seconds_beyond_calm_batches_plus_the_wait() -> None:
    meter = PauseMeter(calm=3)
    for s in (1.0, 9.0, 1.2, 1.1):  # the 9-s batch is pushed out of the last three
        meter.calm_batch(s)
    old, new = Plan.hashed(GROUPS, 1), Plan.hashed(GROUPS, 2)
    m = meter.measure(Migration.between("r", 7, old, new), old, new, moved=4096,
                      engines_s=3.1, rate=50.0, waited_s=0.5)
    assert m.batch_id == 7 and m.groups == 4 and m.bytes == 4096
    assert m.pause_s == pytest.approx(3.1 - 1.2 + 0.5) and m.scale
    assert (m.engines_before, m.engines_after) == (1, 2)
    # nothing calm yet: the batch is its own baseline, only the wait is a pause
    assert PauseMeter().measure(Migration.between("r", 1, old, new), old, new, 0, 3.0,
                                1.0).pause_s == 0.0


class FakeStaging:
    def __init__(self) -> None:
        self.pending, self.commits, self.behind, self.waited = True, 0, [], 0

    def finished(self) -> dict[str, float]:
        return {"metrics": 0.4} if self.behind else {}

    def due(self, before: int) -> bool:
        return before % 2 == 1

    def commit_behind(self, before: int) -> None:
        self.behind.append(before)

    def commit(self) -> int:
        self.commits += 1
        self.pending = False
        return 1

    def wait(self) -> None:
        self.waited += 1


class FakeWatch:
    def __init__(self) -> None:
        self.calls, self.resumed_quietly = 0, 0

    def call(self, fn):
        self.calls += 1
        return fn()

    def failed(self, exc: BaseException) -> bool:
        return False

    def resumed(self, announce: bool = True) -> None:
        self.resumed_quietly += not announce


class FakeTimer:
    made: list[FakeTimer] = []

    def __init__(self, after_s: float, fn) -> None:
        self.after_s, self.fn, self.cancelled, self.daemon = after_s, fn, False, False
        FakeTimer.made.append(self)

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        self.cancelled = True


def test_the_flushes_behind_the_stream_when_idle_and_at_stop() -> None:
    import threading

    from keyshift.streaming.flush import Flush

    st, watch, lock = FakeStaging(), FakeWatch(), threading.Lock()
    FakeTimer.made.clear()
    f = Flush(st, watch, lock, 5.5, timer=FakeTimer)
    assert f.after_batch(0) == {} and st.behind == []  # not due
    assert f.after_batch(1) == {} and st.behind == [1]
    f.when_idle()
    f.when_idle()  # a later batch re-arms: the first timer is cancelled
    first, second = FakeTimer.made
    assert first.cancelled and second.after_s == 5.5
    with lock:  # a batch runs: the idle flush gives way
        second.fn()
    assert st.commits == 0
    second.fn()
    assert st.commits == 1
    st.pending = True
    assert f.now() >= 0.0 and st.commits == 2 and watch.calls == 1
    assert watch.resumed_quietly == 1
    f.abandon()
    assert st.waited == 1
