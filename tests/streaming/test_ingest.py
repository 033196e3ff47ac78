"""Ingestion only (``keyshift stream``) = the speed layer's job with ``ingest_only``, on real
Kafka, Spark and Delta: each bad record's reason, Spark's group expression equal to Python's,
idempotent writes per batch, exact counts and dead letters across a restart, one meaning of
``metrics.latency_s`` (the counting task's work seconds per tuple), and a plan the controller
changes routing the next batches without a restart."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest
from engines_support import job_config, new_topic, produce_events, table_rows

from keyshift.groups import group_of, spark_group_expr_sql
from keyshift.workloads import make_generator, replay_events

pytestmark = pytest.mark.integration


def _kafka_frame(spark, values: list[bytes | None]):
    """A static DataFrame shaped like the Kafka source's rows."""
    now = datetime.now(UTC)
    return spark.createDataFrame(
        [("t", 0, i, now, v) for i, v in enumerate(values)],
        "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY")


def _ingest_job(spark, cfg, run_id: str, topic: str, policy: str = "kg", **over):
    from keyshift.streaming.job import JobOptions, StreamJob

    opts = {"engines": 4, "max_offsets_per_trigger": 150, "available_now": True, **over}
    return StreamJob(spark, cfg, JobOptions(app="wordcount", policy=policy, run_id=run_id,
                                            topic=topic, ingest_only=True, **opts))


def _run_available(job) -> None:
    """Start, process what the topic holds (availableNow), stop: a clean restart point."""
    job.start()
    try:
        assert job.query.awaitTermination(600), "the query did not finish in 600 s"
        assert job.query.exception() is None
    finally:
        job.stop()


def _batches(job) -> dict[int, dict]:
    """Each batch's task records; of a batch run twice the last attempt's (its staged
    metrics row replaced the first one's before any commit)."""
    out: dict[int, dict] = {}
    for line in (job.run_dir / "batches.jsonl").read_text().splitlines():
        b = json.loads(line)
        out[b["batch_id"]] = b
    return out


def _assert_one_latency_meaning(spark, cfg, job) -> None:
    """``metrics.latency_s`` = engine work seconds per tuple, from the same task records
    as ``keyshift run`` (here the counting tasks), one task per engine slot."""
    from keyshift.streaming.engines import work_seconds

    batches = _batches(job)
    for m in table_rows(spark, cfg, "metrics", job.run_id):
        tasks = batches[m.batch_id]["tasks"]
        assert sorted(t["engine"] for t in tasks) == list(range(batches[m.batch_id]["slots"]))
        assert m.latency_s == pytest.approx(
            work_seconds(tasks) / m.events_in if m.events_in else 0.0)
        assert m.processed == m.events_in and m.out_events == 0 and m.missed == 0


def _produce(cfg, topic, count, malformed=0, seed=0):
    from keyshift.streaming.producer import connect, produce

    gen = make_generator("wordcount", seed=seed, producer_id=f"p{seed}")
    return produce(connect(cfg.kafka.bootstrap), topic, gen, rate=50_000, count=count,
                   malformed=malformed)


def test_spark_group_expression_equals_python_on_real_keys(spark, real_data):
    _, events = replay_events(real_data / "nasa_19950801.tsv")
    keys = sorted({e["key"] for e in events})[:3000]
    keys += ["", "ü-ñ", "a" * 300]
    df = spark.createDataFrame([(k,) for k in keys], "key STRING")
    for p in (64, 4096, 1000):
        got = dict(df.selectExpr("key", f"{spark_group_expr_sql('key', p)} AS g").collect())
        assert all(got[k] == group_of(k, p) for k in keys), p


def test_classify_gives_each_bad_record_its_reason(spark):
    from keyshift.streaming.ingest import classify

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


def test_ingest_batch_is_idempotent_and_groups_as_python_does(spark, spark_config):
    """A batch replayed after a crash writes nothing twice; its key loads are Python's groups
    through the KG plan (no Kafka: the job's batch function on a static frame)."""
    from keyshift.lakehouse.delta import ensure_tables
    from keyshift.streaming.job import TABLES_WRITTEN

    cfg = spark_config
    run = f"idem-{uuid.uuid4().hex[:6]}"
    job = _ingest_job(spark, cfg, run, topic="unused")
    ensure_tables(spark, cfg, TABLES_WRITTEN)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    events = make_generator("wordcount", seed=3).batch(60, 0, 1)
    batch = _kafka_frame(spark, [json.dumps(e).encode() for e in events] + [b"not json"])
    batch = job.frames.parse(batch)  # as the job's query hands it each batch
    job.process_batch(batch, 0)
    job.process_batch(batch, 0)  # a replayed batch: its rows are already there
    job.flush()  # key loads and metrics are staged until their interval, or commit at stop

    m = table_rows(spark, cfg, "metrics", run)
    assert len(m) == 1 and m[0].events_in == 60 and m[0].dead_letter == 1
    assert len(m[0].engine_loads) == 4 and sum(m[0].engine_loads) == 60
    expected: dict[int, int] = {}
    for e in events:
        g = group_of(e["key"], cfg.groups.count)
        expected[g] = expected.get(g, 0) + 1
    loads = table_rows(spark, cfg, "key_loads", run)
    assert {r.group: r.load for r in loads} == expected and len(loads) == len(expected)
    assert all(r.engine == r.group % 4 and r.plan_version == 0 for r in loads)
    assert [r.reason for r in table_rows(spark, cfg, "dead_letter", run)] == ["malformed json"]
    assert not table_rows(spark, cfg, "events_out", run)  # no operator ran
    _assert_one_latency_meaning(spark, cfg, job)


