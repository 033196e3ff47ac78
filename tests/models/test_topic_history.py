"""A forecast from day one: a topic's past as input rates, joined to the runs' own windows,
and the retrain that fits the input-rate model on it before any run of the operator."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from keyshift.jobs.topic_rates import TopicRead, rate_rows
from keyshift.models.features import FeatureError, rate_features, with_topic_rates

NOW = datetime(2026, 12, 7, 12, 0, 5, tzinfo=UTC)


def test_windows_count_from_the_first_record_to_the_last_closed_window() -> None:
    read = TopicRead("clicks", datetime(2026, 12, 7, 11, 59, 0, tzinfo=UTC), 10.0, "heavy.clicks")
    first = int(datetime(2026, 12, 7, 11, 59, 20, tzinfo=UTC).timestamp() // 10)
    counts = pd.DataFrame({"bucket": [first, first + 2, first + 4], "events": [30, 50, 7]})
    rows = rate_rows(counts, read, NOW)
    # 11:59:20 .. 11:59:50 closed; 12:00:00 is still filling at 12:00:05 and is left out
    assert rows["window_start"].dt.strftime("%H:%M:%S").tolist() == [
        "11:59:20", "11:59:30", "11:59:40", "11:59:50"]
    assert rows["events_in"].tolist() == [30, 0, 50, 0]
    assert rows["input_rate"].tolist() == [3.0, 0.0, 5.0, 0.0]
    assert set(rows["run_id"]) == {"topic:clicks"} and set(rows["workload"]) == {"heavy.clicks"}
    assert rate_rows(counts.iloc[:0], read, NOW).empty


def test_a_run_s_own_window_stands_where_the_topic_has_one_too() -> None:
    t = np.array([1000.0, 1010.0])
    X, y = with_topic_rates(rate_features(t), np.array([7.0, 8.0]), pd.DataFrame({
        "window_start": pd.to_datetime([980.0, 990.0, 1000.0, 1010.0, 1020.0], unit="s",
                                       utc=True),
        "window_end": pd.to_datetime([990.0, 1000.0, 1010.0, 1020.0, 1030.0], unit="s",
                                     utc=True),
        "input_rate": [1.0, 2.0, 3.0, 4.0, 5.0]}))
    assert X[:, 0].tolist() == [980.0, 990.0, 1000.0, 1010.0, 1020.0]
    assert y.tolist() == [1.0, 2.0, 7.0, 8.0, 5.0]
    with pytest.raises(FeatureError, match="window_end"):
        with_topic_rates(rate_features(t), np.array([7.0, 8.0]),
                         pd.DataFrame({"window_start": [], "input_rate": []}))


def test_the_topic_s_past_trains_the_input_rate_model_before_any_run(tmp_path) -> None:
    """No metrics at all: the input-rate model is fitted on the topic's windows and takes the
    alias; the latency model says it waits for runs; the job's load finds the rate model."""
    from keyshift.config import load_config
    from keyshift.models.registry import RegistryError, load_champion
    from keyshift.models.training import train_and_register
    from keyshift.schemas import TABLES

    cfg = load_config(env={}, home=str(tmp_path / "home"), controller={"window_s": 10.0},
                      mlflow={"workload": "heavy.clicks"})
    start = NOW.timestamp() - 3600
    t = start + 10.0 * np.arange(360)
    rate = 20 + 15 * (np.mod(t, 300) < 60)  # a five-minute job upstream
    past = pd.DataFrame({"window_start": pd.to_datetime(t, unit="s", utc=True),
                         "window_end": pd.to_datetime(t + 10, unit="s", utc=True),
                         "input_rate": rate, "workload": "heavy.clicks"})
    out = train_and_register(pd.DataFrame(columns=TABLES["metrics"].names), cfg, kernel="ard",
                             iters=5, rate_history=past)
    rate_model, latency = out["models"]["input_rate"], out["models"]["latency"]
    assert rate_model["registered"] and rate_model["champion_moved"], rate_model
    assert rate_model["name"] == "keyshift-input-rate.heavy.clicks"
    assert latency["skipped"] and not latency["registered"]
    assert latency["reason"] == "0 usable rows, need at least 48"
    assert out["topic_rows"] == 360
    champion = load_champion(cfg, "input_rate")
    mean, _ = champion.predict(rate_features(np.array([t[-1] + 10.0])))
    assert np.isfinite(mean).all()
    with pytest.raises(RegistryError, match="no latency forecaster of workload 'heavy.clicks'"):
        load_champion(cfg, "latency")
