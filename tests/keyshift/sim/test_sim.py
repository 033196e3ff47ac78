"""The simulator core: conservation, determinism, balance under KG, a hand-checked run,
migrations, elasticity and bad parameters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from keyshift.plan import Plan
from keyshift.policies import make_policy
from keyshift.policies.base import Policy, Window
from keyshift.sim import (
    ExternalLoad,
    GaussianKeys,
    Schedule,
    SimConfig,
    SimError,
    Simulator,
    SyntheticWorkload,
    Workload,
    WorkloadError,
    ZipfKeys,
    latency_percentile,
    zipf_cycle,
)
from keyshift.sim.queues import CohortQueues


class FixedWorkload(Workload):
    """The same counts every tick: makes a run checkable by hand."""

    def __init__(self, per_tick: list[float]) -> None:
        self.per_tick = np.asarray(per_tick, dtype=float)
        self.groups = self.per_tick.size

    def arrivals(self, t: float, dt: float, rng: np.random.Generator) -> np.ndarray:
        return self.per_tick.copy()


class MoveHottest(Policy):
    """Throwaway test policy: move the hottest group of the busiest engine to the idlest."""

    name = "move-hottest"

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], None]:
        loads = np.bincount(plan.assignment, weights=window.loads, minlength=plan.slots)
        live = plan.live_engines
        busiest = live[np.argmax(loads[live])]
        idlest = live[np.argmin(loads[live])]
        if busiest == idlest:
            return plan, {}, None
        on = np.flatnonzero(plan.assignment == busiest)
        g = on[np.argmax(window.loads[on])]
        a = plan.assignment.copy()
        a[g] = idlest
        return plan.with_assignment(a), {"moved": int(g)}, None


def zipf_workload(s: float = 1.0, rate: float = 2000.0, keys: int = 512, groups: int = 64,
                  open_loop: bool = True) -> SyntheticWorkload:
    return SyntheticWorkload(
        ZipfKeys(keys, groups, None, seed=3), Schedule.constant(s), Schedule.constant(rate),
        open_loop=open_loop,
    )


def conserved(sim: Simulator) -> float:
    r = sim.result
    return r.generated - r.processed - r.missed - sim.queued()


def test_hand_checked_tiny_run() -> None:
    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, service_rate=10.0, deadline_s=2.0)
    sim = Simulator(FixedWorkload([15.0, 5.0]), make_policy("kg"), cfg)
    res = sim.run(4)
    # engine 0 gets 15/s and serves 10/s: the backlog hits the 2 s deadline in tick 4
    assert res.generated == 80
    assert res.processed == 60
    assert res.missed == 5
    assert sim.queued() == 15
    assert [w.missed for w in res.windows] == [0, 0, 0, 5]
    assert res.windows[0].rstd == pytest.approx(50.0)  # loads (15, 5): std 5, mean 10
    np.testing.assert_allclose(res.latency_hist, [35.0, 25.0])
    assert res.summary()["latency_p50_s"] == pytest.approx(60 * 0.5 / 35)


@pytest.mark.parametrize("overload,limit", [("miss", 300.0), ("backpressure", 300.0),
                                            ("miss", float("inf"))])
def test_conservation_with_migrations(overload: str, limit: float) -> None:
    cfg = SimConfig(engines=4, tick_s=0.1, window_s=1.0, service_rate=450.0,
                    queue_limit=limit, overload=overload, pause_fixed_s=0.3,
                    pause_s_per_state=1e-3, transfer_cost=0.5)
    sim = Simulator(zipf_workload(1.2), MoveHottest(), cfg, seed=5)
    res = sim.run(30)
    assert res.rebalances > 0
    assert res.processed > 0
    assert conserved(sim) == pytest.approx(0.0, abs=1e-6 * res.generated)


def test_conservation_closed_loop_backpressure() -> None:
    cfg = SimConfig(engines=3, tick_s=0.5, window_s=5.0, service_rate=100.0,
                    queue_limit=200.0, overload="backpressure")
    sim = Simulator(zipf_workload(1.5, rate=1000.0, open_loop=False), MoveHottest(), cfg, seed=2)
    res = sim.run(60)
    assert res.missed == 0
    assert conserved(sim) == pytest.approx(0.0, abs=1e-6 * res.generated)
    # the source was throttled to what the engines can take
    assert res.generated < 1000.0 * 60 * 0.9
    assert sim._queues.lengths().max() <= 200.0 + 1e-6


def test_deterministic_per_seed() -> None:
    cfg = SimConfig(engines=4, tick_s=0.1, window_s=1.0, service_rate=500.0, queue_limit=500)
    a = Simulator(zipf_workload(), MoveHottest(), cfg, seed=11).run(10).summary()
    b = Simulator(zipf_workload(), MoveHottest(), cfg, seed=11).run(10).summary()
    c = Simulator(zipf_workload(), MoveHottest(), cfg, seed=12).run(10).summary()
    a.pop("wall_s"), b.pop("wall_s"), c.pop("wall_s")
    assert a == b
    assert a != c


def test_kg_with_uniform_keys_stays_balanced() -> None:
    wl = zipf_workload(0.0, rate=20000.0, keys=4096, groups=4096)
    cfg = SimConfig(engines=8, tick_s=0.5, window_s=5.0, service_rate=5000.0)
    res = Simulator(wl, make_policy("kg"), cfg, seed=1).run(50)
    assert res.summary()["rstd_mean"] < 5.0
    assert res.missed == 0


def test_skew_under_kg_is_large_and_matches_dlb_setup() -> None:
    # dlb §4: 4,096 keys, 5 engines, Zipf 1.5 under KG gives an RSTD near 77-80 %
    wl = SyntheticWorkload(ZipfKeys(4096, 4096, None, seed=1), Schedule.constant(1.5),
                           Schedule.constant(1000.0))
    cfg = SimConfig(engines=5, tick_s=1.0, window_s=10.0, service_rate=1000.0)
    res = Simulator(wl, make_policy("kg"), cfg, seed=1).run(100)
    assert 50.0 < res.summary()["rstd_mean"] < 110.0


def test_migration_pauses_and_buffers_moved_groups() -> None:
    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, service_rate=100.0,
                    pause_fixed_s=3.0, pause_s_per_state=0.0, deadline_s=10.0)
    sim = Simulator(FixedWorkload([20.0, 10.0, 10.0, 0.0]), MoveHottest(), cfg)
    sim.step_window()  # decision after window 1 moves group 0 (20/s) from engine 0 to 1
    assert sim.plan.assignment[0] == 1
    assert sim.result.migration_pause_s == pytest.approx(3.0)
    w = sim.step_window()
    assert sim.queued() == pytest.approx(20.0)  # one tick of group 0 is held in the buffer
    assert w.processed == pytest.approx(10.0 + 10.0)
    sim.run(5)
    assert conserved(sim) == pytest.approx(0.0)


def test_transfer_cost_slows_engines() -> None:
    base = dict(engines=2, tick_s=1.0, window_s=1.0, service_rate=40.0, pause_fixed_s=1.0,
                pause_s_per_state=0.0, deadline_s=100.0)
    cheap = Simulator(FixedWorkload([30.0, 10.0]), MoveHottest(),
                      SimConfig(**base), seed=0).run(3)
    costly = Simulator(FixedWorkload([30.0, 10.0]), MoveHottest(),
                       SimConfig(**base, transfer_cost=1.0), seed=0).run(3)
    assert costly.processed < cheap.processed


def test_external_load_reduces_capacity() -> None:
    ext = (ExternalLoad(engine=0, start_s=2.0, stop_s=4.0, share=0.5),)
    cfg = SimConfig(engines=1, tick_s=1.0, window_s=1.0, service_rate=10.0, external=ext,
                    deadline_s=100.0)
    res = Simulator(FixedWorkload([10.0]), make_policy("kg"), cfg).run(6)
    assert [w.processed for w in res.windows] == [10, 10, 5, 5, 10, 10]


def test_heterogeneous_service_rates() -> None:
    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, service_rate=[10.0, 2.0],
                    deadline_s=1.0)
    res = Simulator(FixedWorkload([5.0, 5.0]), make_policy("kg"), cfg).run(3)
    assert res.processed == 15 + 6
    assert res.missed == 3 * 3


def test_set_engines_scale_out_and_in() -> None:
    cfg = SimConfig(engines=2, tick_s=0.5, window_s=1.0, service_rate=500.0)
    sim = Simulator(zipf_workload(0.5, groups=32), MoveHottest(), cfg, seed=1)

    def hook(s: Simulator, stats: Any) -> None:
        if stats.index == 2:
            s.set_engines(4, reason="test out")
        if stats.index == 6:
            s.set_engines(3, reason="test in")

    res = sim.run(10, hook=hook)
    assert [w.engines for w in res.windows] == [2, 2, 2, 4, 4, 4, 4, 3, 3, 3]
    assert sim.plan.parallelism == 3
    assert not np.isin(sim.plan.assignment, np.flatnonzero(~sim.plan.live)).any()
    assert [e["to"] for e in res.scales] == [4, 3]
    assert res.summary()["engine_seconds"] == pytest.approx(2 * 3 + 4 * 4 + 3 * 3)
    assert conserved(sim) == pytest.approx(0.0, abs=1e-6 * res.generated)


def test_history_and_rebalance_every() -> None:
    seen: list[int] = []

    class Spy(Policy):
        name = "spy"

        def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], None]:
            seen.append(0 if window.history is None else window.history.shape[0])
            return plan, {}, None

    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, rebalance_every=3, history_windows=4)
    Simulator(FixedWorkload([1.0, 2.0]), Spy(), cfg).run(12)
    assert seen == [3, 4, 4, 4]


def test_length_based_state_caps_at_h_per_key() -> None:
    cfg = SimConfig(engines=1, tick_s=1.0, window_s=1.0, state_model="length", length_h=25)
    sim = Simulator(FixedWorkload([10.0, 1.0]), make_policy("kg"), cfg)
    sim.run(5)
    np.testing.assert_allclose(sim.state, [25.0, 5.0])


def test_time_based_state_follows_recent_load() -> None:
    cfg = SimConfig(engines=1, tick_s=1.0, window_s=2.0, state_per_tuple=0.1, state_windows=2)
    sim = Simulator(FixedWorkload([10.0, 30.0]), make_policy("kg"), cfg)
    sim.run(10)
    np.testing.assert_allclose(sim.state, [4.0, 12.0])


def test_gaussian_and_zipf_same_mean_key() -> None:
    g = GaussianKeys(100, 100, None, seed=0).group_pmf(15.0)
    assert g.sum() == pytest.approx(1.0)
    assert np.argmax(g) in (49, 50)
    z = ZipfKeys(100, 100, None, seed=0).group_pmf(1.0)
    assert z.max() > g.max()


def test_schedule_cycle() -> None:
    s = zipf_cycle(0.2, 1.5, 300, 600)
    assert [s.at(t) for t in (0, 299, 300, 899, 900, 1250)] == [0.2, 0.2, 1.5, 1.5, 0.2, 1.5]
    with pytest.raises(WorkloadError, match="schedule"):
        Schedule(((5.0, 1.0),))


def test_queues_fifo_and_expiry() -> None:
    q = CohortQueues(1, 3)
    q.push(np.array([4.0]))
    q.age(expire=True)
    q.push(np.array([6.0]))
    served, by_age = q.serve(np.array([5.0]))
    assert served[0] == 5.0
    np.testing.assert_allclose(by_age, [1.0, 4.0, 0.0])  # oldest (age 1) first
    q.age(expire=True)
    q.age(expire=True)
    assert q.age(expire=True)[0] == pytest.approx(5.0)


def test_latency_percentile_interpolates() -> None:
    assert latency_percentile(np.array([0.0, 10.0]), 0.5, 0.5) == pytest.approx(0.75)
    assert latency_percentile(np.zeros(3), 1.0, 0.95) == 0.0


@pytest.mark.parametrize(
    "params,field",
    [
        ({"engines": 0}, "engines"),
        ({"tick_s": 0.0}, "tick_s"),
        ({"window_s": 1.05, "tick_s": 0.1}, "window_s"),
        ({"service_rate": [1.0, 2.0, 3.0], "engines": 2}, "service_rate"),
        ({"service_rate": -1.0}, "service_rate"),
        ({"overload": "drop"}, "overload"),
        ({"state_model": "count"}, "state_model"),
        ({"rebalance_every": 0}, "rebalance_every"),
        ({"pause_s_per_state": -1.0}, "pause_s_per_state"),
    ],
)
def test_bad_config_names_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(SimError) as exc:
        SimConfig(**params)
    assert exc.value.field == field


def test_bad_run_arguments() -> None:
    sim = Simulator(FixedWorkload([1.0]), make_policy("kg"), SimConfig(engines=1))
    with pytest.raises(SimError, match="duration"):
        sim.run(0)
    with pytest.raises(SimError, match="engines"):
        sim.set_engines(0)
    with pytest.raises(SimError, match="plan"):
        Simulator(FixedWorkload([1.0]), make_policy("kg"), SimConfig(engines=1),
                  plan=Plan.hashed(2, 1))
    with pytest.raises(WorkloadError, match="rate"):
        SyntheticWorkload(ZipfKeys(4, 4, None, 0), Schedule.constant(1.0),
                          Schedule.constant(-5.0))


class SplitHalf(Policy):
    """Throwaway PKG-like policy: half of group 0's tuples go to engine 1, no state kept."""

    name = "split-half"

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], None]:
        routing = {"groups": [0], "engines": [1], "share": [0.5]}
        return plan.with_assignment(plan.assignment.copy()), {
            "routing": routing, "stateful_safe": False}, None


