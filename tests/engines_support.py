"""Helpers of the engine / migration / demo integration tests: produce a known input, run the
streaming job in-process until it has taken every record, read outputs back from Delta, and
compute the reference output with one operator in the key's production order (what KG, or
any correct placement, must produce)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from keyshift.apps import make_operator
from keyshift.control import MemoryControlStore
from keyshift.groups import group_of


def produce_events(bootstrap: str, topic: str, app: str, count: int, skew: str, seed: int = 1,
                   keys: int | None = None, malformed: int = 0,
                   phase: int = 0) -> list[dict[str, Any]]:
    """Send ``count`` generated events (plus ``malformed`` bad records); returns the good ones
    in production order."""
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads.events import make_generator

    sent: list[dict[str, Any]] = []

    class Recording:
        def __init__(self, gen) -> None:
            self.gen = gen

        def batch(self, n: int, t_s: float, now_ms: int) -> list[dict[str, Any]]:
            # schedule time and event time advance with the index, not the wall clock (10 ms
            # per event): the same input in every run
            events = self.gen.batch(n, float(len(sent)), 0)
            for j, e in enumerate(events):
                e["ts"] = 1_700_000_000_000 + phase * 10_000_000 + (len(sent) + j) * 10
            sent.extend(json.loads(json.dumps(e)) for e in events)
            return events

    gen = Recording(make_generator(app, keys=keys, skew=skew, seed=seed,
                                        producer_id=f"p{phase}"))
    producer = connect(bootstrap)
    stats = produce(producer, topic, gen, rate=1e9, count=count, malformed=malformed, seed=seed)
    assert stats.failed == 0, stats.first_error
    assert stats.good == count - malformed
    if not malformed:
        return sent
    # the producer replaced evenly spread records by bad ones: those are not good events
    from keyshift.streaming.producer import _bad_slots

    is_bad = _bad_slots(count, malformed)
    return [e for i, e in enumerate(sent) if not is_bad(i)]


def reference(app: str, events: list[dict[str, Any]], groups: int,
              params: dict[str, Any]) -> list[tuple]:
    """Complex events of one operator fed every key's events in production order."""
    op = make_operator(app, **params)
    out = []
    for e in events:
        out += [ce.identity() for ce in op.process(e, group_of(str(e["key"]), groups))]
    return sorted(out)


def job_env(cfg, **extra: str) -> dict[str, str]:
    """The environment of a ``keyshift run`` subprocess on the test config ``cfg``."""
    return {
        **os.environ,
        "KEYSHIFT_HOME": str(cfg.home_path),
        "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
        "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count),
        "KEYSHIFT_SPARK__TRIGGER_S": str(cfg.spark.trigger_s),
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": str(cfg.spark.shuffle_partitions),
        "KEYSHIFT_CONTROLLER__WINDOW_S": str(cfg.controller.window_s),
        "KEYSHIFT_CONTROLLER__THETA": str(cfg.controller.theta),
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    }


def consume(bootstrap: str, topic: str) -> list:
    """Every record of ``topic`` from its start (Kafka's ``ConsumerRecord`` items), once the
    topic has been quiet for five seconds."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        return list(consumer)
    finally:
        consumer.close()


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    from keyshift.streaming.kafka_client import create_topic

    name = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions)
    return name


def job_config(base, **controller: Any):
    """The test config with a one-batch statistic window (decisions every batch)."""
    ctl = {"window_s": base.spark.trigger_s, **controller}
    return base.model_copy(update={"controller": base.controller.model_copy(update=ctl)})


def start_job(spark, cfg, app: str, policy: str, topic: str,
              params: dict[str, Any] | None = None, engines: int = 4, max_offsets: int = 400,
              run_id: str | None = None, policy_params: dict[str, Any] | None = None):
    from keyshift.streaming.job import JobOptions, StreamJob

    job = StreamJob(spark, cfg, JobOptions(
        app=app, policy=policy, topic=topic, engines=engines, app_params=params or {},
        max_offsets_per_trigger=max_offsets, run_id=run_id or f"{policy}-{uuid.uuid4().hex[:6]}",
        policy_params=policy_params or {}))
    job.start()
    return job


def run_job(spark, cfg, app: str, policy: str, topic: str, records: int,
            params: dict[str, Any] | None = None, engines: int = 4, max_offsets: int = 400,
            timeout_s: float = 900, run_id: str | None = None):
    job = start_job(spark, cfg, app, policy, topic, params, engines, max_offsets, run_id)
    try:
        assert job.wait_for(records, timeout_s), f"job took {job.totals.records} of {records}"
    finally:
        job.stop()
    return job


def outputs(spark, cfg, run_id: str) -> list[tuple]:
    rows = (spark.read.format("delta").load(cfg.table_path("events_out"))
            .where(f"run_id = '{run_id}'")
            .select("key", "ts", "kind", "detail", "event_id").collect())
    return sorted(tuple(r) for r in rows)


def table_rows(spark, cfg, name: str, run_id: str, column: str = "run_id") -> list:
    return (spark.read.format("delta").load(cfg.table_path(name))
            .where(f"{column} = '{run_id}'").collect())


_PROGRESS = re.compile(rb"^batch\s+(\d+)\s+events\s+(\d+)\s+dead\s+(\d+)\s", re.M)


def records_in_log(log: Path) -> int:
    """Records (valid events and dead letters) of the batches a run's log shows done, from
    the progress line each batch prints as it ends (``keyshift run``). A test waiting for
    a job to take its input reads this rather than the ``metrics`` table: those rows wait
    for the next bookkeeping commit (every ``warehouse.commit_interval_s``, or the idle
    flush), and each look at the table is a Spark job beside the job's own. A batch run
    again after a kill prints again under its id: it counts once."""
    done = {int(b): int(e) + int(d) for b, e, d in _PROGRESS.findall(log.read_bytes())} \
        if log.exists() else {}
    return sum(done.values())


def wait_until(pred, timeout_s: float, poll_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(poll_s)
    return False


class MemoryControlLog(MemoryControlStore):
    """The control loop's in-memory store standing in for the Delta-backed
    ``keyshift.streaming.control_store.ControlLog`` (``loads[batch_id]``: what ``key_loads`` holds)."""
