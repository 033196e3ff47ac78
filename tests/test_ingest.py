"""Ingestion job on real Kafka, Spark and Delta: validation, dead letters, exact counts across
a restart, routing through the newest plan without a restart, Spark/Python hash agreement."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from keyshift.groups import group_of, spark_group_expr_sql
from keyshift.plan import Plan
from keyshift.workloads import make_generator, replay_events

pytestmark = pytest.mark.integration


def _kafka_rows(values: list[bytes | None]) -> list[tuple]:
    now = datetime.now(UTC)
    return [("t", 0, i, now, v) for i, v in enumerate(values)]


def _kafka_frame(spark, values):
    return spark.createDataFrame(
        _kafka_rows(values),
        "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY")


def _spec(cfg, run_id, topic, **over):
    from streaming.ingest import IngestSpec

    return IngestSpec.from_config(cfg, run_id, topic=topic, app="wordcount", trigger_s=1.0,
                                  kg_engines=4, **over)


def _produce(cfg, topic, count, malformed=0, seed=0):
    from streaming.producer import connect, produce

    gen = make_generator("wordcount", seed=seed, producer_id=f"p{seed}")
    return produce(connect(cfg.kafka.bootstrap), topic, gen, rate=50_000, count=count,
                   malformed=malformed)


def _run_once(spark, cfg, spec):
    """Start the query, process everything in the topic, stop (a clean restart point)."""
    from streaming.ingest import start_ingest

    q = start_ingest(spark, cfg, spec)
    try:
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()


def test_spark_group_expression_equals_python_on_real_keys(spark, shared_data):
    _, events = replay_events(shared_data / "nasa_19950801.tsv")
    keys = sorted({e["key"] for e in events})[:3000]
    keys += ["", "ü-ñ", "a" * 300]
    df = spark.createDataFrame([(k,) for k in keys], "key STRING")
    for p in (64, 4096, 1000):
        got = dict(df.selectExpr("key", f"{spark_group_expr_sql('key', p)} AS g").collect())
        assert all(got[k] == group_of(k, p) for k in keys), p


def test_classify_gives_each_bad_record_its_reason(spark):
    from streaming.ingest import classify

    good = {"id": "a", "key": "k", "ts": 5, "word": "w"}
    values = [
        json.dumps(good).encode(),
        b'{"id":"a","key":"k","ts":5,',
        b"[1,2,3]",
        None,
        json.dumps({**good, "ts": "yesterday"}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "word"}).encode(),
        json.dumps({**good, "key": None}).encode(),
        json.dumps({**good, "pad": "x" * 70_000}).encode(),
    ]
    rows = classify(_kafka_frame(spark, values), "wordcount").orderBy("offset").collect()
    reasons = [r["reason"] for r in rows]
    assert reasons[0] is None and rows[0]["ts"] == 5 and rows[0]["word"] == "w"
    assert reasons[1:4] == ["malformed json"] * 3
    assert reasons[4] == "wrong type: ts (expected BIGINT)"
    assert reasons[5] == "missing field: word"
    assert reasons[6] == "missing field: key"
    assert reasons[7].startswith("oversized: ") and "> 65536" in reasons[7]
    assert len(rows[7]["raw"]) == 4096


def test_window_writer_is_idempotent_per_batch(spark, spark_config):
    from streaming.ingest import IngestSpec, WindowWriter, classify, route_classified
    from streaming.session import ensure_tables, read_table

    cfg = spark_config
    ensure_tables(spark, cfg, ["metrics", "key_loads", "dead_letter", "plans"])
    run = f"idem-{uuid.uuid4().hex[:6]}"
    spec = IngestSpec.from_config(cfg, run, topic="t", bootstrap="unused:1", app="wordcount",
                                  kg_engines=4)
    events = make_generator("wordcount", seed=3).batch(60, 0, 1)
    values = [json.dumps(e).encode() for e in events] + [b"not json"]
    batch = route_classified(spark, cfg, spec, classify(_kafka_frame(spark, values), "wordcount"))
    writer = WindowWriter(spark, cfg, spec)
    writer(batch, 0)
    writer(batch, 0)  # a replayed batch after a crash: skipped by Delta's txnVersion
    m = read_table(spark, cfg, "metrics").where(f"run_id = '{run}'").collect()
    assert len(m) == 1 and m[0]["events_in"] == 60 and m[0]["dead_letter"] == 1
    assert sum(m[0]["engine_loads"]) == 60 and len(m[0]["engine_loads"]) == 4
    loads = read_table(spark, cfg, "key_loads").where(f"run_id = '{run}'")
    assert loads.agg({"load": "sum"}).first()[0] == 60
    assert read_table(spark, cfg, "dead_letter").where(f"run_id = '{run}'").count() == 1


@pytest.mark.slow
def test_exact_counts_and_dead_letters_across_a_restart(spark, platform_config):
    from streaming.broker import create_topic
    from streaming.session import read_table

    cfg = platform_config
    run = f"restart-{uuid.uuid4().hex[:6]}"
    topic = f"ingest-{run}"
    create_topic(cfg.kafka.bootstrap, topic, 2)
    spec = _spec(cfg, run, topic, checkpoint=cfg.home_path / "ck" / run)

    s1 = _produce(cfg, topic, 200, malformed=8, seed=1)
    _run_once(spark, cfg, spec)
    s2 = _produce(cfg, topic, 120, malformed=4, seed=2)
    _run_once(spark, cfg, spec)  # same checkpoint: continues after the last committed batch

    assert (s1.good, s1.bad_total, s2.good, s2.bad_total) == (192, 8, 116, 4)
    metrics = read_table(spark, cfg, "metrics").where(f"run_id = '{run}'").collect()
    assert sum(r["events_in"] for r in metrics) == 192 + 116
    assert sum(r["dead_letter"] for r in metrics) == 12
    assert len({r["batch_id"] for r in metrics}) == len(metrics)
    dead = read_table(spark, cfg, "dead_letter").where(f"run_id = '{run}'").collect()
    assert len(dead) == 12 and len({(r["partition"], r["offset"]) for r in dead}) == 12
    kinds = sorted(r["reason"].split(":")[0] for r in dead)
    assert kinds == sorted(["malformed json"] * 3 + ["missing field"] * 3
                           + ["wrong type"] * 3 + ["oversized"] * 3)
    loads = read_table(spark, cfg, "key_loads").where(f"run_id = '{run}'")
    assert loads.agg({"load": "sum"}).first()[0] == 192 + 116


@pytest.mark.slow
def test_new_plan_version_changes_engine_loads_without_restart(spark, platform_config):
    from streaming.broker import create_topic
    from streaming.ingest import start_ingest
    from streaming.session import read_table
    from streaming.sinks import write_plan

    cfg = platform_config
    run = f"plan-{uuid.uuid4().hex[:6]}"
    topic = f"ingest-{run}"
    create_topic(cfg.kafka.bootstrap, topic, 2)
    spec = _spec(cfg, run, topic, checkpoint=cfg.home_path / "ck" / run)
    _produce(cfg, topic, 150, seed=5)
    q = start_ingest(spark, cfg, spec)
    try:
        q.processAllAvailable()
        # Every group on slot 2 of 4; slot 3 dead (ELB-style removal keeps slot numbers).
        plan = Plan(np.full(cfg.groups.count, 2), 4, version=1,
                    live=np.array([True, True, True, False]))
        write_plan(spark, cfg, plan, scope=run, policy="test", reason="move all to engine 2")
        _produce(cfg, topic, 150, seed=6)
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()
    rows = read_table(spark, cfg, "metrics").where(f"run_id = '{run}'").orderBy(
        "batch_id").collect()
    before = [r for r in rows if r["plan_version"] == 0]
    after = [r for r in rows if r["plan_version"] == 1]
    assert sum(r["events_in"] for r in before) == 150
    assert sum(r["events_in"] for r in after) == 150
    kg = np.sum([r["engine_loads"] for r in before], axis=0)
    assert (kg > 0).sum() >= 3  # KG spreads the words over the engines
    for r in after:
        assert r["engine_loads"][2] == r["events_in"] and r["engines"] == 3
    assert rows.index(after[0]) > rows.index(before[-1])
