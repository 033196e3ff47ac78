"""Drive the cluster simulator (:mod:`keyshift.sim`) with a scaler: the cross-check of the
per-window replay with queues, key groups, a balancing policy and migration pauses.

The series is replayed in compressed time: window j of the real series (Δt seconds, In_j
tuples) becomes one simulator window of ``sim_window_s`` seconds at rate In_j /
``sim_window_s``, and each engine serves Δt / Lat tuples per window, so load over capacity
is the same as in the replay. Misses are the simulator's (a tuple older than one window,
Eq. 1–2). The scaler decides before each window from the previous window's statistics;
``Simulator.set_engines`` realises it, and the balancing policy (default DLB-H) spreads the
key groups over the live engines. Moved groups pause ``pause_s`` real seconds per migration
(they used to be off because a scale-out during a pause crashed the simulator, fixed since,
see tests/test_sim.py::test_scale_out_while_a_migration_is_paused).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keyshift.elastic.cost import Costs
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.replay import ReplayResult
from keyshift.elastic.scaler import ForecastFn, Scaler


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
) -> ReplayResult:
    """Run ``scaler`` over ``in_tuples`` windows inside :class:`keyshift.sim.Simulator`;
    ``pause_s`` > 0: moved key groups pause that many real seconds per migration."""
    from keyshift.policies import make_policy
    from keyshift.sim import SimConfig, Simulator, SyntheticWorkload, ZipfKeys
    from keyshift.sim.workload import Schedule

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
    service_rate = window_s / lat_s / sim_window_s
    scaler.reset()
    decisions: list[ScalingDecision] = []
    planner_ms: list[float] = []
    first = scaler.decide(0, int(initial_engines), None, forecast)
    decisions.append(first)
    config = SimConfig(
        engines=first.engines_after, tick_s=tick_s, window_s=sim_window_s,
        service_rate=service_rate, overload="miss",
        # Migration pauses (dlb §3.3): every move of key groups (a scale action or a
        # rebalance) pauses the moved groups for ``pause_s`` real seconds, compressed like
        # the windows, the replay's 5-s pause per change; their tuples buffer meanwhile.
        # A per-state term would scale with the compressed rates, not with real state.
        pause_fixed_s=pause_s * sim_window_s / window_s, pause_s_per_state=0.0,
    )
    sim = Simulator(workload, make_policy(policy), config, seed=seed)
    n = in_tuples.size
    engines = np.empty(n, dtype=np.int64)
    missed = np.empty(n)
    generated = np.empty(n)
    changes = np.zeros(n, dtype=bool)
    changes[0] = first.engines_after != initial_engines
    for j in range(n):
        if j > 0:
            dec = scaler.decide(j, sim.engines, obs, forecast)
            decisions.append(dec)
            if dec.engines_after != sim.engines:
                changes[j] = True
                sim.set_engines(dec.engines_after, reason=dec.reason)
        if decisions[-1].planner_ms is not None:
            planner_ms.append(decisions[-1].planner_ms)
        stats = sim.step_window()
        engines[j] = stats.engines
        missed[j] = stats.missed
        generated[j] = stats.generated
        obs = Observation(float(stats.generated), lat_s, int(stats.engines), window_s)
        if observe is not None:
            observe(j, obs)
    cost = missed * costs.mc + engines * costs.ec * window_s + costs.rc * changes
    return ReplayResult(
        policy=scaler.name, engines=engines, in_tuples=generated, missed=missed,
        latency=np.full(n, lat_s), cost=cost, changes=changes, window_s=window_s,
        decisions=decisions, planner_ms=planner_ms,
    )
