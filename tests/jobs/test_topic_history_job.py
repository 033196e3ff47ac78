"""The topic's past on the real stack: records with timestamps over the last hour in a real
broker, counted per window by Spark's batch Kafka source into Delta's ``input_rates``, then
the retrain fits the workload's input-rate model on them with no run's metrics at all."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from engines_support import new_topic

pytestmark = pytest.mark.integration


def _produce_past(bootstrap: str, topic: str, now_s: float) -> np.ndarray:
    """An hour of records whose rate repeats every five minutes (20/s, 35/s in the first
    minute of each cycle), each stamped with its event time; the counts per 10-s window."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    start = (int(now_s) // 10) * 10 - 3600
    counts = []
    for w in range(360):
        t = start + 10 * w
        n = 2 * (35 if (t % 300) < 60 else 20)  # a fifth of the true rate: a quick test
        counts.append(n)
        for i in range(n):
            ts = int((t + 10.0 * i / n) * 1000)
            producer.send(topic, json.dumps({"id": f"{w}-{i}", "key": "k", "ts": ts}).encode(),
                          timestamp_ms=ts)
    producer.flush()
    producer.close()
    return np.array(counts)


def test_a_topic_s_past_becomes_the_input_rate_history_and_a_champion(
        spark, platform_config, tmp_path) -> None:
    from keyshift.jobs import retrain_models, topic_rates
    from keyshift.jobs.history import DayRange, HistoryError
    from keyshift.models.registry import load_champion

    cfg = platform_config.model_copy(update={
        "warehouse": platform_config.warehouse.model_copy(update={"root": str(tmp_path / "wh")}),
        "controller": platform_config.controller.model_copy(update={"window_s": 10.0}),
        "mlflow": platform_config.mlflow.model_copy(update={
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "artifact_root": str(tmp_path / "mlartifacts")})})
    topic = new_topic(cfg.kafka.bootstrap)
    now = time.time()
    counts = _produce_past(cfg.kafka.bootstrap, topic, now)
    out = topic_rates.run(cfg, topic, days=2 / 24, spark=spark)
    assert out["status"] == "written", out
    assert out["workload"] == f"{cfg.controller.app}.{topic}"
    assert out["events"] == int(counts.sum())  # every record, in a closed window
    rows = topic_rates.read_rates(spark, cfg, datetime.now(UTC) - timedelta(days=1),
                                  datetime.now(UTC) + timedelta(days=1))
    assert len(rows) == out["rows"] >= 360
    assert sorted(set(rows["events_in"]) - {0}) == [40, 70]
    again = topic_rates.run(cfg, topic, days=2 / 24, spark=spark)  # a refresh, not a double
    assert again["rows"] == len(topic_rates.read_rates(
        spark, cfg, datetime.now(UTC) - timedelta(days=1), datetime.now(UTC) + timedelta(days=1)))

    today = datetime.now(UTC).date()
    trained = retrain_models.run(cfg, DayRange(today - timedelta(days=1), today), spark=spark,
                                 kernel="ard")
    assert trained["status"] == "trained", trained
    entry = trained["workloads"][out["workload"]]["models"]["models"]
    assert entry["input_rate"]["champion_moved"] and entry["latency"]["skipped"]
    named = cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(
        update={"workload": out["workload"]})})
    assert load_champion(named, "input_rate").version == "1"

    broken = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"port": 9})})
    with pytest.raises(HistoryError, match="no broker of 127.0.0.1:9 accepts a connection"):
        topic_rates.run(broken, topic, days=0.1, spark=spark)
    empty = topic_rates.run(cfg, new_topic(cfg.kafka.bootstrap), days=0.1, spark=spark)
    assert empty["status"] == "skipped" and "holds no record" in empty["reason"]
