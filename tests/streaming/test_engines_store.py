"""The controller's window logic and the migration's plan diff, without Spark (the engine
state store: tests/streaming/test_engine_state.py)."""

from __future__ import annotations

import numpy as np
import pytest
from engines_support import MemoryControlLog

from keyshift.config import load_config
from keyshift.plan import Plan
from keyshift.streaming.controller import Controller, ControllerError, policy_params
from keyshift.streaming.migration import Migration


def test_migration_between_plans_groups_moves_by_engine() -> None:
    old = Plan(np.array([0, 1, 0, 1]), 2, 0)
    new = Plan(np.array([0, 0, 1, 1]), 2, 1)
    m = Migration.between("r", 5, old, new)
    assert m.migration_id == "r/b5/v1" and len(m) == 2
    assert m.moves_out() == {1: [1], 0: [2]}
    assert m.moves_in() == {0: [1], 1: [2]}
    assert len(Migration.between("r", 5, old, old)) == 0
    with pytest.raises(ValueError, match="groups"):
        Migration.between("r", 5, old, Plan(np.zeros(3, dtype=int), 1))


def test_controller_decides_per_window_and_recovers_from_its_log() -> None:
    cfg = load_config(env={})
    log = MemoryControlLog()
    c = Controller(cfg, "r", "dlb-h", groups=8, initial_engines=2, windows=2, log=log)
    c.recover(0)
    assert c.plan_for(0).version == 0 and len(log.plans_written) == 1
    skew = np.array([50, 1, 1, 1, 40, 1, 1, 1], dtype=float)  # KG puts 90 % on engine 0
    c.collect(0, skew, skew)
    log.loads[0] = skew
    assert c.end_of_batch(0) is None  # the window has two batches
    c.collect(1, skew, skew)
    d = c.end_of_batch(1)
    assert d is not None and d.changed and len(d.moves) >= 1
    assert c.plan_for(1).version == 0 and c.plan_for(2).version == 1
    assert log.decisions[-1]["action"] == "rebalance" and log.decisions[-1]["reason"]

    # a restarted controller routes every batch as the first one did
    again = Controller(cfg, "r", "dlb-h", groups=8, initial_engines=2, windows=2, log=log)
    again.recover(2)
    assert np.array_equal(again.plan_for(2).assignment, c.plan_for(2).assignment)
    assert again.plan_for(1).version == 0


def test_controller_mid_window_restart_reloads_the_window() -> None:
    cfg = load_config(env={})
    log = MemoryControlLog()
    log.loads[0] = np.array([9.0, 0, 0, 0])
    c = Controller(cfg, "r", "dlb-h", groups=4, initial_engines=2, windows=2, log=log)
    c.recover(1)
    assert c._window.loads.tolist() == [9.0, 0, 0, 0]


def test_fixed_plan_policies_and_bad_config() -> None:
    cfg = load_config(env={})
    log = MemoryControlLog()
    kg = Controller(cfg, "r", "kg", groups=4, initial_engines=2, windows=1, log=log)
    kg.recover(0)
    kg.collect(0, np.array([9.0, 0, 0, 0]), np.zeros(4))
    d = kg.end_of_batch(0)
    assert d.action == "none" and not d.changed and log.decisions[-1]["action"] == "none"
    assert kg.last_decision is d and "fixed plan" in d.reason
    with pytest.raises(ControllerError, match="controller.policy"):
        Controller(cfg, "r", "lptf", groups=4, initial_engines=2, windows=1,
                   log=MemoryControlLog()).recover(0)
    with pytest.raises(ControllerError, match="window_s"):
        Controller(cfg, "r", "kg", groups=4, initial_engines=2, windows=0, log=log)


def test_policy_params_follow_the_constructor() -> None:
    cfg = load_config(env={}, controller={"band_low": 40.0, "band_high": 60.0, "theta": 12.0})
    assert policy_params(cfg, "dlb-h") == {"theta": 12.0}
    elb = policy_params(cfg, "elb")
    assert elb["band"] == (40.0, 60.0) and elb["max_engines"] == cfg.engines.max
    assert "band" not in policy_params(load_config(env={}), "elb")


def _hot_key_window(c: Controller) -> np.ndarray:
    """One group on engine 0 outweighs everything else; engines 1 and 2 are uneven."""
    a = c.plan_for(0).assignment
    loads = np.zeros(a.size)
    loads[np.flatnonzero(a == 0)[0]] = 100.0
    loads[np.flatnonzero(a == 1)] = 30.0 / max(1, int((a == 1).sum()))
    loads[np.flatnonzero(a == 1)[:2]] += 20.0
    loads[np.flatnonzero(a == 2)] = 1.0
    return loads


