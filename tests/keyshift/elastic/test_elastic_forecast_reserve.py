"""The forecast reserve (keyshift/elastic/reserve.py ForecastQuantile, reserve_source =
"forecast"): the floor from the forecast's σ scaled by the calibrated quantile of the
surprises, its fallback to the rise reserve, the controller that calibrates it online, and
the configuration that selects it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_elastic_reserve import forecast, run

from keyshift.elastic.cost import Forecast
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.forecast import SeasonalProfile, one_step_forecasts
from keyshift.elastic.path_scaler import PathScaler
from keyshift.elastic.reserve import MIN_CALIBRATION, ForecastQuantile, RiseQuantile


def calibrated(surprises, q=1.0, level=100.0, sigma=10.0) -> ForecastQuantile:
    """A reserve whose history is a flat level forecast exactly, then windows that come in
    ``surprises`` σ above it (each followed by a return to the level)."""
    ins, means = [level], [level]
    for z in surprises:
        ins += [level + z * sigma, level]
        means += [level, level]
    ins, means = np.asarray(ins), np.asarray(means)
    return ForecastQuantile(q).fit(ins, means, np.full(ins.size, sigma))


def test_the_scale_is_the_quantile_of_the_scaled_surprises():
    zs = np.linspace(0.0, 9.9, 100)  # windows 0 .. 9.9 σ above the forecast
    r = calibrated(zs, q=1.0)
    # Each return to the level is a surprise of (100 − (100 + z·10)) / 10 = −z.
    assert r.scores_.size == 2 * zs.size
    assert r.scale() == pytest.approx(9.9)
    assert calibrated(zs, q=0.75).scale() == pytest.approx(np.quantile(
        np.concatenate([zs, -zs]), 0.75))
    # A falling history gives no negative reserve.
    assert calibrated(-zs, q=0.5).scale() == 0.0


def test_floor_is_level_plus_scaled_sigma_per_window():
    r = calibrated(np.full(MIN_CALIBRATION, 4.0), q=1.0)
    mean = np.array([200.0, 300.0, 250.0])
    std = np.array([10.0, 20.0, 40.0])  # σ grows with the horizon: so does the reserve
    assert r.floor(None, mean, std).tolist() == [240.0, 380.0, 410.0]
    # The first window starts from the larger of the last observed input and the forecast.
    assert r.floor(260.0, mean, std).tolist() == [300.0, 380.0, 410.0]
    assert r.floor(150.0, mean, std)[0] == 240.0


def test_falls_back_to_the_rise_reserve_without_sigma_or_calibration():
    history = np.array([100.0, 400.0, 100.0])  # one rise of +300
    rise = RiseQuantile(1.0).fit(history)
    mean, std = np.array([100.0, 100.0]), np.array([5.0, 0.0])
    # No forecasts in the history: nothing to calibrate σ on.
    r = ForecastQuantile(1.0).fit(history)
    assert r.scale() is None
    assert r.floor(100.0, mean, std).tolist() == rise.floor(100.0, mean).tolist() == [400.0, 400.0]
    assert "not calibrated yet, 0/" in r.describe()
    # Calibrated, a window without σ still takes the rise reserve; one with σ the quantile.
    r = calibrated(np.full(MIN_CALIBRATION, 2.0), q=1.0)
    assert r.floor(100.0, mean, std).tolist() == [110.0, 100.0 + r.rise()]
    assert r.floor(100.0, mean, None).tolist() == r.rises_.floor(100.0, mean).tolist()


@settings(max_examples=100, deadline=None)
@given(
    surprises=st.lists(st.floats(-50, 200), min_size=MIN_CALIBRATION, max_size=120),
    mean=st.lists(st.floats(0, 1e6), min_size=1, max_size=8),
    std=st.lists(st.floats(0, 1e4), min_size=8, max_size=8),
    in_now=st.one_of(st.none(), st.floats(0, 1e6)),
    q=st.floats(0.01, 1.0),
)
def test_the_floor_never_falls_below_the_forecast_mean(surprises, mean, std, in_now, q):
    r = calibrated(np.asarray(surprises), q=q)
    mean = np.asarray(mean)
    std = np.asarray(std[: mean.size])
    floor = r.floor(in_now, mean, std)
    assert (floor >= mean).all()
    if in_now is not None:
        assert floor[0] >= in_now


def test_online_update_learns_a_larger_surprise():
    r = calibrated(np.full(MIN_CALIBRATION, 1.0), q=1.0)
    assert r.scale() == pytest.approx(1.0)
    r.update(100.0, 100.0, 10.0)  # as forecast: no change
    assert r.scale() == pytest.approx(1.0)
    r.update(400.0, 100.0, 10.0)  # a burst of 30 σ
    assert r.scale() == pytest.approx(30.0)
    r.update(100.0)  # a window without its forecast: a rise is recorded, no surprise
    assert r.scores_.size == 2 * MIN_CALIBRATION + 2
    short = calibrated(np.full(MIN_CALIBRATION, 1.0), q=1.0)
    short.max_history = MIN_CALIBRATION
    for _ in range(MIN_CALIBRATION):
        short.update(100.0, 100.0, 10.0)
    assert short.scale() == 0.0  # the old surprises are forgotten


def test_bad_history_forecasts_name_the_field():
    with pytest.raises(ElasticInputError) as err:
        ForecastQuantile(0.99).fit(np.arange(5.0), np.arange(4.0), np.ones(5))
    assert err.value.field == "history"
    with pytest.raises(ElasticInputError) as err:
        ForecastQuantile(1.5).fit(np.arange(5.0))
    assert err.value.field == "reserve_quantile"
    with pytest.raises(ElasticInputError) as err:
        PathScaler(max_engines=4, reserve_quantile=0.9, reserve_source="gp").reset()
    assert err.value.field == "reserve_source"


def test_one_step_forecasts_of_the_history():
    t = np.arange(2 * 7 * 48) * 1800.0  # two weeks of half hours, a daily cycle
    y = 100 + 50 * np.sin(2 * np.pi * t / 86_400)
    mean, std = one_step_forecasts(SeasonalProfile(period_s=86_400.0), t, y, 48 * 7)
    assert np.isnan(mean[:48 * 7]).all() and np.isfinite(mean[48 * 7:]).all()
    assert np.isnan(std[:48 * 7]).all() and (std[48 * 7:] >= 0).all()
    assert np.abs(mean[48 * 7:] - y[48 * 7:]).max() < 1e-6  # a pure cycle is forecast exactly
    with pytest.raises(ElasticInputError) as err:
        one_step_forecasts(SeasonalProfile(), t, y, t.size)
    assert err.value.field == "start"


def test_controller_takes_the_reserve_from_sigma():
    # 100 tuples per engine-window; the history's surprises reached 3 σ (σ = 10 tuples).
    planned, actual = [100] * 6, [100] * 6
    r = calibrated(np.full(MIN_CALIBRATION, 3.0), q=1.0)
    history = np.asarray([100.0] + [130.0, 100.0] * MIN_CALIBRATION)
    mean = np.full(history.size, 100.0)

    def ctl(sigma_hist=10.0):
        c = PathScaler(max_engines=8, horizon=6, window_s=10, rc=1, mc=1.0,
                           reserve_quantile=1.0, reserve_source="forecast")
        return c.fit_reserve(history, mean, np.full(history.size, sigma_hist))

    def run_sigma(c, sigma):
        def fc(start, horizon):
            return forecast([100.0] * horizon, in_std=sigma)
        from test_elastic_scalers import run_controller
        return run_controller(c, fc, actual)

    assert r.scale() == pytest.approx(3.0)
    narrow = run_sigma(ctl(), 10.0)  # floor 100 + 3·10 = 130 tuples: 2 engines
    wide = run_sigma(ctl(), 100.0)  # floor 100 + 3·100 = 400 tuples: 4 engines
    assert [d.engines_after for d in narrow] == [2] * 6
    assert [d.engines_after for d in wide] == [4] * 6
    assert "forecast reserve 3 σ (q 1" in narrow[0].reason
    # A forecast whose σ is not predictive (the seasonal profile's) gets the rises: +30.
    def spread_only(start, horizon):
        fc = forecast([100.0] * horizon, in_std=100.0)
        return Forecast(fc.in_mean, fc.in_std, fc.lat_mean, fc.lat_std, in_predictive=False)

    from test_elastic_scalers import run_controller
    kept = ctl()
    assert [d.engines_after for d in run_controller(kept, spread_only, actual)] == [2] * 6
    assert kept.reserve_.scores_.size == r.scores_.size  # nothing learnt from a spread
    # The rise source on the same history keeps the +30 rise whatever σ says.
    rise = PathScaler(max_engines=8, horizon=6, window_s=10, rc=1, mc=1.0,
                          reserve_quantile=1.0).fit_reserve(history)
    assert [d.engines_after for d in run(rise, planned, actual)] == [2] * 6


def test_controller_calibrates_online_from_the_forecasts_it_planned_with():
    # No history: the rise reserve (+20 tuples) until MIN_CALIBRATION windows have been
    # observed against their forecasts (every other one 2 σ above), then c·σ with c = 2.
    n = MIN_CALIBRATION + 12
    actual = [100.0, 120.0] * (n // 2)

    def fc(start, horizon):  # σ 10 while calibrating, then the forecaster turns unsure
        return forecast([100.0] * horizon, in_std=10.0 if start < MIN_CALIBRATION + 4 else 60.0)

    from test_elastic_scalers import run_controller
    c = PathScaler(max_engines=8, horizon=4, window_s=10, rc=1, mc=1.0,
                       reserve_quantile=1.0, reserve_source="forecast")
    ds = run_controller(c, fc, actual)
    assert "burst reserve 20 tuples" in ds[2].reason and "not calibrated yet" in ds[2].reason
    assert all(d.engines_after == 2 for d in ds[2:MIN_CALIBRATION])  # 120 + 20 tuples
    assert c.reserve_.scale() == pytest.approx(2.0)
    later = [d for d in ds if "forecast reserve 2 σ" in d.reason]
    assert later and all(d.engines_after == 3 for d in later)  # 100 + 2·60 tuples


def test_config_selects_and_validates_the_source():
    from keyshift.config import load_config
    from keyshift.elastic.path_scaler import path_scaler_from_config

    env = {"KEYSHIFT_PLANNER__RESERVE_QUANTILE": "0.9999",
           "KEYSHIFT_PLANNER__RESERVE_SOURCE": "forecast"}
    ctl = path_scaler_from_config(load_config(env=env))
    assert (ctl.reserve_source, ctl.reserve_quantile) == ("forecast", 0.9999)
    assert load_config(env={}).planner.reserve_source == "rise"
    with pytest.raises(Exception) as err:
        load_config(env={"KEYSHIFT_PLANNER__RESERVE_SOURCE": "gp"})
    assert "planner.reserve_source" in str(err.value)
    with pytest.raises(Exception) as err:
        load_config(env={"KEYSHIFT_PLANNER__RESERVE_SOURCE": "forecast"})
    assert "needs reserve_quantile > 0" in str(err.value)


@pytest.mark.slow
def test_scenario_without_a_predictive_sigma_runs_the_rise_reserve(real_data, tmp_path):
    # The seasonal profile's std is not predictive: planner-quantile is planner-reserve
    # at the same quantile, window for window.
    import argparse

    from keyshift.experiments import elastic

    out = elastic.run(argparse.Namespace(
        series="tweets", windows=240, data_dir=str(real_data), report_dir=str(tmp_path),
        policies="planner-reserve,planner-quantile", timing=False, json=True,
        reserve_quantile=0.9999, forecast_quantile=0.9999,
    ))
    rows = {r["policy"]: r for r in out["rows"]}
    for key in ("engine_hours", "missed_tuples", "scale_actions"):
        assert rows["planner-quantile"][key] == rows["planner-reserve"][key]
    assert rows["planner-quantile"]["engine_hours"] > 0
