"""The pure control loop's units: the evaluation, the vetoes, the plan diff, the recommend
mode and the in-memory store."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.config import ConfigError, load_config
from keyshift.control import (
    ControlLoop,
    ControlRecord,
    FunctionForecaster,
    LoopSettings,
    MemoryControlStore,
    ScalerState,
    WindowSample,
    WindowStats,
    evaluate,
    loop_from_config,
    min_gain_veto,
    plan_action,
    plan_diff,
)
from keyshift.elastic.cost import Forecast
from keyshift.metrics import Balance
from keyshift.plan import Plan

SKEW = np.array([50, 1, 1, 1, 40, 1, 1, 1], dtype=float)  # KG over 2: 90 % on engine 0


def window(loads: np.ndarray, batch: int = 0, lat_s: float | None = None) -> WindowStats:
    w = WindowStats.empty(batch, loads.size, batch)
    w.add_batch(batch, loads, loads, engine_s=None if lat_s is None else lat_s * loads.sum(),
                started=100.0)
    return w


# -- evaluate ---------------------------------------------------------------------------------
def test_evaluation_names_imbalance_utilisation_and_forecast_error() -> None:
    plan = Plan.hashed(8, 2)
    w = window(SKEW, lat_s=0.05)
    ev = evaluate(w, plan, window_s=10.0, theta=15.0, theta2=0.5, expected=(50.0, 0.05))
    assert ev.balance == Balance.of(plan.engine_loads(SKEW))
    assert ev.max_load == 92.0 and ev.tuples == SKEW.sum()
    assert ev.utilisation == pytest.approx(SKEW.sum() * 0.05 / (10.0 * 2))
    assert ev.forecast_error == pytest.approx((SKEW.sum() - 50) / 50)
    assert ev.over_theta and ev.over_theta2
    calm = evaluate(window(np.ones(8)), plan, 10.0, theta=15.0, theta2=0.5)
    assert calm.lat_s is None and calm.utilisation is None and calm.forecast_error is None
    assert not calm.over_theta and not calm.over_theta2
    assert "imbScore 0.0%" in calm.summary()


def test_window_stats_time_only_timed_batches() -> None:
    w = WindowStats.empty(3, 2, 6)
    w.add_batch(6, np.array([10.0, 10.0]), np.zeros(2), engine_s=2.0, started=50.0)
    w.add_batch(7, np.array([5.0, 5.0]), np.zeros(2), engine_s=None, started=60.0)
    assert w.tuples == 30 and w.lat_s == pytest.approx(0.1) and w.last_batch == 7
    assert w.sample(2, now=0.0) == WindowSample(50.0, 30.0, pytest.approx(0.1), 2)


# -- vetoes and the plan diff --------------------------------------------------------------------
def test_min_gain_veto() -> None:
    old = Plan(np.array([0, 0, 1, 1]), 2)
    loads = np.array([100.0, 1.0, 30.0, 20.0])
    light = Plan(np.array([0, 1, 1, 0]), 2)  # moves light groups: max 101 -> 120
    assert "controller.min_gain 5%" in min_gain_veto(old, light, loads, 0.05)
    assert min_gain_veto(old, light, loads, 0.0) == ""  # off
    better = Plan(np.array([0, 1, 1, 1]), 2)  # 101 -> 100: ~1 %, below 5 %
    assert min_gain_veto(old, better, loads, 0.05) != ""
    assert min_gain_veto(old, better, loads, 0.005) == ""
    wider = Plan(np.array([0, 2, 1, 1]), 3)  # a change of N always passes
    assert min_gain_veto(old, wider, loads, 0.5) == ""


def test_plan_diff_and_action() -> None:
    old = Plan(np.array([0, 1, 0, 1]), 2)
    new = Plan(np.array([0, 0, 1, 1]), 2)
    moves = plan_diff(old, new, np.array([1.0, 2.0, 3.0, 4.0]))
    assert moves.groups.tolist() == [1, 2] and moves.total_state == 5.0
    assert plan_action(old, new) == "rebalance" and plan_action(old, old) == "none"
    assert plan_action(old, Plan(np.array([0, 1, 2, 1]), 3)) == "scale_out"
    assert plan_action(Plan(np.array([0, 1, 2, 1]), 3), old) == "scale_in"


# -- recommend mode ---------------------------------------------------------------------------
def test_act_and_recommend_decide_alike_and_only_act_realizes() -> None:
    decided = {}
    for mode in ("act", "recommend"):
        cfg = load_config(env={}, controller={"mode": mode, "min_gain": 0.0})
        store = MemoryControlStore()
        loop = loop_from_config(cfg, store, "dlb-h", run_id="r")
        loop.start(Plan.hashed(8, 2))
        d = loop.step(window(SKEW))
        decided[mode] = d
        row = store.decisions[-1]
        assert d.action == "rebalance" and row["action"] == "rebalance"
        if mode == "act":
            assert d.realized and d.changed and loop.plan_for(1).version == 1
            assert [p.version for p in store.plans_written] == [0, 1]
            assert row["plan_version"] == 1 and not row["reason"].startswith("recommend")
        else:
            assert not d.realized and not d.changed and d.after is d.before
            assert loop.plan_for(1).version == 0 and len(store.plans_written) == 1
            assert row["plan_version"] is None and row["engines_after"] == 2
            assert row["reason"].startswith("recommend only, not realized: imbScore")
            # no plan change, no scaler: the record says only where the window closed
            assert store.records() == [ControlRecord(0, 0)]
            assert "(recommended)" in d.progress()
    a, r = decided["act"], decided["recommend"]
    assert np.array_equal(a.candidate.assignment, r.candidate.assignment)
    assert len(a.moves) == len(r.moves) > 0


def _always(engines_in: float):
    def forecast(_first: int, horizon: int) -> Forecast:
        k = 6
        return Forecast(np.full(horizon, engines_in), np.zeros(horizon),
                        np.full((horizon, k), 0.01), np.zeros((horizon, k)))
    return FunctionForecaster(forecast, "test forecast")


def test_recommend_mode_keeps_the_engine_count() -> None:
    for mode in ("act", "recommend"):
        cfg = load_config(env={}, controller={"mode": mode, "window_s": 10.0},
                          engines={"initial": 2, "min": 1, "max": 6},
                          planner={"enabled": True, "horizon": 3, "mc": 10.0, "rc": 0.1,
                                   "overrule_windows": 0})  # the paper's planner alone
        store = MemoryControlStore()
        loop = loop_from_config(cfg, store, "kg", _always(4000.0), balance=False)
        loop.start(Plan.hashed(12, 2))
        d = loop.step(window(np.full(12, 300.0), lat_s=0.01))
        assert d.action == "scale_out" and d.component == "scaler"
        scaler_row = store.decisions[0]
        assert scaler_row["component"] == "scaler" and scaler_row["action"] == "scale_out"
        (rec,) = store.records()
        if mode == "act":
            assert d.after.parallelism == 4 and rec.plan_version == 1
        else:
            assert d.after.parallelism == 2 and loop.plan_for(1).parallelism == 2
            assert scaler_row["engines_after"] == 2 and scaler_row["plan_version"] is None
            assert scaler_row["reason"].startswith("recommend only, not realized: forecast: test")
            assert rec.plan_version is None and rec.scaler.proposed == 4


def test_mode_is_validated_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="controller.mode"):
        load_config(env={}, controller={"mode": "dry"})
    with pytest.raises(ValueError, match="controller.mode"):
        LoopSettings(window_s=1.0, mode="dry")
    assert load_config(env={}).controller.mode == "act"


# -- the in-memory store ------------------------------------------------------------------------
def test_memory_store_is_idempotent_like_delta() -> None:
    s = MemoryControlStore()
    p = Plan.hashed(4, 2)
    s.write_plan(p, "kg", "initial plan", -1)
    s.write_plan(p, "kg", "again", -1)
    assert s.plans(4) == [p] and s.plans(8) == []
    s.loads[0], s.loads[1] = np.ones(4), np.full(4, 2.0)
    s.state[0], s.state[1] = np.array([5.0, 0, 0, 0]), np.array([1.0, 7.0, 0, 0])
    loads, state = s.window_loads(0, 2, 4)
    assert loads.tolist() == [3.0] * 4 and state.tolist() == [5.0, 7.0, 0, 0]
    rec = ControlRecord(3, 3, 1, WindowSample(1.0, 2.0, None, 2),
                        ScalerState((2, 3), 1, 0, 10.0, 0.1, 3, 3, "why"))
    s.write_record(rec)
    s.write_record(rec)
    assert s.records() == [rec]
    s.write_decisions([{"batch_id": 3, "action": "none"}], 3)
    s.write_decisions([{"batch_id": 3, "action": "rebalance"}], 3)  # a re-executed batch
    assert [r["action"] for r in s.decisions] == ["none"]


class _UnreadStore(MemoryControlStore):
    """A store whose reads fail: a fresh run must not read it."""

    def plans(self, groups):
        raise AssertionError("plans read")

    def records(self):
        raise AssertionError("records read")

    def migration_costs(self):
        raise AssertionError("migration costs read")


def test_a_fresh_run_starts_without_reading_the_store() -> None:
    """No process of the run started before: nothing of it is in the store, and its reads
    (Delta on a cluster: seconds of the start-up) are skipped; the initial plan is written."""
    cfg = load_config(env={}, planner={"enabled": True, "rc_source": "learned"})
    store = _UnreadStore()
    loop = loop_from_config(cfg, store, "dlb-h", _always(100.0), run_id="r")
    assert loop.scaler is not None and loop.reconfiguration is not None
    loop.start(Plan.hashed(8, 2), 0, fresh=True)
    assert [p.version for p in store.plans_written] == [0] and loop.last_closed is None
    with pytest.raises(AssertionError, match="records read"):
        loop.start(Plan.hashed(8, 2), 0)  # a resumed run at batch 0 reads its records


def test_loop_rejects_nothing_it_cannot_explain() -> None:
    """A fixed plan: every window has one row saying so, nothing stored."""
    store = MemoryControlStore()
    loop = ControlLoop(store, LoopSettings(window_s=1.0), None, "kg")
    loop.start(Plan.hashed(8, 2))
    d = loop.step(window(SKEW))
    assert d.action == "none" and d.reason == "kg is a fixed plan"
    assert [(r.batch_id, r.plan_version) for r in store.records()] == [(0, None)]
    assert d.evaluation.balance.rstd > 0 and len(store.decisions) == 1


# -- the floor: what no key-granular plan can beat -------------------------------------------------
HOT = np.array([60.0, 5, 5, 5, 5, 5, 5, 5, 5, 0])  # group 0: 60 % of the window


def test_the_balancer_says_when_the_plan_is_at_the_floor() -> None:
    """One key group holds 60 % of the window on 2 engines: DLB-H first takes the other
    groups off its engine (80/20 -> 60/40), then imbScore stays at 20 % > θ whatever it
    does, and the reason says why; every row records the window's floor."""
    cfg = load_config(env={}, controller={"theta": 15.0})
    store = MemoryControlStore()
    loop = loop_from_config(cfg, store, "dlb-h", run_id="r")
    loop.start(Plan.hashed(10, 2))  # KG: groups 0, 2, 4, 6, 8 on engine 0 = 80
    first = loop.step(window(HOT, batch=0))
    assert first.action == "rebalance" and "at the floor" not in first.reason
    assert first.after.engine_loads(HOT).max() == 60.0
    second = loop.step(window(HOT, batch=1))
    assert second.action == "none" and second.evaluation.over_theta
    assert "at the floor: group 0 holds 60% of the window" in second.reason
    assert "below 1.20x the mean" in second.reason
    f = second.evaluation.floor
    assert (f.hot_group, f.hot_group_share, f.ratio) == (0, pytest.approx(0.6),
                                                         pytest.approx(1.2))
    assert f.rstd == pytest.approx(20.0) == second.evaluation.balance.rstd
    for row in store.decisions:
        assert row["floor_ratio"] == pytest.approx(1.2) and row["hot_group"] == 0
        assert row["hot_group_share"] == pytest.approx(0.6)
        assert row["floor_rstd"] == pytest.approx(20.0)
    assert store.decisions[-1]["reason"] == second.reason