@pytest.mark.slow
def test_exact_counts_and_dead_letters_across_a_restart(spark, platform_config):
    cfg = platform_config
    run = f"restart-{uuid.uuid4().hex[:6]}"
    topic = new_topic(cfg.kafka.bootstrap)

    s1 = _produce(cfg, topic, 200, malformed=8, seed=1)
    _run_available(_ingest_job(spark, cfg, run, topic))
    s2 = _produce(cfg, topic, 120, malformed=4, seed=2)
    job = _ingest_job(spark, cfg, run, topic)  # same run id: continues after the last batch
    _run_available(job)

    assert (s1.good, s1.bad_total, s2.good, s2.bad_total) == (192, 8, 116, 4)
    metrics = table_rows(spark, cfg, "metrics", run)
    assert len(metrics) >= 3  # 150 records per batch at most: both runs took batches
    assert sum(r.events_in for r in metrics) == 192 + 116
    assert sum(r.dead_letter for r in metrics) == 12
    assert len({r.batch_id for r in metrics}) == len(metrics)
    dead = table_rows(spark, cfg, "dead_letter", run)
    assert len(dead) == 12 and len({(r.partition, r.offset) for r in dead}) == 12
    kinds = sorted(r.reason.split(":")[0] for r in dead)
    assert kinds == sorted(["malformed json"] * 3 + ["missing field"] * 3
                           + ["wrong type"] * 3 + ["oversized"] * 3)
    assert sum(r.load for r in table_rows(spark, cfg, "key_loads", run)) == 192 + 116
    assert job.totals.events_in == 116 and job.totals.dead_letter == 4  # this process's part
    _assert_one_latency_meaning(spark, cfg, job)


@pytest.mark.slow
def test_a_plan_the_controller_changes_routes_the_next_batches_without_restart(
    spark, platform_config
):
    """The ingestion job follows its controller's plan: under DLB-H a skew change makes a new
    plan version, and the batches after it are routed by it in the same query. Nothing
    migrates (there is no state), so the new plan applies from the very next batch."""
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    topic = new_topic(cfg.kafka.bootstrap)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 1200,
                   skew="zipf:0.2@0,1.5@300", keys=300)
    run = f"plan-{uuid.uuid4().hex[:6]}"
    job = _ingest_job(spark, cfg, run, topic, policy="dlb-h", max_offsets_per_trigger=300)
    _run_available(job)

    plans = {r.version: np.asarray(r.assignment) for r in spark.read.format("delta")
             .load(cfg.table_path("plans")).where(f"scope = '{run}'").collect()}
    metrics = sorted(table_rows(spark, cfg, "metrics", run), key=lambda r: r.batch_id)
    versions = [m.plan_version for m in metrics]
    assert sum(m.events_in for m in metrics) == 1200
    assert versions[0] == 0 and versions[-1] > 0, versions  # changed within one query
    assert versions == sorted(versions)

    loads = table_rows(spark, cfg, "key_loads", run)
    by_batch = {m.batch_id: m for m in metrics}
    for r in loads:  # every group of every batch went where that batch's plan says
        assert r.plan_version == by_batch[r.batch_id].plan_version
        assert r.engine == plans[r.plan_version][r.group]
    for m in metrics:
        per_engine = np.zeros(len(m.engine_loads), dtype=int)
        for r in loads:
            if r.batch_id == m.batch_id:
                per_engine[r.engine] += r.load
        assert per_engine.tolist() == list(m.engine_loads)
    # the change moved groups that carry load: the engine loads changed
    moved = {r.group for r in loads
             if r.plan_version > 0 and plans[0][r.group] != plans[r.plan_version][r.group]}
    assert moved
    assert job.totals.migrations == 0  # ingestion hands no state over
    assert not table_rows(spark, cfg, "migrations", run)
    assert not table_rows(spark, cfg, "state_snapshots", run)
    _assert_one_latency_meaning(spark, cfg, job)
