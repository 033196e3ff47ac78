"""Engines on real Kafka, Spark and Delta: one task per engine per batch, migration through
Delta before the engines run, event accounting, single ownership of every group in the
durable engine state, and outputs equal to the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from engines_support import (
    job_config,
    new_topic,
    outputs,
    produce_events,
    reference,
    run_job,
    table_rows,
)

from keyshift.control import key_group_floor
from keyshift.streaming.engine_state import DurableState

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMS = {"window_s": 1.0}


def test_engines_one_task_each_migrate_through_delta_and_match_reference(
    spark, platform_config
) -> None:
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", 1200,
                            skew="zipf:0.2@0,1.5@300", keys=300, malformed=6)
    job = run_job(spark, cfg, "wordcount", "dlb-h", topic, records=1200, params=PARAMS,
                  engines=4, max_offsets=300)
    t = job.totals

    # events in = processed + dead-lettered, nothing missed
    assert t.records == 1200
    assert t.dead_letter == 6 and t.events_in == 1194
    assert t.processed == t.events_in

    # exactly one task per engine slot in every batch, and task index = engine
    lines = [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]
    assert lines
    for b in lines:
        tasks = b["tasks"]
        assert sorted(x["engine"] for x in tasks) == list(range(b["slots"]))
        assert all(x["partition"] == x["engine"] for x in tasks)
        assert len({x["stage"] for x in tasks}) == 1
        # the engine stage's outputs, counted per task, reached Delta in one commit a batch:
        # handed to the driver and committed by delta-rs (a fresh run: no batch can have
        # been written before), the dead letters by Spark's executors
        assert all(x["outputs"] >= 0 and x["cache_id"] for x in tasks)
        if any(x["outputs"] for x in tasks):
            assert all(x["outputs_fetched"] for x in tasks if x["outputs"])
            assert b["outputs_by"]["events_out"] == "delta-rs"
        assert b["outputs_by"].get("dead_letter", "spark") == "spark"
    assert any("dead_letter" in b["outputs_by"] for b in lines)

    # DLB-H moved groups under the skew, each migration is started and completed in Delta
    assert t.migrations >= 1 and t.moved_groups >= 1
    mig = table_rows(spark, cfg, "migrations", job.run_id)
    started = {r.migration_id: r for r in mig if r.status == "started"}
    done = {r.migration_id: r for r in mig if r.status == "completed"}
    assert set(started) == set(done) and len(done) == t.migrations
    snaps = table_rows(spark, cfg, "state_snapshots", job.run_id)
    assert sum(r.bytes for r in snaps) == sum(r.bytes for r in done.values())
    assert sorted(g for r in done.values() for g in r.groups) == sorted(r.group for r in snaps)

    # a group never has two owners in the durable engine state
    owners: dict[int, int] = {}
    last = job.controller.plan_for(t.last_batch)  # the plan the last batch ran with
    durable = DurableState(job.state_uri)
    for e in range(max(last.slots, job.controller.plan_for(t.last_batch + 1).slots)):
        for g in durable.read(e, t.last_batch):
            assert g not in owners, f"group {g} owned by engines {owners[g]} and {e}"
            owners[g] = e
    assert owners and all(last.assignment[g] == e for g, e in owners.items())

    # decisions recorded with a reason; the complex events are exactly the reference's
    decisions = table_rows(spark, cfg, "decisions", job.run_id)
    assert decisions and all(d.reason for d in decisions)
    # every row carries its window's floor (keyshift.control.floor)
    assert all(d.floor_ratio >= 1.0 and d.hot_group_share is not None for d in decisions)
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events, 64, PARAMS)

    # the monitor (elastic-cep Eq. 1-2) the GPs are trained on: Lat = engine work seconds per
    # tuple (task time without the wait for input), In per second of arrival; both from the
    # same batch records as the scaler's
    by_batch = {b["batch_id"]: b for b in lines}
    for m in table_rows(spark, cfg, "metrics", job.run_id):
        b = by_batch[m.batch_id]
        assert all(0 <= x["input_wait_s"] <= x["duration_s"] for x in b["tasks"])
        busy = sum(x["duration_s"] - x["input_wait_s"] for x in b["tasks"])
        assert m.latency_s == pytest.approx(busy / m.events_in if m.events_in else 0.0)
        assert m.input_rate <= m.events_in / cfg.spark.trigger_s + 1e-9
        assert m.input_rate > 0 or m.events_in == 0
        # the batch's floor from the per-group input it recorded (keyshift simulate
        # --calibrate replays the same load_groups / load_counts)
        loads = np.zeros(job.groups)
        loads[b["load_groups"]] = b["load_counts"]
        floor = key_group_floor(loads, m.engines)
        assert m.floor_ratio == pytest.approx(floor.ratio)
        assert m.floor_rstd == pytest.approx(floor.rstd)
        assert (m.hot_group, m.hot_group_share) == (floor.hot_group,
                                                    pytest.approx(floor.hot_group_share))


def test_outputs_a_task_cannot_hand_over_are_appended_by_spark_once(
    spark, platform_config, monkeypatch
) -> None:
    """With the driver's share at 1 byte no task hands its outputs over: Spark's executors
    append every batch's rows from the engine stage's cached result, and the complex
    events equal the reference, none twice."""
    import keyshift.streaming.output_appends as output_appends

    monkeypatch.setattr(output_appends, "HELD_BYTES", 1)
    cfg = job_config(platform_config)
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", 600, skew="zipf:1.0",
                            keys=100)
    job = run_job(spark, cfg, "wordcount", "kg", topic, records=600, params=PARAMS,
                  engines=2, max_offsets=200)
    lines = [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]
    with_outputs = [b for b in lines if any(x["outputs"] for x in b["tasks"])]
    assert with_outputs and all(b["outputs_by"]["events_out"] == "spark"
                                for b in with_outputs)
    assert not any(x["outputs_fetched"] for b in lines for x in b["tasks"])
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events, 64, PARAMS)
