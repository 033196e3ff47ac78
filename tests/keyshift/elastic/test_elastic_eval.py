"""Forecasters, the engine model, the per-window replay, and the elastic scenario on a
real series (short)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from keyshift.drivers.elastic_replay import replay
from keyshift.elastic.baselines import StaticMax, ThresholdScaler
from keyshift.elastic.capacity import LatencyModel
from keyshift.elastic.cost import Costs
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.forecast import DAY_S, EngineLatency, SeriesModel, SeasonalProfile
from keyshift.experiments import elastic

HOUR = 3600.0


def daily(days, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(days * 24) * HOUR
    y = 1000 + 500 * np.sin(2 * np.pi * t / DAY_S) + rng.normal(0, noise, t.size)
    return t, y


@pytest.mark.parametrize("period_s", [None, DAY_S])
def test_seasonal_profile_learns_the_daily_cycle(period_s):
    t, y = daily(10, noise=20)
    f = SeasonalProfile(period_s=period_s).fit(t[:-24], y[:-24])
    assert isinstance(f, SeriesModel)
    mean, std = f.predict(t[-24:])
    assert np.abs(mean - y[-24:]).max() < 100
    assert (std > 0).all()


def test_seasonal_profile_carries_a_surprise_forward_and_widens():
    # Deviations from the cycle are AR(1) with φ = 0.8, so a surprise should persist.
    rng = np.random.default_rng(3)
    t, y = daily(20)
    dev = np.zeros(t.size)
    for i in range(1, t.size):
        dev[i] = 0.8 * dev[i - 1] + rng.normal(0, 20)
    f = SeasonalProfile().fit(t, y + dev)
    assert 0.6 < f.phi_ < 0.95
    nxt = t[-1] + HOUR * np.arange(2, 5)
    before_mean, before_std = f.predict(nxt)
    expected_next = f.predict(t[-1:] + HOUR)[0]
    f.update(t[-1:] + HOUR, expected_next + 600)
    after_mean, after_std = f.predict(nxt)
    assert after_mean[0] - before_mean[0] > 300
    assert after_mean[0] - before_mean[0] > after_mean[2] - before_mean[2] > 0
    assert (after_std > before_std).all()


def test_seasonal_profile_errors():
    with pytest.raises(ElasticInputError, match="forecaster"):
        SeasonalProfile().predict(np.array([1.0]))
    with pytest.raises(ElasticInputError, match="phi"):
        SeasonalProfile(phi=1.5).fit(*daily(3))
    with pytest.raises(ElasticInputError, match="period_s"):
        SeasonalProfile(period_s=1.0).fit(*daily(3))
    with pytest.raises(ElasticInputError, match="t:"):
        SeasonalProfile().fit(np.arange(3.0), np.arange(4.0))


def test_engine_latency_recovers_the_affine_model():
    rng = np.random.default_rng(0)
    e = rng.integers(1, 17, 500).astype(float)
    lat = 0.002 * (1 + 0.02 * (e - 1)) * rng.lognormal(0, 0.01, e.size)
    m = EngineLatency().fit(e, lat)
    mean, std = m.predict(np.arange(1, 17))
    np.testing.assert_allclose(mean, 0.002 * (1 + 0.02 * np.arange(16)), rtol=0.02)
    assert (std > 0).all() and (std < 1e-4).all()


def test_latency_model():
    m = LatencyModel(base_s=0.01, overhead=0.1, cv=0.0)
    np.testing.assert_allclose(m.mean([1, 3]), [0.01, 0.012])
    assert m.rate(3) == pytest.approx(3 / 0.012)
    assert m.sample(2, np.random.default_rng(0)) == pytest.approx(0.011)
    noisy = LatencyModel(base_s=0.01, cv=0.2).sample(np.ones(20_000, int), np.random.default_rng(1))
    assert noisy.mean() == pytest.approx(0.01, rel=0.02)
    with pytest.raises(ElasticInputError, match="base_s"):
        LatencyModel(base_s=0).mean(1)


def test_replay_bills_eq_11_on_what_happened():
    truth = LatencyModel(base_s=0.1, overhead=0.0, cv=0.0)  # 100 tuples per engine-window
    ins = np.array([100.0, 250.0, 250.0])
    res = replay(ins, StaticMax(max_engines=2), truth, window_s=10, costs=Costs(2, 1, 5),
                 initial_engines=1, pause_s=5.0)
    # Window 0 changes 1 → 2 and pauses 5 s: capacity 100; windows 1, 2: 200.
    np.testing.assert_allclose(res.missed, [0, 50, 50])
    np.testing.assert_allclose(res.cost, [0 + 20 + 5, 100 + 20, 100 + 20])
    s = res.summary()
    assert s["scale_actions"] == 1 and s["missed_tuples"] == 100
    assert s["engine_hours"] == pytest.approx(6 * 10 / 3600)
    assert len(res.decisions) == 3 and res.decisions[0].action == "scale_out"


def test_replay_bills_whole_executors_with_their_start_up_and_release():
    from keyshift.drivers.elastic_replay import ExecutorModel

    truth = LatencyModel(base_s=0.1, overhead=0.0, cv=0.0)
    ins = np.array([100.0, 250.0, 250.0])
    x = ExecutorModel(engines_per_executor=4, startup_s=2.0, release_s=3.0)
    res = replay(ins, StaticMax(max_engines=5), truth, window_s=10, costs=Costs(2, 1, 5),
                 initial_engines=1, pause_s=1.0, executors=x)
    # 1 -> 5 engines is 1 -> 2 executors: window 0 waits 1 s of pause and 2 s of start-up
    # (capacity 7 s x 5 engines / 0.1 = 350, all 100 served) and bills 2 x 10 + 2
    np.testing.assert_allclose(res.executor_s, [22.0, 20.0, 20.0])
    assert res.summary()["executor_hours"] == pytest.approx(62.0 / 3600)
    assert res.summary()["engine_hours"] == pytest.approx(15 * 10 / 3600)
    assert "executor_hours" not in replay(ins, StaticMax(max_engines=2), truth, 10,
                                          Costs(), 1).summary()
    down = replay(np.array([100.0, 100.0, 100.0]), ThresholdScaler(max_engines=8), truth, 10,
                  Costs(), initial_engines=5, executors=x)
    # the first window has no observation: 5 engines (2 executors); then 4 or fewer, and
    # one executor's release bills its 3 s
    assert down.engines[0] == 5 and down.engines[1] <= 4
    np.testing.assert_allclose(down.executor_s[:2], [20.0, 10.0 + 3.0])
    with pytest.raises(ElasticInputError, match="engines_per_executor"):
        ExecutorModel(engines_per_executor=0)


def test_replay_rejects_bad_input():
    truth = LatencyModel()
    with pytest.raises(ElasticInputError, match="in_tuples"):
        replay(np.array([-1.0]), StaticMax(max_engines=2), truth, 10, Costs(), 1)
    with pytest.raises(ElasticInputError, match="pause_s"):
        replay(np.array([1.0]), StaticMax(max_engines=2), truth, 10, Costs(), 1, pause_s=10)


def test_threshold_replay_follows_the_load():
    truth = LatencyModel(base_s=0.1, overhead=0.0, cv=0.0)
    ins = np.concatenate([np.full(10, 100.0), np.full(10, 900.0), np.full(10, 100.0)])
    res = replay(ins, ThresholdScaler(max_engines=16), truth, 10, Costs(), initial_engines=1)
    assert res.engines[19] > res.engines[0] and res.engines[-1] < res.engines[19]


def test_load_series_reads_the_real_files(real_data):
    for name, n in (("taxi", 10_320), ("bikes", 17_379)):
        t, v = elastic.load_series(name, real_data)
        assert t.size == n and (np.diff(t) > 0).all() and (v >= 0).all()
    with pytest.raises(ElasticInputError, match="series"):
        elastic.load_series("stocks", real_data)


def test_scenario_runs_on_a_real_series(real_data, tmp_path, capsys):
    out = elastic.run(argparse.Namespace(
        series="taxi", windows=240, data_dir=str(real_data), report_dir=str(tmp_path),
        policies="planner-expected,static-max,qt", timing=False,
    ))
    rows = {r["policy"]: r for r in out["rows"]}
    assert set(rows) == {"planner-expected", "static-max", "qt"}
    assert rows["static-max"]["engine_hours_vs_static"] == 1.0
    assert rows["planner-expected"]["engine_hours"] < rows["static-max"]["engine_hours"]
    assert rows["planner-expected"]["plans"] > 0
    assert (tmp_path / "elastic_taxi.png").stat().st_size > 0
    assert json.loads((tmp_path / "elastic.json").read_text())["rows"]
    assert "| taxi | qt |" in capsys.readouterr().out


@pytest.mark.parametrize("over, field", [
    ({"policies": "planner,magic"}, "policies"),
    ({"initial": 99}, "initial"),
    ({"train_frac": 1.5}, "train_frac"),
])
def test_scenario_rejects_bad_options(over, field, real_data):
    ns = argparse.Namespace(series="taxi", data_dir=str(real_data), timing=False, **over)
    with pytest.raises(ElasticInputError) as err:
        elastic.run(ns)
    assert err.value.field == field


def test_planner_timing_rows():
    rows = elastic.planner_timing(horizons=(10, 20), states=(8,), repeats=2)
    assert [(r["horizon"], r["states"]) for r in rows] == [(10, 8), (20, 8)]
    assert all(r["median_ms"] > 0 for r in rows)


def test_simulate_command_dispatches_the_scenario(real_data, tmp_path, capsys):
    from keyshift.cli import main

    status = main(["simulate", "--scenario", "elastic", "--series", "bikes", "--windows", "120",
                   "--no-timing", "--json", "--report-dir", str(tmp_path), "--policy", "ds2",
                   "--engines", "12", "--data-dir", str(real_data)])
    out, err = capsys.readouterr()
    assert status == 0, err
    doc = json.loads(out)
    assert {r["policy"] for r in doc["rows"]} == {"static-max", "ds2"}
    assert doc["params"]["max_engines"] == 12
    status = main(["simulate", "--scenario", "elastic", "--initial", "40", "--no-timing",
                   "--report-dir", str(tmp_path), "--data-dir", str(real_data)])
    _, err = capsys.readouterr()
    assert status == 2 and "initial" in err and err.count("\n") == 1


def test_scaler_drives_the_tick_level_simulator():
    from keyshift.drivers.elastic_sim import run_in_simulator

    # 60 s windows at 2 ms per tuple: 30,000 tuples per engine-window.
    ins = np.concatenate([np.full(6, 60_000.0), np.full(6, 200_000.0), np.full(6, 60_000.0)])
    res = run_in_simulator(ins, ThresholdScaler(max_engines=12), window_s=60, lat_s=0.002,
                           costs=Costs(), initial_engines=3, groups=64)
    assert res.engines[11] > res.engines[0]
    assert res.engines[-1] < res.engines[11]
    assert res.in_tuples.sum() == pytest.approx(ins.sum(), rel=0.02)
    assert res.summary()["scale_actions"] == int(res.changes.sum()) > 0
    static = run_in_simulator(ins, StaticMax(max_engines=12), window_s=60, lat_s=0.002,
                              costs=Costs(), initial_engines=3, groups=64)
    assert static.missed.sum() < res.missed.sum()
    with pytest.raises(ElasticInputError, match="lat_s"):
        run_in_simulator(ins, StaticMax(max_engines=2), 60, 0.0, Costs(), 1)


def test_simulator_cross_check_with_migration_pauses():
    from keyshift.drivers.elastic_sim import run_in_simulator

    # A ramp the threshold scaler follows one engine per window, so scale-outs land while
    # the previous migration still pauses its groups (pause 30 s of a 60-s window).
    ins = np.concatenate([np.full(4, 60_000.0), np.full(8, 300_000.0)])
    kw = {"window_s": 60, "lat_s": 0.002, "costs": Costs(), "initial_engines": 2, "groups": 64}
    paused = run_in_simulator(ins, ThresholdScaler(max_engines=12), pause_s=30.0, **kw)
    free = run_in_simulator(ins, ThresholdScaler(max_engines=12), pause_s=0.0, **kw)
    assert paused.summary()["scale_actions"] >= 3
    assert paused.engines[-1] > paused.engines[0]
    assert paused.in_tuples.sum() == pytest.approx(ins.sum(), rel=0.02)
    assert paused.missed.sum() > free.missed.sum()
    with pytest.raises(ElasticInputError, match="pause_s"):
        run_in_simulator(ins, StaticMax(max_engines=2), pause_s=60.0, **kw)


def test_the_table_leads_with_executor_hours_when_they_are_billed():
    rows = [{"series": "taxi", "policy": "planner", "executor_hours": 3.0,
             "executor_hours_vs_static": 0.5, "engine_hours": 10.0,
             "engine_hours_vs_static": 0.6, "missed_pct": 0.1, "missed_vs_static": None,
             "scale_actions": 3}]
    text = elastic.markdown_table(rows)
    assert text.splitlines()[0].startswith("| series | policy | executor-h | × static |")
    assert "| taxi | planner | 3.0 | 0.50 | 10.0 | 0.60 | 0.1 | n/a (static 0) | 3 |" in text