@pytest.mark.parametrize("min_gain", [0.05, 0.0])
def test_a_rebalance_that_cannot_shorten_the_batch_is_declined(min_gain: float) -> None:
    """A hot key keeps imbScore above θ whatever the plan: DLB-H still shuffles the light
    engines, which costs a migration and shortens no batch. min_gain declines it (recorded
    with the reason); 0 realizes the policy's decision as the paper's algorithm would."""
    cfg = load_config(env={}, controller={"min_gain": min_gain})
    log = MemoryControlLog()
    c = Controller(cfg, "r", "dlb-h", groups=32, initial_engines=3, windows=1, log=log)
    c.recover(0)
    loads = _hot_key_window(c)
    c.collect(0, loads, loads)
    d = c.end_of_batch(0)
    row = log.decisions[-1]
    if min_gain:
        assert d.action == "declined" and not d.changed and c.plan_for(1).version == 0
        assert row["action"] == "declined" and row["plan_version"] is None
        assert row["reason"].startswith("declined:") and "controller.min_gain" in row["reason"]
        assert row["moved_groups"] == 0
    else:
        assert d is not None and d.changed and c.plan_for(1).version == 1
        moved = c.plan_for(1).assignment != c.plan_for(0).assignment
        assert moved.any() and not moved[loads == 100.0].any()  # the hot group cannot move
        assert row["action"] == "rebalance"


def test_min_gain_must_be_a_fraction() -> None:
    from keyshift.config import ConfigError

    with pytest.raises(ConfigError, match="min_gain"):
        load_config(env={}, controller={"min_gain": 1.5})


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_timed_windows_decide_on_time_and_a_restart_closes_where_the_first_attempt_did(
) -> None:
    from datetime import UTC, datetime

    from keyshift.control.window_clock import TimedWindows

    cfg = load_config(env={})  # controller.window_s = 10
    log, clock = MemoryControlLog(), _Clock()
    c = Controller(cfg, "r", "dlb-h", groups=8, initial_engines=2,
                   windows=TimedWindows(10.0), log=log, clock=clock)
    c.recover(0)
    skew = np.array([50, 1, 1, 1, 40, 1, 1, 1], dtype=float)
    closed = {}
    # batches of 4 s, then one of 35 s (a spike's batch), then 4 s again
    for b, length in enumerate([4, 4, 4, 35, 4, 4, 4]):
        started = datetime.fromtimestamp(clock.t, UTC)
        c.collect(b, skew, skew, started=started)
        log.loads[b] = skew
        clock.t += length
        d = c.end_of_batch(b)
        if d is not None:
            closed[b] = d
    # ends at 1004, 1008, 1012 (closes the first window), 1047 (spans 1020, 1030, 1040),
    # 1051 (closes 1050)
    assert sorted(closed) == [2, 3, 4]
    assert [d.window for d in closed.values()] == [0, 1, 2]
    assert closed[3].reason.endswith("; batch 3 spanned 3 windows of 10 s, decided at its end")
    assert all("spanned" not in r["reason"] for d in (closed[2], closed[4]) for r in d.rows)
    assert [r.batch_id for r in sorted(log.records(), key=lambda r: r.batch_id)] == [2, 3, 4]
    # dc / wc split on the last closed window's loads: batch 4's own window
    np.testing.assert_array_equal(c.last_window_loads(), skew)

    # a driver restarted at batch 3 (the first attempt's records of 3 and 4 kept) closes at
    # 3 and 4 again however long its batches take now, and its open window starts at 3
    again = Controller(cfg, "r", "dlb-h", groups=8, initial_engines=2,
                       windows=TimedWindows(10.0), log=log, clock=clock)
    again.recover(3)
    assert again.window_index == 1 and again._window.first_batch == 3
    # the last window closed before the restart (batches 0-2), read back from key loads
    np.testing.assert_array_equal(again.last_window_loads(), 3 * skew)
    ends = []
    for b in (3, 4, 5):
        again.collect(b, skew, skew, started=datetime.fromtimestamp(clock.t, UTC))
        clock.t += 1
        ends.append(again.end_of_batch(b) is not None)
    assert ends == [True, True, False]
