"""Drive the cluster simulator (:mod:`keyshift.sim`) with a scaler: the cross-check of the
per-window replay with queues, key groups, a balancing policy and migration pauses.

The series is replayed in compressed time: window j of the real series (Δt seconds, In_j
tuples) becomes one simulator window of ``sim_window_s`` seconds at rate In_j /
``sim_window_s``, and each engine serves Δt / Lat tuples per window, so load over capacity
is the same as in the replay. Misses are the simulator's (a tuple older than one window,
Eq. 1–2). The control loop (:class:`keyshift.control.ControlLoop`, as in the Spark job)
decides at each window's end from its statistics: the scaler first, realized by the loop's
scale mechanics; otherwise the balancing policy (default DLB-H) with the ``min_gain`` veto.
:class:`keyshift.sim.driver.SimulatorDriver` is the simulator's adapter (the same one a
simulation under a policy uses): it hands the loop the simulator's windows and realizes the
loop's plans in the simulator. Moved groups pause ``pause_s`` real seconds per migration
(they used to be off because a scale-out during a pause crashed the simulator, fixed since,
see tests/keyshift/sim/test_sim.py::test_scale_out_while_a_migration_is_paused).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keyshift.drivers.elastic_replay import ReplayResult, idle_window, scaler_loop
from keyshift.elastic.cost import Costs
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.scaler import ForecastFn, Scaler
from keyshift.sim import SimConfig, Simulator, SyntheticWorkload, ZipfKeys
from keyshift.sim.driver import SimulatorDriver
from keyshift.sim.workload import Schedule

__all__ = ["run_in_simulator"]


def run_in_simulator(
    in_tuples: np.ndarray,
    scaler: Scaler,
    window_s: float,
    lat_s: float,
    costs: Costs,
    initial_engines: int,
    forecast: ForecastFn | None = None,
    observe: Callable[[int, Observation], None] | None = None,
    policy: str = "dlb-h",
    groups: int = 256,
    zipf: float = 0.5,
    sim_window_s: float = 10.0,
    tick_s: float = 1.0,
    seed: int = 0,
    pause_s: float = 0.0,
    min_gain: float = 0.05,
) -> ReplayResult:
    """Run ``scaler`` over ``in_tuples`` windows inside :class:`keyshift.sim.Simulator`;
    ``pause_s`` > 0: moved key groups pause that many real seconds per migration;
    ``min_gain``: the balancer's veto, ``controller.min_gain`` of the job (0 = off)."""
    in_tuples = np.asarray(in_tuples, dtype=np.float64)
    if in_tuples.ndim != 1 or in_tuples.size == 0 or (in_tuples < 0).any():
        raise ElasticInputError("in_tuples", "must be a non-empty flat array of counts >= 0")
    if not lat_s > 0:
        raise ElasticInputError("lat_s", f"must be > 0 seconds, got {lat_s}")
    if not 0 <= pause_s < window_s:
        raise ElasticInputError("pause_s", f"must be in [0, window_s), got {pause_s}")
    steps = tuple((j * sim_window_s, float(v) / sim_window_s) for j, v in enumerate(in_tuples))
    workload = SyntheticWorkload(
        ZipfKeys(keys=groups, groups=groups, key_to_group=None, seed=seed),
        param=Schedule.constant(zipf),
        rate=Schedule(steps),
    )
    config = SimConfig(
        engines=int(initial_engines), tick_s=tick_s, window_s=sim_window_s,
        service_rate=window_s / lat_s / sim_window_s, overload="miss",
        # Migration pauses (dlb §3.3): every move of key groups (a scale action or a
        # rebalance) pauses the moved groups for ``pause_s`` real seconds, compressed like
        # the windows, the replay's 5-s pause per change; their tuples buffer meanwhile.
        # A per-state term would scale with the compressed rates, not with real state.
        pause_fixed_s=pause_s * sim_window_s / window_s, pause_s_per_state=0.0,
    )
    driver = SimulatorDriver(Simulator(workload, None, config, seed=seed), lat_s, window_s)
    driver.loop = scaler_loop(scaler, forecast, window_s, 1.0, initial_engines, groups,
                              policy=policy, min_gain=min_gain, realizer=driver)
    n = in_tuples.size
    engines = np.empty(n, dtype=np.int64)
    missed = np.empty(n)
    generated = np.empty(n)
    changes = np.zeros(n, dtype=bool)
    decisions: list[ScalingDecision] = []
    window = idle_window(groups)
    for j in range(n):
        d = driver.step(window)
        decisions.append(d.scaling)
        changes[j] = d.after.parallelism != d.before.parallelism
        stats, window = driver.run_window()
        engines[j] = stats.engines
        missed[j] = stats.missed
        generated[j] = stats.generated
        if observe is not None:
            observe(j, Observation(float(stats.generated), lat_s, int(stats.engines), window_s))
    planner_ms = [d.planner_ms for d in decisions if d.planner_ms is not None]
    cost = missed * costs.mc + engines * costs.ec * window_s + costs.rc * changes
    return ReplayResult(
        policy=scaler.name, engines=engines, in_tuples=generated, missed=missed,
        latency=np.full(n, lat_s), cost=cost, changes=changes, window_s=window_s,
        decisions=decisions, planner_ms=planner_ms,
    )