def test_declined_at_the_floor_and_not_when_a_plan_could_do_better() -> None:
    """A fixed plan above θ: at the floor it says so; off the floor (KG's 80/20) it does
    not, since a plan keeping keys whole would do better. Below θ nothing is said."""
    for plan, says in ((Plan(np.array([0] + [1] * 9), 2), True), (Plan.hashed(10, 2), False)):
        loop = ControlLoop(MemoryControlStore(), LoopSettings(window_s=1.0, theta=15.0),
                           None, "kg")
        loop.start(plan)
        d = loop.step(window(HOT))
        assert ("at the floor: group 0" in d.reason) is says, d.reason
    calm = ControlLoop(MemoryControlStore(), LoopSettings(window_s=1.0, theta=25.0), None, "kg")
    calm.start(Plan(np.array([0] + [1] * 9), 2))
    assert "at the floor" not in calm.step(window(HOT)).reason  # 20 % is within θ


def test_a_rebalance_vetoed_at_the_floor_says_both() -> None:
    """3 engines, the hot group alone on engine 0 (60 of 100): DLB-H evens out the other
    two engines, min_gain vetoes it (the busiest engine stays at 60) and the reason names
    the veto and the floor."""
    loop = loop_from_config(load_config(env={}, controller={"theta": 15.0, "min_gain": 0.05}),
                            MemoryControlStore(), "dlb-h", run_id="r")
    loop.start(Plan(np.array([0, 1, 1, 1, 1, 1, 1, 2, 2, 2]), 3))  # 60 / 30 / 10
    d = loop.step(window(HOT))
    assert d.action == "declined" and "controller.min_gain" in d.reason
    assert d.reason.endswith("(imbScore " + f"{d.evaluation.floor.rstd:.1f}%)")
    assert "at the floor: group 0 holds 60% of the window" in d.reason
    assert d.evaluation.floor.ratio == pytest.approx(1.8)
