"""bench/bench_latency_gp.py: the committed latency windows of a real job run are what the
latency GP trains on (its columns, several engine counts on both sides of the split), and the
Table II evaluation runs on a slice of them and returns finite scores in the fields the docs
and ``--json`` name. The collection itself (Kafka + Spark, half an hour) is a bench run."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import import_bench


@pytest.fixture(scope="module")
def bench():
    return import_bench("bench_latency_gp")


def test_committed_windows_have_the_latency_features_and_several_engine_counts(bench):
    from keyshift.models.features import LATENCY_FEATURES

    header = pd.read_csv(bench.DATA, comment="#", nrows=0).columns.tolist()
    assert header == [*LATENCY_FEATURES, "latency_s"]
    X, y = bench.read_windows(bench.DATA)
    assert len(y) >= 600  # the brief's floor; the paper had 2,000
    assert (y > 0).all() and np.isfinite(X).all()
    assert (np.diff(X[:, 0]) >= 0).all()  # oldest first: the split is chronological
    engines = X[:, LATENCY_FEATURES.index("engines")]
    cut = bench.split_tail(len(y), bench.TEST_FRACTION)
    assert len(set(engines[:cut])) > 1 and len(set(engines[cut:])) > 1
    meta = json.loads(bench.DATA.with_suffix(".json").read_text())
    assert meta["windows"] == len(y)
    assert sum(meta["windows_per_engine_count"].values()) == len(y)
    assert bench.DATA.stat().st_size < 1_000_000


def test_evaluate_on_a_slice_gives_finite_scores_for_every_model(bench):
    X, y = bench.read_windows(bench.DATA)
    result = bench.evaluate(X[:120], y[:120], repeats=1, iters=10)
    assert result["n_train"] == 84 and result["n_test"] == 36
    models = result["models"]
    assert {"gp (ard, Eq. 8)", "gp (ard+local)", "gp (ard+load)", "gp (auto)", "svm", "nn",
            "gp (ard), online", "gp (ard+load), online", "persistence"} <= set(models)
    for name, row in models.items():
        for field in ("cc", "mae", "rmse", "mase", "train_s"):
            assert math.isfinite(row[field]), (name, field)
        assert -1 <= row["cc"] <= 1 and row["mae"] >= 0 and row["rmse"] >= row["mae"]
    for name in ("gp (ard, Eq. 8)", "gp (ard+local)", "gp (ard+load)", "gp (auto)",
                 "gp (ard), online", "gp (ard+load), online"):
        assert 0 <= models[name]["coverage_90"] <= 1
    assert models["persistence"]["mase"] == pytest.approx(1.0)
    assert set(result["cc_log_latency_vs_feature"]) == set(bench.LATENCY_FEATURES)
    d = result["diagnostics"]
    assert set(d) == {"cc_chronological_without_calendar", "cc_random_split",
                      "test_latency_std_over_train_std"}
    assert all(math.isfinite(v) for v in d.values())


def test_a_csv_without_a_feature_column_is_a_usage_error_naming_it(bench, tmp_path, capsys):
    X, y = bench.read_windows(bench.DATA)
    frame = pd.DataFrame(X[:20], columns=list(bench.LATENCY_FEATURES)).assign(latency_s=y[:20])
    bad = tmp_path / "windows.csv"
    frame.drop(columns=["engines"]).to_csv(bad, index=False)
    assert bench.main(["--csv", str(bad), "--repeats", "1"]) == 2
    assert "missing column(s) ['engines']" in capsys.readouterr().err
    frame.assign(latency_s=0.0).to_csv(bad, index=False)
    with pytest.raises(bench.InputError, match="latency_s"):
        bench.read_windows(bad)


def test_rate_schedule_keeps_the_shape_and_spans_the_range(bench):
    rates = bench.rate_schedule(np.array([10.0, 40.0, 20.0, 10.0]), 30.0, 600.0)
    assert rates.tolist() == pytest.approx([30.0, 600.0, 220.0, 30.0])
    with pytest.raises(bench.InputError, match="two different values"):
        bench.rate_schedule(np.array([5.0, 5.0]), 30.0, 600.0)
    with pytest.raises(bench.InputError, match="rate-low"):
        bench.rate_schedule(np.array([1.0, 2.0]), 600.0, 30.0)


def test_dublin_cycle_resends_real_reports_with_new_ids(bench, real_data):
    gen = bench.DublinCycle(real_data / "dublin_siri_20130131_first10k.csv")
    n = len(gen.events)
    first = gen.batch(3, 0.0, 1_000)
    gen.batch(n - 3, 0.0, 1_000)
    again = gen.batch(3, 0.0, 2_000)  # the file from its start again
    assert [e["key"] for e in again] == [e["key"] for e in first]
    assert {e["id"] for e in first}.isdisjoint(e["id"] for e in again)
    assert all(e["ts"] == 2_000 for e in again)


def test_the_runs_metrics_rows_rebuild_the_committed_windows(bench):
    """The committed windows are the metrics rows summed at the collection's 2 s window, as
    the retrain sums them; longer windows are fewer, larger, and still one engine count each."""
    X, y = bench.read_windows(bench.DATA)
    X2, y2 = bench.read_metrics_windows(bench.METRICS, 2.0)
    assert X2.shape == X.shape
    np.testing.assert_allclose(X2, X, rtol=0, atol=1e-4)  # the CSV keeps 15 digits of epoch s
    np.testing.assert_allclose(y2, y, rtol=1e-9)
    X10, y10 = bench.read_metrics_windows(bench.METRICS, 10.0)
    tuples = bench.LATENCY_FEATURES.index("log_tuples_per_engine")
    assert len(X) / 6 < len(y10) < len(y) / 2
    assert np.median(X10[:, tuples]) > np.median(X[:, tuples])
    assert (y10 > 0).all() and np.isfinite(X10).all()


def test_window_s_evaluates_the_metrics_rows_and_refuses_bad_ones(bench, tmp_path, capsys):
    rows = pd.read_csv(bench.METRICS)
    small = tmp_path / "metrics.csv"
    rows.head(150).to_csv(small, index=False)
    out = tmp_path / "r.json"
    assert bench.main(["--metrics", str(small), "--window-s", "4", "--repeats", "1",
                       "--iters", "5", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert 13 <= result["n_train"] + result["n_test"] < 150
    assert bench.main(["--metrics", str(small), "--window-s", "0"]) == 2
    assert "--window-s: must be > 0" in capsys.readouterr().err
    rows.drop(columns=["events_in"]).to_csv(small, index=False)
    assert bench.main(["--metrics", str(small), "--window-s", "4"]) == 2
    assert "missing column(s) ['events_in']" in capsys.readouterr().err
    rows.assign(window_start="not a time").to_csv(small, index=False)
    assert bench.main(["--metrics", str(small), "--window-s", "4"]) == 2
    assert "window_start" in capsys.readouterr().err
