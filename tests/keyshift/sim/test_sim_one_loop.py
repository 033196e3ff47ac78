"""One control loop, the simulator's too (issue 25 item 2): a simulation under a policy is
decided by :class:`keyshift.control.ControlLoop` (min_gain veto, recommend mode, records),
and decides as the calibrated replay does on the same input (that no other code calls a
policy's ``decide`` is tests/keyshift/test_layering.py's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keyshift.config import load_config
from keyshift.control import LoopSettings, policy_from_config
from keyshift.control.decision import RECOMMEND
from keyshift.plan import Plan
from keyshift.policies import make_policy
from keyshift.sim import SimConfig, Simulator, SyntheticWorkload, ZipfKeys, zipf_cycle
from keyshift.sim.calibrate.replay import evolve
from keyshift.sim.calibrate.run import Batch, Run

ROOT = Path(__file__).resolve().parents[3]
WINDOW_S = 10.0
GROUPS = 48
ENGINES = 4


def config(**controller):
    return load_config(env={}, controller={"window_s": WINDOW_S, **controller},
                       planner={"enabled": False})


def simulation(cfg, policy: str = "dlb-h", windows: int = 24, seed: int = 5) -> Simulator:
    """Zipf 0.6 for 60 s, then 1.6 for 60 s, repeating: light skew a rebalance fixes, and a
    hot key no plan can fix, where min_gain declines the policy's shuffles."""
    workload = SyntheticWorkload(ZipfKeys(GROUPS, GROUPS, None, seed=seed),
                                 zipf_cycle(0.6, 1.6, 60.0, 60.0),
                                 _constant(400.0))
    sim_cfg = SimConfig(engines=ENGINES, tick_s=1.0, window_s=WINDOW_S, service_rate=200.0,
                        pause_fixed_s=0.0, pause_s_per_state=0.0)
    policy_obj = policy_from_config(cfg, policy)
    sim = Simulator(workload, policy_obj, sim_cfg, seed=seed,
                    control=LoopSettings.from_config(cfg))
    sim.run(windows * WINDOW_S)
    return sim


def _constant(rate: float):
    from keyshift.sim import Schedule

    return Schedule.constant(rate)


def replay_run(sim: Simulator, cfg) -> Run:
    """The simulation's input as a run of the job: one batch per statistic window."""
    batches = []
    for w in sim.result.windows:
        loads = sim.driver.loop.store.loads.get(w.index)
        groups = np.flatnonzero(loads)
        batches.append(Batch(w.index, 1.0, 1.0, 1.0, 0.0, sim.plan.slots, 0, 0, groups,
                             loads[groups], (), closes_window=True))
    controller = {k: getattr(cfg.controller, k) for k in ("window_s", "theta", "min_gain",
                                                          "mode")}
    return Run("sim", ROOT, "heavy", "dlb-h", GROUPS, ENGINES, WINDOW_S, 1, controller, {},
               2, tuple(batches), "duration_s", "job.json")


@pytest.fixture()
def keep_loads(monkeypatch):
    """Keep each window's histogram in the loop's store, as the job's executors write
    ``key_loads`` (the simulator's store keeps none of its own)."""
    from keyshift.sim.driver import SimulatorDriver

    measure = SimulatorDriver.measure

    def measured(self, stats):
        window = measure(self, stats)
        self.loop.store.loads[stats.index] = window.loads.copy()
        return window

    monkeypatch.setattr(SimulatorDriver, "measure", measured)


@pytest.mark.parametrize("min_gain", [0.05, 0.0])
def test_the_simulator_and_the_replay_decide_alike(keep_loads, min_gain) -> None:
    cfg = config(min_gain=min_gain)
    sim = simulation(cfg)
    loop = sim.driver.loop
    actions = [r["action"] for r in loop.store.decisions]
    assert len(actions) == len(sim.result.windows)  # one balancer row per window
    assert "rebalance" in actions
    if min_gain:
        assert "declined" in actions  # the hot key's shuffles are vetoed, as in the job
    else:
        assert "declined" not in actions

    work = evolve(replay_run(sim, cfg), "dlb-h", ENGINES)
    assert len(work) == len(sim.result.windows)
    for b, w in enumerate(work):
        plan = loop.plan_for(b)  # the plan the simulator routed window b by
        loads = loop.store.loads[b]
        expected = np.bincount(plan.assignment, weights=loads, minlength=w.engine_events.size)
        np.testing.assert_array_equal(w.engine_events, expected)
        moved = 0 if b == 0 else int((loop.plan_for(b - 1).assignment != plan.assignment).sum())
        assert w.moved_groups == moved
    # the last window's decision would route a batch after the run
    decided = sim.result.decisions[:-1]
    assert sum(d["moved_groups"] for d in decided) == sum(w.moved_groups for w in work) > 0
    applied = [d for d in sim.result.decisions if d["moved_groups"] > 0]
    assert sim.result.rebalances == len(applied)


def test_min_gain_declines_in_the_simulator_and_moves_nothing() -> None:
    vetoed = simulation(config(min_gain=0.05))
    free = simulation(config(min_gain=0.0))
    declined = [d for d in vetoed.result.decisions if d["action"] == "declined"]
    assert declined and all(not d["applied"] and d["moved_groups"] == 0 for d in declined)
    assert all(d["proposed_groups"] > 0 for d in declined)
    assert vetoed.result.rebalances < free.result.rebalances
    rows = [r for r in vetoed.driver.loop.store.decisions if r["action"] == "declined"]
    assert rows and all("controller.min_gain" in r["reason"] for r in rows)


def test_recommend_mode_decides_records_and_realizes_nothing() -> None:
    sim = simulation(config(mode="recommend", min_gain=0.0))
    assert sim.result.rebalances == 0 and sim.result.moved_groups == 0
    assert np.array_equal(sim.plan.assignment, Plan.hashed(GROUPS, ENGINES).assignment)
    rows = sim.driver.loop.store.decisions
    recommended = [r for r in rows if r["action"] == "rebalance"]
    assert recommended and all(r["reason"].startswith(RECOMMEND) for r in recommended)
    assert all(r["plan_version"] is None for r in rows)
    assert [p.version for p in sim.driver.loop.store.plans_written] == [0]


def test_a_plan_the_hook_switched_is_adopted_before_the_loop_decides() -> None:
    cfg = config(min_gain=0.0)
    workload = SyntheticWorkload(ZipfKeys(GROUPS, GROUPS, None, seed=1), _constant(0.8),
                                 _constant(400.0))
    sim = Simulator(workload, make_policy("dlb-h"),
                    SimConfig(engines=3, tick_s=1.0, window_s=WINDOW_S, service_rate=200.0),
                    seed=1, control=LoopSettings.from_config(cfg))
    seen = []

    def hook(s: Simulator, stats) -> None:
        if stats.index == 2:
            s.set_engines(5, reason="hook")
        seen.append(s.plan.version)

    sim.run(6 * WINDOW_S, hook=hook)
    loop = sim.driver.loop
    assert loop.plan_for(sim.windows_done) is sim.plan
    # window 2's decision was made on the 5-engine plan the hook put in force
    third = sim.result.decisions[2]
    assert third["engines_before"] == 5
    assert sim.plan.parallelism == 5 and sim.plan.live.sum() == 5
    versions = [p.version for p in loop.store.plans_written]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
