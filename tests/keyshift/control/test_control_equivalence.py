"""One loop, two drivers: the windows the simulator's adapter measured, fed batch by batch
to the Spark job's adapter (in-memory store, no Spark), give the same decisions."""

from __future__ import annotations

import numpy as np
import pytest
from engines_support import MemoryControlLog

from keyshift.config import load_config
from keyshift.control import FallbackForecaster
from keyshift.sim import SimConfig, Simulator, SyntheticWorkload, ZipfKeys
from keyshift.sim.driver import SimulatorDriver
from keyshift.sim.workload import Schedule
from keyshift.streaming.controller import Controller

WINDOW_S = 10.0
LAT_S = 2.0 ** -7  # a power of two: the job's Lat (engine s / tuples) comes out exact
GROUPS = 48


class Clock:
    def __init__(self) -> None:
        self.t = 1_764_000_000.0

    def __call__(self) -> float:
        return self.t


def config(planner: bool, **controller):
    return load_config(env={}, controller={"window_s": WINDOW_S, **controller},
                       engines={"initial": 2, "min": 1, "max": 6},
                       planner={"enabled": planner, "horizon": 4, "mc": 10.0, "ec": 1.0,
                                "rc": 5.0})


def simulate(cfg, policy: str, rates: list[float], zipf: float):
    """Run the simulator's adapter; returns its decisions and the windows it fed the loop."""
    steps = tuple((j * WINDOW_S, r) for j, r in enumerate(rates))
    workload = SyntheticWorkload(ZipfKeys(keys=GROUPS, groups=GROUPS, key_to_group=None, seed=3),
                                 param=Schedule.constant(zipf), rate=Schedule(steps))
    sim_cfg = SimConfig(engines=cfg.engines.initial, tick_s=1.0, window_s=WINDOW_S,
                        service_rate=1.0 / LAT_S, pause_fixed_s=0.0, pause_s_per_state=0.0)
    sim = Simulator(workload, None, sim_cfg, seed=3)
    driver = SimulatorDriver.from_config(sim, cfg, policy, LAT_S,
                                         FallbackForecaster(WINDOW_S), clock=Clock())
    decisions, windows = [], []
    for _ in rates:
        _, w = driver.run_window()
        w.t0 = driver.loop.clock.t + w.index * WINDOW_S
        windows.append(w)
        decisions.append(driver.loop.step(w))
    return decisions, windows, sim


def stream(cfg, policy: str, windows):
    """The same windows through the job's adapter, one batch per window."""
    c = Controller(cfg, "run", policy, GROUPS, cfg.engines.initial, 1, MemoryControlLog(),
                   forecaster=FallbackForecaster(WINDOW_S), clock=Clock())
    c.recover(0)
    out = []
    for b, w in enumerate(windows):
        c.collect(b, w.loads, w.state, engine_s=LAT_S * w.tuples, started=w.t0)
        out.append(c.end_of_batch(b))
    return out


def key(d):
    return (d.window, d.action, d.component, d.realized, d.after.version, d.after.parallelism,
            tuple(d.after.assignment.tolist()), tuple(r["reason"] for r in d.rows))


@pytest.mark.parametrize(("policy", "planner", "zipf", "band"), [
    ("dlb-h", True, 0.8, {}),   # scaler and balancer, a ramp past 2 engines
    ("dlb-h", False, 1.5, {}),  # balancer alone; the hot key makes min_gain decline
    # ELB changes the engine count itself (band in tuples per engine per window)
    ("elb", False, 0.8, {"band_low": 400.0, "band_high": 1200.0}),
])
def test_simulator_and_job_adapters_decide_alike(policy, planner, zipf, band) -> None:
    cfg = config(planner, **band)
    # tuples per second; one engine serves 128 per second (Lat = 1/128 s)
    rates = [60.0] * 4 + [200.0] * 3 + [500.0] * 5 + [150.0] * 6
    sim_decisions, windows, sim = simulate(cfg, policy, rates, zipf)
    job_decisions = stream(cfg, policy, windows)
    assert [key(d) for d in sim_decisions] == [key(d) for d in job_decisions]
    actions = {d.action for d in sim_decisions}
    assert actions - {"none"}, actions  # the sequence exercises the loop
    if planner:
        assert {"scale_out", "scale_in"} <= actions
        assert sim.plan.parallelism == sim_decisions[-1].after.parallelism
    if zipf > 1:
        assert "declined" in actions


def slow_batches_controller() -> tuple[Controller, Clock, np.ndarray]:
    """A recovered controller of 5-batch windows on a fake clock, and one batch's group
    loads (2,100 tuples)."""
    clock = Clock()
    c = Controller(config(False), "run", "dlb-h", GROUPS, 2, 5, MemoryControlLog(),
                   forecaster=FallbackForecaster(WINDOW_S), clock=clock)
    c.recover(0)
    return c, clock, np.full(GROUPS, 2100.0 / GROUPS)


def test_a_window_of_slow_batches_reports_the_rate_over_its_span() -> None:
    """Five batches of a 10 s window took 14 s each: the window spans 70 s, its 10,500
    tuples arrived at 150/s, not 1,050/s (issue 28 item 1); the scaler's In per window and
    the utilisation follow the measured rate."""
    from keyshift.control.evaluate import evaluate
    from keyshift.control.window import WindowStats
    from keyshift.plan import Plan

    c, clock, per_batch = slow_batches_controller()
    decisions = []
    for b in range(10):
        c.collect(b, per_batch, np.zeros(GROUPS), engine_s=1.0, started=clock.t)
        clock.t += 14.0  # each batch outlasts the 2 s trigger by far
        decisions.append(c.end_of_batch(b))
    first, second = decisions[4], decisions[9]
    assert first.evaluation.input_rate == pytest.approx(10_500 / 70.0)
    assert second.evaluation.input_rate == pytest.approx(10_500 / 70.0)
    assert first.evaluation.tuples == pytest.approx(10_500)  # counted as it came
    lat = 5.0 / 10_500
    assert first.evaluation.utilisation == pytest.approx(150.0 * lat / 2)

    w = WindowStats.empty(0, 4)
    w.add_batch(0, np.array([100.0, 0, 0, 0]), np.zeros(4))
    assert w.input_rate(10.0) == 10.0 and w.sample(2, 0.0, 10.0).in_tuples == 100.0
    w.span_s = 40.0
    assert w.input_rate(10.0) == 2.5 and w.sample(2, 0.0, 10.0).in_tuples == 25.0
    assert w.sample(2, 0.0).in_tuples == 100.0  # without Δ: as counted
    ev = evaluate(w, Plan.hashed(4, 2), 10.0)
    assert ev.input_rate == 2.5


def test_a_growing_backlog_counts_in_the_input_rate() -> None:
    """A job that falls behind reads at its own speed: the records that arrived but were
    not read (the Kafka lag's growth over the window) are input too, or a scaler never sees
    the demand it cannot meet. A draining backlog counts negative; the first window, with
    no lag before it, counts what was read."""
    c, clock, per_batch = slow_batches_controller()
    lags = {4: 1000.0, 9: 8000.0, 14: 3000.0, 19: None}
    rates = []
    for b in range(20):
        c.collect(b, per_batch, np.zeros(GROUPS), engine_s=1.0, started=clock.t)
        clock.t += 14.0
        d = c.end_of_batch(b, lag=lags.get(b, 5.0))
        if d is not None:
            rates.append(d.evaluation.input_rate)
    assert rates == pytest.approx([10_500 / 70, (10_500 + 7_000) / 70,
                                   (10_500 - 5_000) / 70, 10_500 / 70])
