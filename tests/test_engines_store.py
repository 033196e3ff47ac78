"""The engine's versioned state store and the controller's window logic, without Spark."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from engines_support import MemoryControlLog

from keyshift.config import load_config
from keyshift.plan import Plan
from streaming.controller import Controller, ControllerError, policy_params
from streaming.engines import TASK, BatchSpec, EngineStore, run_engine, work_seconds
from streaming.migration import Migration


def test_store_versions_rollback_and_prune(tmp_path) -> None:
    s = EngineStore(tmp_path, 3)
    s.save(0, {1: b"a0", 2: b"b0"})
    s.save(1, {1: b"a1"})
    assert s.load([1, 2], before=1) == {1: b"a0", 2: b"b0"}
    assert s.load([1, 2], before=2) == {1: b"a1", 2: b"b0"}
    s.save(2, {1: b"a2"})  # prunes a0: nothing can restart before batch 2's base any more
    rows = s._db.execute("SELECT version FROM state WHERE grp = 1 ORDER BY version").fetchall()
    assert [v for (v,) in rows] == [1, 2]
    s.rollback(2)  # a re-executed batch 2 starts from what batch 1 left
    assert s.load([1], before=3) == {1: b"a1"}
    s.save(2, {2: None})  # group 2 leaves this engine in batch 2
    assert s.load([2], before=3) == {}
    assert s.owned() == {1}
    s.close()


def test_store_buffer_keeps_order_and_survives_reopen(tmp_path) -> None:
    s = EngineStore(tmp_path, 0)
    s.buffer(4, [(7, {"id": "x", "ts": 2}), (7, {"id": "y", "ts": 3}), (8, {"id": "z", "ts": 1})])
    s.close()
    s = EngineStore(tmp_path, 0)
    assert [e["id"] for _, e in s.buffered(4, [7, 8])] == ["x", "y", "z"]
    s.clear_buffer(4, [7])
    assert [e["id"] for _, e in s.buffered(4, [7, 8])] == ["z"]
    s.rollback(4)
    assert s.buffered(4, [8]) == []
    s.close()


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
    c = Controller(cfg, "r", "dlb-h", groups=8, engines=2, batches_per_window=2, log=log)
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
    again = Controller(cfg, "r", "dlb-h", groups=8, engines=2, batches_per_window=2, log=log)
    again.recover(2)
    assert np.array_equal(again.plan_for(2).assignment, c.plan_for(2).assignment)
    assert again.plan_for(1).version == 0


def test_controller_mid_window_restart_reloads_the_window() -> None:
    cfg = load_config(env={})
    log = MemoryControlLog()
    log.loads[0] = np.array([9.0, 0, 0, 0])
    c = Controller(cfg, "r", "dlb-h", groups=4, engines=2, batches_per_window=2, log=log)
    c.recover(1)
    assert c._window.loads.tolist() == [9.0, 0, 0, 0]


def test_fixed_plan_policies_and_bad_config() -> None:
    cfg = load_config(env={})
    log = MemoryControlLog()
    kg = Controller(cfg, "r", "kg", groups=4, engines=2, batches_per_window=1, log=log)
    kg.recover(0)
    kg.collect(0, np.array([9.0, 0, 0, 0]), np.zeros(4))
    assert kg.end_of_batch(0) is None and log.decisions[-1]["action"] == "none"
    with pytest.raises(ControllerError, match="controller.policy"):
        Controller(cfg, "r", "lptf", groups=4, engines=2, batches_per_window=1,
                   log=MemoryControlLog()).recover(0)
    with pytest.raises(ControllerError, match="window_s"):
        Controller(cfg, "r", "kg", groups=4, engines=2, batches_per_window=0, log=log)


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
    c = Controller(cfg, "r", "dlb-h", groups=32, engines=3, batches_per_window=1, log=log)
    c.recover(0)
    loads = _hot_key_window(c)
    c.collect(0, loads, loads)
    d = c.end_of_batch(0)
    row = log.decisions[-1]
    if min_gain:
        assert d is None and c.plan_for(1).version == 0
        assert row["action"] == "none" and row["plan_version"] is None
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


def test_engine_task_separates_the_wait_for_input_from_its_work(tmp_path) -> None:
    """Lat counts engine work only: rows that arrive late (a shuffle fetch) are waited for,
    and that wait is recorded apart from the task's duration."""

    def late_rows(n: int, delay_s: float):
        time.sleep(delay_s)  # nothing has arrived yet
        for i in range(n):
            event = {"key": f"w{i % 7}", "word": f"w{i % 7}", "ts": 1_700_000_000_000 + i,
                     "id": f"e{i}"}
            yield 0, (i % 5, 0, i, json.dumps(event), None, None, 1_700_000_000.0 + i / 1e3)

    spec = BatchSpec(0, "wordcount", {"window_s": 1.0}, str(tmp_path))
    tasks = [rec for kind, rec in run_engine(spec, 0, late_rows(50, 0.2)) if kind == TASK]
    (task,) = tasks
    assert task["events"] == 50
    assert 0.2 <= task["input_wait_s"] <= task["duration_s"]
    assert work_seconds(tasks) == pytest.approx(task["duration_s"] - task["input_wait_s"])
    spec1 = BatchSpec(1, "wordcount", {"window_s": 1.0}, str(tmp_path))
    (empty,) = [rec for kind, rec in run_engine(spec1, 0, late_rows(0, 0.1)) if kind == TASK]
    assert empty["events"] == 0 and empty["input_wait_s"] >= 0.1  # no row: all of it waited
