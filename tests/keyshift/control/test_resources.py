"""Engines as executors (keyshift.control.resources), pure: the executors a plan needs, the
order of a scale-out (ask, wait bounded, say what came) and of a scale-in (release after
the moving batch, the executors that ran fewest engines, newest first), against a fake
cluster manager with a fixed clock."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from keyshift.control.resources import ExecutorBudget, ExecutorScaler, to_release


class FakeManager:
    """A cluster manager whose executors register ``start_s`` after a request (at most
    ``capacity`` at once) and leave ``gone_s`` after a release."""

    def __init__(self, held: int, capacity: int = 8, start_s: float = 9.0,
                 gone_s: float = 6.0) -> None:
        self.now = 0.0
        self.capacity = capacity
        self.start_s, self.gone_s = start_s, gone_s
        self.next_id = held
        self.ids = [str(i) for i in range(held)]
        self.coming: list[float] = []  # registration times of requested executors
        self.leaving: dict[str, float] = {}
        self.requests: list[int] = []
        self.target = held

    def _tick(self) -> None:
        for t in [t for t in self.coming if t <= self.now]:
            self.coming.remove(t)
            if len(self.ids) < self.capacity:
                self.ids.append(str(self.next_id))
                self.next_id += 1
        for e, t in list(self.leaving.items()):
            if t <= self.now:
                self.ids.remove(e)
                del self.leaving[e]

    def held(self) -> list[str]:
        self._tick()
        return list(self.ids)

    def request_total(self, total: int) -> bool:
        """Launches up to the total (as a standalone master does), counting what is held
        and on its way; the kills lowered the target."""
        self.requests.append(total)
        self.target = total
        more = total - (len(self.held()) - len(self.leaving)) - len(self.coming)
        self.coming += [self.now + self.start_s] * max(more, 0)
        return True

    def release(self, ids: Sequence[str]) -> list[str]:
        for e in ids:
            self.leaving[e] = self.now + self.gone_s
        self.target = max(self.target - len(ids), 0)
        return list(ids)

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def scaler(m: FakeManager, per: int = 1, lo: int = 1, hi: int = 8,
           wait_s: float = 30.0, block: bool = True) -> ExecutorScaler:
    return ExecutorScaler(m, ExecutorBudget(per, lo, hi), wait_s, clock=m.clock,
                          sleep=m.sleep, poll_s=0.5, block=block)


def test_budget_is_engines_over_engines_per_executor_within_bounds() -> None:
    b = ExecutorBudget(2, 1, 3)
    assert [b.needed(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 1, 2, 2, 3, 3]
    assert ExecutorBudget(1, 2, 4).needed(1) == 2
    with pytest.raises(ValueError, match="engines_per_executor"):
        ExecutorBudget(0)
    with pytest.raises(ValueError, match="max_executors"):
        ExecutorBudget(1, 3, 2)


def test_release_order_keeps_the_executors_that_ran_engines() -> None:
    held = ["0", "1", "2", "3"]
    # 3 ran two engines, 0 one, 1 and 2 none: keep 3 and 0; among 1 and 2 the newest goes first
    assert to_release(held, 2, {"3": 2, "0": 1}) == ["2", "1"]
    assert to_release(held, 4, {}) == []
    assert to_release(held, 3, {}) == ["3"]  # nothing known: the newest


def test_scale_out_asks_first_and_waits_until_they_register() -> None:
    m = FakeManager(held=1, start_s=9.0)
    s = scaler(m)
    asked = s.prepare(live_engines=3, batch_id=10)
    assert asked is not None and m.requests == [3]  # the total, not a number to add
    m.now += 2.0  # the decision's batch writes meanwhile
    done = s.ready(3, 11)
    assert done is asked and done.came == 3 and done.ready_s == pytest.approx(9.0)
    assert "executors 1 -> 3 asked, 3 held after 9.0 s" == done.text()
    assert s.ready(3, 12) is None and m.requests == [3]  # nothing more to do


def test_a_scale_out_that_runs_on_does_not_wait_and_closes_when_they_register() -> None:
    """``block=False``: the new plan's first batch runs at once on what is held; the
    request closes at the first look after its executors registered, the latency to that
    look, and nothing is asked twice meanwhile."""
    m = FakeManager(held=1, start_s=9.0)
    s = scaler(m, block=False)
    asked = s.prepare(live_engines=2, batch_id=10)
    m.now += 2.0
    assert s.ready(2, 11) is None and m.now == 2.0  # no sleep: the batch runs
    m.now += 5.0  # that batch ran 5 s on the one core
    assert s.settle(2, 11, {"0": 2}) is None and asked.ready_s is None
    assert s.prepare(2, 11) is None and m.requests == [2]  # asked already
    m.now += 4.0  # registered at 9 s; the next look is at 11 s
    assert s.ready(2, 12) is asked and asked.came == 2 and asked.ready_s == pytest.approx(11.0)
    assert s.ready(2, 13) is None and s.settle(2, 13, {"0": 1, "1": 1}) is None
    s.prepare(3, 20)
    m.now += 12.0  # a look after the batch closes it too, and returns it to be said
    assert s.settle(3, 21, {"0": 1, "1": 1}).came == 3


def test_a_scale_out_that_runs_on_says_when_its_wait_ran_out() -> None:
    m = FakeManager(held=1, capacity=1)  # no room
    s = scaler(m, wait_s=20.0, block=False)
    s.prepare(2, 0)
    assert s.ready(2, 1) is None
    m.now = 21.0
    done = s.settle(2, 1, {"0": 2})
    assert done.came == 1 and done.ready_s == pytest.approx(21.0)
    assert "executor_wait_s ran out" in done.text()


def test_scale_out_that_does_not_get_its_executors_is_bounded_and_says_so() -> None:
    m = FakeManager(held=1, capacity=2)  # the cluster has room for one more
    s = scaler(m, wait_s=20.0)
    s.prepare(4, 0)
    done = s.ready(4, 1)
    assert done.came == 2 and done.ready_s == pytest.approx(20.0)
    assert "executor_wait_s ran out; the engines share the 2 that came" in done.text()


def test_a_plan_in_force_that_lacks_executors_asks_before_its_batch() -> None:
    # a restart mid-scale-out: no decision was seen, the plan in force needs 2
    m = FakeManager(held=1, start_s=3.0)
    s = scaler(m)
    done = s.ready(2, 5)
    assert m.requests == [2] and done.came == 2


def test_an_executor_lost_later_is_not_waited_for_again() -> None:
    m = FakeManager(held=2, capacity=2)
    s = scaler(m, wait_s=30.0)
    assert s.ready(2, 0) is None  # the manager gave what the plan needs
    m.ids.remove("1")  # its worker died; no room for another
    assert s.ready(2, 1) is None and m.now == 0.0 and m.requests == []
    m.capacity = 3  # a plan that needs more than was asked asks (and waits) again
    assert s.ready(3, 2).came == 3 and m.requests == [3]


def test_scale_in_releases_after_the_batch_and_measures_when_they_are_gone() -> None:
    m = FakeManager(held=3, gone_s=6.0)
    s = scaler(m)
    assert s.prepare(1, 0) is None  # a scale-in asks nothing before its moves
    rel = s.settle(1, 1, engines_on={"1": 1})
    assert rel.released == ["2", "0"] and s.held() == 1
    assert m.requests == [1] and m.target == 1  # the total kept, whatever the kills left
    assert rel.ready_s is None  # still leaving
    m.now += 3.0
    s.settle(1, 2, {"1": 1})
    assert rel.ready_s is None and len(s.actions) == 1  # not released twice
    m.now += 4.0
    assert s.settle(1, 3, {"1": 1}) is None
    assert rel.ready_s == pytest.approx(7.0) and m.held() == ["1"]
    assert "released executors id 2, 0, gone after 7.0 s" in rel.text()


def test_start_gives_back_what_the_first_plan_does_not_need() -> None:
    m = FakeManager(held=4)
    s = scaler(m, lo=1)
    rel = s.start(live_engines=2)
    assert rel is not None and len(rel.released) == 2 and s.held() == 2
    assert scaler(FakeManager(held=1)).start(2) is None  # too few is a scale-out's job


def test_one_cycle_up_and_down_holds_what_the_plan_needs() -> None:
    m = FakeManager(held=1, start_s=5.0, gone_s=2.0)
    s = scaler(m, hi=2)
    held = []
    for batch, live in enumerate([1, 1, 2, 2, 2, 1, 1, 1]):
        s.prepare(live, batch)  # the decision that made this plan (idempotent)
        s.ready(live, batch)
        s.settle(live, batch, {})
        m.now += 1.0
        held.append(len(m.held()))
    assert held == [1, 1, 2, 2, 2, 2, 1, 1]
    assert [a.kind for a in s.actions] == ["request", "release"]


def test_negative_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="executor_wait_s"):
        ExecutorScaler(FakeManager(1), ExecutorBudget(1), -1.0)