def test_split_routing_sends_a_share_elsewhere() -> None:
    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, service_rate=100.0)
    sim = Simulator(FixedWorkload([20.0, 0.0]), SplitHalf(), cfg)
    first = sim.step_window()
    second = sim.step_window()
    np.testing.assert_allclose(first.engine_loads, [20.0, 0.0])
    np.testing.assert_allclose(second.engine_loads, [10.0, 10.0])
    assert sim.result.migration_pause_s == 0.0


def test_trigger_rstd_skips_balanced_windows() -> None:
    calls: list[float] = []

    class Spy(Policy):
        name = "spy"

        def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], None]:
            calls.append(float(window.loads.sum()))
            return plan, {}, None

    cfg = SimConfig(engines=2, tick_s=1.0, window_s=1.0, trigger_rstd=15.0)
    Simulator(FixedWorkload([10.0, 10.0]), Spy(), cfg).run(5)
    assert calls == []
    Simulator(FixedWorkload([10.0, 1.0]), Spy(), cfg).run(5)
    assert len(calls) == 5


def test_policy_that_changes_the_engine_count() -> None:
    # ELB with an absolute band [v, u] sets π = ⌈2w/(u+v)⌉: 4 engines for this load
    wl = zipf_workload(0.0, rate=3600.0, keys=256, groups=256)
    cfg = SimConfig(engines=2, tick_s=0.5, window_s=1.0, service_rate=3000.0)
    sim = Simulator(wl, make_policy("elb", band=(800.0, 1200.0)), cfg, seed=0)
    res = sim.run(6)
    assert res.windows[0].engines == 2
    assert res.windows[-1].engines == 4
    assert sim.plan.slots >= 4
    assert conserved(sim) == pytest.approx(0.0, abs=1e-6 * res.generated)


