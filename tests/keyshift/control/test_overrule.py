"""Measured demand overrules a forecast that is plainly wrong (keyshift.control.overrule):
a sustained rise the engines cannot carry scales out within a few windows, a sustained
fall scales in, whatever the forecaster says; one odd window changes nothing; the rule
reads only the remembered windows, so a restart decides alike. Driven through the one
control loop with the paper's planner fed a forecast stuck near zero."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.control import (
    ControlLoop,
    FunctionForecaster,
    LoopSettings,
    MemoryControlStore,
    ScalerStep,
    WindowSample,
    WindowStats,
)
from keyshift.control.overrule import Overrule
from keyshift.elastic.cost import Forecast
from keyshift.elastic.decision import ScalingDecision
from keyshift.elastic.path_scaler import PathScaler
from keyshift.plan import Plan

GROUPS, WINDOW_S, LAT = 64, 10.0, 0.002  # 2 ms per tuple: 5,000 tuples fill an engine


def near_zero(first: int, horizon: int, k: int = 8) -> Forecast:
    """A champion trained on another workload: the input it forecasts never comes."""
    return Forecast(np.full(horizon, 10.0), np.ones(horizon),
                    np.full((horizon, k), LAT), np.full((horizon, k), 1e-4))


def loop(overrule_windows: int = 2, engines: int = 1) -> ControlLoop:
    planner = PathScaler(horizon=4, window_s=WINDOW_S, mc=1.0, ec=1.0, rc=10.0,
                         min_engines=1, max_engines=8)
    step = ScalerStep(planner, FunctionForecaster(near_zero), WINDOW_S, keep_on_error=False)
    rule = Overrule(overrule_windows, WINDOW_S, 0.8, 1, 8) if overrule_windows else None
    ctl = ControlLoop(MemoryControlStore(), LoopSettings(window_s=WINDOW_S), None, "kg",
                      step, overrule=rule)
    ctl.start(Plan.hashed(GROUPS, engines))
    return ctl


def windows(ctl: ControlLoop, tuples: list[float], lags: list[float]) -> list:
    out = []
    before = 0.0
    for j, (n, lag) in enumerate(zip(tuples, lags, strict=True)):
        w = WindowStats.measured(j, np.full(GROUPS, n / GROUPS), n, LAT, j * WINDOW_S)
        w.lag_before, w.lag = before, lag
        before = lag
        out.append(ctl.step(w))
    return out


def decision(before: int, after: int) -> ScalingDecision:
    return ScalingDecision(window=1, policy="p", engines_before=before, proposed=after,
                           engines_after=after, reason="planned")


def sample(tuples: float, engines: int) -> WindowSample:
    return WindowSample(t=0.0, in_tuples=tuples, lat_s=LAT, engines=engines)


def test_a_rise_the_engines_cannot_carry_scales_out_within_two_windows() -> None:
    # 12,000 tuples read per window at 2 ms need 3 engines at 80 %; the forecast says 10
    tuples, lags = [12_000.0] * 4, [6_000.0, 12_000.0, 18_000.0, 24_000.0]
    without = windows(loop(overrule_windows=0), tuples, lags)
    assert all(d.after.parallelism == 1 for d in without)  # the paper's planner alone
    ds = windows(loop(), tuples, lags)
    assert ds[0].after.parallelism == 1  # one window is not a trend
    assert ds[1].action == "scale_out" and ds[1].after.parallelism >= 3
    assert "measured demand overrules the scaler (1)" in ds[1].reason


def test_a_sustained_fall_scales_in_and_a_backlog_or_one_window_does_not() -> None:
    rule = Overrule(2, WINDOW_S, 0.8, 1, 8)
    d = decision(3, 3)
    low, high = sample(2_000.0, 3), sample(12_000.0, 3)
    assert rule.apply(d, [low], 0.0) is d  # one window is not a trend
    assert rule.apply(d, [high, low], 0.0) is d  # nor one window after a busy one
    assert rule.apply(d, [low, low], 5_000.0) is d  # backlogged: not a fall
    fell = rule.apply(d, [low, low], 0.0)
    assert fell.engines_after == 1 and "no backlog need 1 engines" in fell.reason
    assert rule.apply(decision(3, 1), [low, low], 0.0).engines_after == 1  # agrees: as is


def test_need_counts_the_backlog_beyond_one_window() -> None:
    rule = Overrule(2, WINDOW_S, 0.8, 1, 16)
    s = sample(4_000.0, 1)
    assert rule.need(s) == 1 and rule.need(s, lag=0.0) == 1  # 8 s of work in 10 s at 80 %
    assert rule.need(s, lag=4_000.0) == 1  # one window of input backlogged: normal
    assert rule.need(s, lag=16_000.0) == 4  # 12,000 more to drain: 32 s of work
    assert rule.need(WindowSample(0.0, 4_000.0, None, 1)) is None
    assert Overrule(2, WINDOW_S, 0.8, 1, 2).need(s, 1e9) == 2  # within the bounds


def test_off_or_too_few_windows_change_nothing() -> None:
    d = decision(1, 1)
    s = sample(1e6, 1)
    assert Overrule(0, WINDOW_S).apply(d, [s] * 5, 1e6) is d
    assert Overrule(3, WINDOW_S).apply(d, [s] * 2, 1e6) is d


@pytest.mark.parametrize("n", [1, 3])
def test_the_trend_length_is_the_setting(n: int) -> None:
    rule = Overrule(n, WINDOW_S, 0.8, 1, 8)
    s = sample(12_000.0, 1)
    assert rule.apply(decision(1, 1), [s] * (n - 1), 0.0).engines_after == 1
    assert rule.apply(decision(1, 1), [s] * n, 0.0).engines_after == 3


def test_a_restarted_loop_decides_as_the_uninterrupted_one() -> None:
    """The rule has no memory of its own: the same remembered windows, the same bound."""
    tuples, lags = [12_000.0] * 3, [6_000.0, 12_000.0, 18_000.0]
    whole = windows(loop(), tuples, lags)
    ctl = loop()
    windows(ctl, tuples[:1], lags[:1])
    again = loop()
    again.scaler.restart(list(ctl.scaler.history), None)
    w = WindowStats.measured(1, np.full(GROUPS, 12_000.0 / GROUPS), 12_000.0, LAT, WINDOW_S)
    w.lag_before, w.lag = lags[0], lags[1]
    assert again.step(w).after.parallelism == whole[1].after.parallelism >= 3


def test_a_scale_in_below_the_measured_need_is_held_at_once() -> None:
    rule = Overrule(2, WINDOW_S, 0.8, 1, 8)
    busy = sample(6_000.0, 2)  # 12 s of work in a 10-s window: 2 engines at 80 %
    held = rule.apply(decision(2, 1), [busy], lag=0.0)  # one window suffices
    assert held.engines_after == 2 and "holds the scaler's scale-in (2 -> 1)" in held.reason
    drained = rule.apply(decision(3, 1), [busy], lag=30_000.0)  # a backlog to drain
    assert drained.engines_after == 3  # at most where it was
    assert rule.apply(decision(2, 1), [sample(2_000.0, 2)], lag=0.0).engines_after == 1


def test_a_rise_waits_its_own_windows_and_a_fall_still_waits_two() -> None:
    """As the Flink autoscaler: up after one short window, down only after a trend."""
    rule = Overrule(2, WINDOW_S, 0.8, 1, 8, rise_windows=1)
    short, idle = sample(12_000.0, 1), sample(2_000.0, 3)
    up = rule.apply(decision(1, 1), [short], 0.0)
    assert up.engines_after == 3 and "1 window in a row short" in up.reason
    assert rule.apply(decision(3, 3), [idle], 0.0).engines_after == 3  # one lull: nothing
    assert rule.apply(decision(3, 3), [idle, idle], 0.0).engines_after == 1
    assert Overrule(2, WINDOW_S, 0.8, 1, 8).apply(decision(1, 1), [short], 0.0) \
        .engines_after == 1  # rise_windows unset: as windows


def test_the_rise_setting_reaches_the_loop_from_config() -> None:
    from keyshift.config import load_config
    from keyshift.control.loop import overrule_from_config

    cfg = load_config(env={}, planner={"enabled": True, "overrule_rise_windows": 3})
    step = ScalerStep(PathScaler(horizon=4, window_s=WINDOW_S, mc=1.0, ec=1.0, rc=10.0,
                                 min_engines=1, max_engines=8),
                      FunctionForecaster(near_zero), WINDOW_S, keep_on_error=False)
    rule = overrule_from_config(cfg, step)
    assert rule is not None and rule.rise_windows == 3 and rule.windows == 2
    with pytest.raises(Exception, match="overrule_rise_windows"):
        load_config(env={}, planner={"overrule_rise_windows": 0})


def test_a_scale_out_plan_balances_the_next_window_not_the_noise_of_the_last() -> None:
    """A uniform topic measured over one window of ~1 event per group: moving its
    "heaviest" groups balanced that window and left the next at 82/18 (the elastic cluster
    bench); the expected loads give the new engine half the groups. A skewed window keeps
    its shape: its hot group is still the heaviest expected."""
    from keyshift.control.scaling import expected_loads, scale_plan

    rng = np.random.default_rng(7)
    noisy = rng.poisson(0.8, 1024).astype(float)
    plan, _ = scale_plan(Plan.hashed(1024, 1), 2, noisy)
    nxt = rng.poisson(0.8 * 50, 1024).astype(float)  # fifty windows later, the same keys
    share = plan.engine_loads(nxt).max() / nxt.sum()
    assert share < 0.55
    skewed = np.full(64, 10.0)
    skewed[3] = 400.0
    e = expected_loads(skewed)
    assert e.argmax() == 3 and e[3] > 0.95 * 400
    assert (expected_loads(np.zeros(8)) == 1).all()


def test_the_producers_clock_shows_a_rise_before_the_backlog_does() -> None:
    """The elastic cluster bench's ramp: one engine read 1,008 tuples in a window that
    lasted 18.8 s while Spark's lag (one batch behind) still said 0, so the reads put In at
    54/s; their Kafka append times span 14.4 s, 70/s, which needs 2 engines at 80 %."""
    lat = 0.0155
    w = WindowStats.measured(7, np.full(GROUPS, 1008 / GROUPS), 0.0, lat, 0.0)
    w.tuples, w.engine_s, w.timed = 1008.0, 1008 * lat, 1008.0
    w.span_s, w.lag_before, w.lag = 18.8, 0.0, 0.0
    assert w.input_rate(WINDOW_S) == pytest.approx(1008 / 18.8)  # the reads alone
    w.kafka_first, w.kafka_last = 1000.0, 1014.4
    assert w.input_rate(WINDOW_S) == pytest.approx(1007 / 14.4)
    rule = Overrule(2, WINDOW_S, 0.8, 1, 8, rise_windows=1)
    assert rule.need(w.sample(1, 0.0, WINDOW_S)) == 2
    # a window whose events span under a second says nothing by that clock
    w.kafka_last = 1000.5
    assert w.produced_rate() is None and w.input_rate(WINDOW_S) == pytest.approx(1008 / 18.8)


def test_batches_extend_the_windows_kafka_span() -> None:
    w = WindowStats.empty(0, 4)
    w.add_batch(0, np.ones(4), np.zeros(4), 1.0, 5.0, kafka_span=(10.0, 12.0))
    w.add_batch(1, np.ones(4), np.zeros(4), 1.0, 7.0, kafka_span=(11.0, 15.0))
    w.add_batch(2, np.zeros(4), np.zeros(4), None, 9.0)  # no event: no span
    assert (w.kafka_first, w.kafka_last) == (10.0, 15.0)
    assert w.produced_rate() == pytest.approx(7 / 5)
