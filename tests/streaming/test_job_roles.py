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


def test_a_window_splits_the_head_of_the_last_closed_window_once_per_plan() -> None:
    last: list[np.ndarray | None] = [None]
    reads: list[int] = []

    def last_loads() -> np.ndarray | None:
        reads.append(1)
        return last[0]

    sw = SplitWindows(Head(), last_loads)
    plan = Plan.hashed(GROUPS, 2)
    assert sw.split_for(0, plan) == ()  # the first window splits nothing
    last[0] = np.array([18, 2, 0, 0, 0, 0, 0, 0.0])  # window 0 closed
    assert sw.split_for(1, plan) == (0,) and sw.split_for(1, plan) == (0,)
    assert len(reads) == 2  # once per window: the second batch of window 1 reused it
    last[0] = np.array([2, 18, 0, 0, 0, 0, 0, 0.0])
    assert sw.split_for(2, plan) == (1,)
    # a new plan of one engine: nothing to split onto
    assert sw.split_for(2, Plan.hashed(GROUPS, 1, version=1)) == ()
    assert SplitWindows(None, last_loads).split_for(4, plan) == ()  # no splitter


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
