"""Feature building: one place for training and serving (elastic-cep §III-B features)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from keyshift.models.features import (
    FeatureError,
    build_features,
    latency_features,
    rate_features,
    to_epoch_seconds,
)


def _metrics(n: int = 10) -> pd.DataFrame:
    ts = pd.date_range("2026-11-23 22:00", periods=n, freq="1h", tz="UTC")  # a Monday
    return pd.DataFrame({
        "window_start": ts,
        "input_rate": np.arange(n, dtype=float) * 10,
        "latency_s": np.linspace(0.1, 1.0, n),
        "engines": np.full(n, 4),
        "events_in": np.arange(n) * 10 * 3600,
        "policy": "dlb-h",
    })


def test_rate_features_time_of_day_and_weekday():
    X = rate_features(pd.to_datetime(["2026-11-23 13:30", "2026-11-29 00:00"], utc=True))
    assert X.shape == (2, 3)
    np.testing.assert_allclose(X[:, 1], [13.5, 0.0])
    np.testing.assert_allclose(X[:, 2], [0, 6])  # Monday, Sunday
    assert X[0, 0] == pd.Timestamp("2026-11-23 13:30", tz="UTC").timestamp()


def test_numbers_are_epoch_seconds_and_strings_are_parsed():
    a = rate_features(np.array([1_700_000_000.0]))
    b = rate_features(["2023-11-14T22:13:20Z"])
    np.testing.assert_allclose(a, b)


def test_latency_features_append_engines_and_window_size_and_broadcast_scalars():
    X = latency_features([0.0, 3600.0], 3, [0, 300])
    assert X.shape == (2, 5)
    np.testing.assert_allclose(X[:, 3], [3, 3])
    np.testing.assert_allclose(X[:, 4], [0.0, np.log1p(100.0)])  # tuples per engine, log
    with pytest.raises(FeatureError, match="^engines"):
        latency_features([0.0, 1.0, 2.0], [1, 2], 10)
    with pytest.raises(FeatureError, match="^engines"):
        latency_features([0.0], [0], 10)
    with pytest.raises(FeatureError, match="^window_tuples"):
        latency_features([0.0], [1], -1)
    with pytest.raises(FeatureError, match="^window_tuples"):
        latency_features([0.0, 1.0], [1], [1, 2, 3])


def test_build_features_sorts_and_drops_bad_targets():
    df = _metrics().iloc[::-1].reset_index(drop=True)
    df.loc[0, "latency_s"] = np.nan      # the newest window lost its latency
    df.loc[1, "latency_s"] = 0.0         # and the one before processed no tuple
    X_rate, y_rate, X_lat, y_lat = build_features(df)
    assert X_rate.shape == (10, 3) and X_lat.shape == (8, 5)
    assert np.all(np.diff(X_rate[:, 0]) > 0)
    np.testing.assert_allclose(y_rate, np.arange(10) * 10.0)
    assert len(y_lat) == 8 and (y_lat > 0).all()
    # serving builds the same vectors from the same timestamps
    np.testing.assert_allclose(X_rate, rate_features(_metrics()["window_start"]))


def test_build_features_names_missing_column():
    with pytest.raises(FeatureError, match="^engines: missing"):
        build_features(_metrics().drop(columns=["engines"]))
    with pytest.raises(FeatureError, match="^events_in: missing"):
        build_features(_metrics().drop(columns=["events_in"]))
    with pytest.raises(FeatureError, match="metrics"):
        build_features([1, 2, 3])


def test_unparseable_times_name_the_field():
    with pytest.raises(FeatureError, match="^timestamps"):
        to_epoch_seconds(["not a time"])
    with pytest.raises(FeatureError, match="NaN"):
        to_epoch_seconds(np.array([1.0, np.nan]))


def test_batch_rows_are_summed_into_the_windows_the_job_asks_about():
    """The job writes a row per micro-batch and queries the latency GP per statistic window
    (In = the window's tuples): training sums the batches into those windows, per run and
    engine count, with Lat their engine seconds over their tuples."""
    t0 = pd.Timestamp("2026-11-23 10:00:00", tz="UTC")
    rows = []
    for run, offset in (("a", 0), ("b", 0)):
        for i in range(20):  # 1-s batches, 10-s windows: two windows per run
            rows.append({"run_id": run, "window_start": t0 + pd.Timedelta(seconds=offset + i),
                         "input_rate": 100.0, "latency_s": 0.01 if i % 2 else 0.03,
                         "engines": 2 if i < 15 else 4, "events_in": 100 if i % 2 else 300})
    df = pd.DataFrame(rows)
    _, y_rate, X_lat, y_lat = build_features(df, window_s=10.0)
    assert len(y_rate) == 40  # the rate GP keeps every row: its unit is per second either way
    # per run: window [0,10) on 2 engines, [10,20) split at the scale change into 2 and 4
    assert X_lat.shape == (6, 5)
    first = X_lat[0]
    assert first[0] == t0.timestamp() and first[3] == 2
    np.testing.assert_allclose(first[4], np.log1p((5 * 100 + 5 * 300) / 2))
    np.testing.assert_allclose(y_lat[0], (5 * 100 * 0.01 + 5 * 300 * 0.03) / 2000)
    assert sorted(X_lat[:, 3].tolist()) == [2, 2, 2, 2, 4, 4]
    # without a window each row is one window (seeded histories are written per window)
    assert build_features(df)[2].shape == (40, 5)
    with pytest.raises(FeatureError, match="^window_s"):
        build_features(df, window_s=0.0)
