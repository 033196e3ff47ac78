"""Property: whatever the cluster, workload and overload mode, every generated tuple is
processed, missed or still queued, and no counter goes negative."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.policies import make_policy
from keyshift.sim import Schedule, SimConfig, Simulator, SyntheticWorkload, ZipfKeys


@settings(max_examples=25, deadline=None)
@given(
    engines=st.integers(1, 6),
    groups=st.integers(1, 80),
    skew=st.floats(0.0, 2.0),
    rate=st.floats(10.0, 5000.0),
    capacity=st.floats(0.2, 2.0),
    limit=st.one_of(st.just(float("inf")), st.floats(1.0, 2000.0)),
    overload=st.sampled_from(["miss", "backpressure"]),
    open_loop=st.booleans(),
    ticks=st.integers(1, 5),
    policy=st.sampled_from(["kg", "dlb-h", "lptf", "uhlb"]),
    pause=st.floats(0.0, 1e-2),
    seed=st.integers(0, 1000),
)
def test_conservation_holds_everywhere(engines: int, groups: int, skew: float, rate: float,
                                       capacity: float, limit: float, overload: str,
                                       open_loop: bool, ticks: int, policy: str, pause: float,
                                       seed: int) -> None:
    wl = SyntheticWorkload(ZipfKeys(groups, groups, None, seed), Schedule.constant(skew),
                           Schedule.constant(rate), open_loop=open_loop)
    cfg = SimConfig(engines=engines, tick_s=1.0 / ticks, window_s=1.0,
                    service_rate=capacity * rate / engines, queue_limit=limit,
                    overload=overload, pause_s_per_state=pause, transfer_cost=0.5)
    sim = Simulator(wl, make_policy(policy), cfg, seed=seed)
    res = sim.run(8)
    for w in res.windows:
        assert min(w.generated, w.processed, w.missed, w.queued) >= -1e-9
        assert np.all(w.engine_loads >= -1e-9)
    balance = res.generated - res.processed - res.missed - sim.queued()
    assert abs(balance) <= 1e-6 * max(res.generated, 1.0)