def test_length_state_counts_keys_a_trace_reveals(tmp_path: Any) -> None:
    from keyshift.sim import TraceWorkload

    trace = tmp_path / "t.csv"
    trace.write_text("ts,key\n0.1,a\n0.2,a\n0.3,a\n1.1,b\n1.2,b\n1.3,b\n")
    cfg = SimConfig(engines=1, tick_s=0.5, window_s=1.0, state_model="length", length_h=2)
    sim = Simulator(TraceWorkload(trace, groups=1), make_policy("kg"), cfg)
    sim.step_window()
    assert sim.state[0] == 2.0  # one key seen: H = 2 tuples
    sim.step_window()
    assert sim.state[0] == 4.0  # two keys seen


def test_trace_out_of_order_names_the_line(tmp_path: Any) -> None:
    from keyshift.sim import TraceWorkload

    trace = tmp_path / "t.csv"
    trace.write_text("ts,key\n10,a\n20,b\n5,c\n")
    sim = Simulator(TraceWorkload(trace, groups=4), make_policy("kg"),
                    SimConfig(engines=1, tick_s=1.0, window_s=1.0))
    with pytest.raises(WorkloadError, match="line 4"):
        sim.run(20)


def test_scale_out_while_a_migration_is_paused() -> None:
    """Regression: growing the cluster during a migration pause used to break the capacity
    arithmetic (the pause's per-engine work vector had the old engine count)."""
    cfg = SimConfig(engines=2, tick_s=0.5, window_s=1.0, service_rate=500.0,
                    pause_fixed_s=3.0)
    sim = Simulator(zipf_workload(1.2, groups=32), MoveHottest(), cfg, seed=3)

    def hook(s: Simulator, stats: Any) -> None:
        if stats.index == 1:
            s.set_engines(5, reason="grow during pause")

    res = sim.run(8, hook=hook)
    assert res.windows[-1].engines == 5
    assert conserved(sim) == pytest.approx(0.0, abs=1e-6 * res.generated)
