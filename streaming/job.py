"""The streaming job: Kafka → validate → route by plan → engines → Delta, controlled per window.

One ``foreachBatch`` function composes the speed layer for micro-batch b:

1. validate the records (bad ones → ``dead_letter`` with the reason, the job goes on);
2. route: key → group (xxHash64, in the JVM) → engine through the plan in force for b;
3. engines: one task per engine slot (:func:`streaming.engines.run_engine`), migration of the
   groups whose owner changed since b−1 included (:mod:`streaming.migration`);
4. write ``events_out``, ``key_loads``, ``metrics`` (all idempotent per batch);
5. controller: collect the loads, and at a window's end evaluate, decide, realize, record.

Recovery: Kafka offsets and the query's checkpoint replay an unfinished batch with the same
offsets; Delta appends are idempotent per batch; engine stores roll back to before the
batch; the controller rebuilds its state from Delta. So a crash anywhere, mid-migration
included, followed by a restart gives the output of an uninterrupted run.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config
from keyshift.groups import spark_group_expr_sql
from keyshift.metrics import Balance, live_loads
from keyshift.schemas import event_schema

from .controller import Controller, ControlLog
from .engines import (
    DEAD,
    LOAD,
    OUT,
    SNAP,
    TASK,
    BatchSpec,
    engine_partitioner,
    run_engine,
    run_restore,
    work_seconds,
)
from .migration import Migration, record_completed, record_started, restore_rows
from .txn import append, concurrently

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TABLES_WRITTEN = ("events_out", "metrics", "key_loads", "dead_letter", "plans", "decisions",
                  "state_snapshots", "migrations")


class JobStopping(RuntimeError):
    """A micro-batch refused because :meth:`StreamJob.stop` was called; it is not committed."""


@dataclass
class JobOptions:
    """One run of the streaming job."""

    app: str
    policy: str
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-")
                        + uuid.uuid4().hex[:6])
    topic: str | None = None
    groups: int | None = None
    engines: int | None = None
    trigger_s: float | None = None
    app_params: dict[str, Any] = field(default_factory=dict)
    max_offsets_per_trigger: int | None = None
    policy_params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Totals:
    """Running counters of this process (the durable ones are in Delta ``metrics``)."""

    batches: int = 0
    records: int = 0
    events_in: int = 0
    processed: int = 0
    dead_letter: int = 0
    complex_events: int = 0
    migrations: int = 0
    moved_groups: int = 0
    moved_bytes: int = 0
    last_batch: int = -1


class StreamJob:
    """Builds and runs the query; ``process_batch`` is the whole per-batch logic."""

    def __init__(self, spark: SparkSession, cfg: Config, options: JobOptions) -> None:
        self.spark = spark
        self.cfg = cfg
        self.opt = options
        self.app = options.app
        event_schema(self.app)  # unknown app fails here, naming the known ones
        self.groups = options.groups or cfg.groups.count
        self.engines = options.engines or cfg.engines.initial
        self.trigger_s = options.trigger_s or cfg.spark.trigger_s
        self.run_id = options.run_id
        self.run_dir = cfg.home_path / "runs" / self.run_id
        self.topic = options.topic or cfg.kafka.topic
        per_window = max(1, round(cfg.controller.window_s / self.trigger_s))
        self.log = ControlLog(spark, cfg, self.run_id)
        self.controller = Controller(cfg, self.run_id, options.policy, self.groups, self.engines,
                                     per_window, self.log, options.policy_params)
        self.totals = Totals()
        self._recovered = False
        self._lock = threading.Lock()
        self._batch_lock = threading.Lock()
        self._stopping = threading.Event()
        self.query: StreamingQuery | None = None

    # -- query ------------------------------------------------------------------------
    @property
    def checkpoint(self) -> Path:
        return self.run_dir / "checkpoint"

    @property
    def store_root(self) -> Path:
        return self.run_dir / "engines"

    def source(self) -> DataFrame:
        reader = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.cfg.kafka.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false")
            .option("maxOffsetsPerTrigger",
                    self.opt.max_offsets_per_trigger or self.cfg.spark.max_offsets_per_trigger)
        )
        return reader.load()

    def start(self) -> StreamingQuery:
        from streaming.session import ensure_tables

        ensure_tables(self.spark, self.cfg, TABLES_WRITTEN)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "job.json").write_text(json.dumps(
            {"run_id": self.run_id, "app": self.app, "policy": self.opt.policy,
             "groups": self.groups, "engines": self.engines, "topic": self.topic,
             "trigger_s": self.trigger_s, "app_params": self.opt.app_params}, indent=2))
        self.query = (
            self.source().writeStream.queryName(f"keyshift-{self.run_id}")
            .foreachBatch(self.process_batch)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime=f"{self.trigger_s} seconds")
            .start()
        )
        return self.query

    def stop(self, timeout_s: float = 300.0) -> None:
        """Stop between micro-batches: let the running batch finish, refuse the next one.

        ``query.stop()`` alone interrupts a batch wherever it is (mid Delta commit, mid
        engine task): recovery makes that safe, but it fills the log with the interrupted
        jobs' errors. The batch lock is only waited for, never held across ``query.stop()``:
        the JVM's stop waits for a Python callback in flight, so holding it would deadlock.
        """
        self._stopping.set()
        if self._batch_lock.acquire(timeout=timeout_s):
            self._batch_lock.release()
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch, unless the job is stopping (then the batch stays for a restart)."""
        with self._batch_lock:
            if self._stopping.is_set():
                raise JobStopping(f"batch {batch_id} not started: the job is stopping; "
                                  "a restart with the same run id takes it")
            self._process_batch(df, batch_id)

    # -- one micro-batch --------------------------------------------------------------
    def _parse(self, df: DataFrame) -> DataFrame:
        """The platform's validation (``ingest.classify``), plus the group and the event JSON."""
        from pyspark.sql import functions as F

        from .ingest import classify

        names = event_schema(self.app).names
        return classify(df, self.app).select(
            "partition", "offset", F.col("kafka_ts").alias("timestamp"), "raw", "reason",
            F.expr(spark_group_expr_sql("key", self.groups)).alias("group"),
            F.to_json(F.struct(*names)).alias("event"),
        )

    def _process_batch(self, df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        start_wall = datetime.now(UTC)
        if not self._recovered:
            self.controller.recover(batch_id)
            self._recovered = True
        plan = self.controller.plan_for(batch_id)
        prev = self.controller.plan_for(batch_id - 1) if batch_id > 0 else plan
        migration = Migration.between(self.run_id, batch_id, prev, plan)
        slots = max(plan.engines, prev.engines)

        spec = BatchSpec(batch_id, self.app, dict(self.opt.app_params),
                         str(self.store_root), migration.moves_out(), migration.moves_in())
        assign = plan.assignment
        # one Spark job per batch: valid events to their engine, rejected records to engine 0
        routed = (
            self._parse(df)
            .select("group", "partition", "offset", "event", "reason", "raw",
                    F.col("timestamp").cast("double").alias("kts")).rdd
            .map(lambda r: (int(assign[r[0]]) if r[4] is None else 0, tuple(r)))
            .partitionBy(slots, engine_partitioner)
        )
        t_engines = time.perf_counter()
        records = routed.mapPartitionsWithIndex(
            lambda e, rows: run_engine(spec, e, rows)).collect()
        engines_s = time.perf_counter() - t_engines

        outs = [r[1] for r in records if r[0] == OUT]
        tasks = [r[1] for r in records if r[0] == TASK]
        snaps = [r[1] for r in records if r[0] == SNAP]
        load_rows = [r[1] for r in records if r[0] == LOAD]
        dead = [r[1] for r in records if r[0] == DEAD]

        moved = 0
        pause_s = 0.0
        if len(migration):
            t_mig = time.perf_counter()
            moved = record_started(self.spark, self.cfg, self.run_id, migration, snaps, start_wall)
            marker = self.run_dir / "migrating.json"
            marker.write_text(json.dumps({"batch_id": batch_id, "groups": len(migration),
                                          "migration_id": migration.migration_id}))
            back = restore_rows(migration, snaps)
            restored = (
                self.spark.sparkContext.parallelize(back, max(1, min(len(back), slots)))
                .partitionBy(slots, engine_partitioner)
                .mapPartitionsWithIndex(lambda e, rows: run_restore(spec, e, rows))
                .collect()
            )
            outs += [r[1] for r in restored if r[0] == OUT]
            tasks += [r[1] for r in restored if r[0] == TASK]
            pause_s = time.perf_counter() - t_mig

        loads = np.zeros(self.groups)
        state = np.zeros(self.groups)
        for g, _, n, size in load_rows:
            loads[g] += n
            state[g] = max(state[g], size)
        engine_loads = np.bincount(plan.assignment, weights=loads, minlength=plan.engines)
        processed = sum(t.get("events", 0) - t.get("buffered", 0) + t.get("replayed", 0)
                        for t in tasks)
        engine_s = work_seconds(tasks)
        self.controller.collect(batch_id, loads, state, engine_s=engine_s, started=start_wall)
        # the batch's outputs, the migration's end and the controller's decision go to
        # different tables: one round of concurrent commits instead of a queue of them
        t_writes = time.perf_counter()
        ended = datetime.now(UTC)
        controller_s = 0.0

        def control() -> None:
            nonlocal controller_s
            t_ctl = time.perf_counter()
            self.controller.end_of_batch(batch_id)
            controller_s = time.perf_counter() - t_ctl

        writes = [*self._output_writes(batch_id, outs, load_rows, dead, plan), control]
        if len(migration):
            writes.append(lambda: record_completed(self.spark, self.cfg, self.run_id, migration,
                                                   moved, start_wall, ended))
        concurrently(*writes)
        if len(migration):
            (self.run_dir / "migrating.json").unlink(missing_ok=True)
        writes_s = time.perf_counter() - t_writes
        duration = time.perf_counter() - t0
        stage1 = [t for t in tasks if not t.get("restore")]
        valid = sum(t["events"] for t in stage1)
        live = live_loads(plan.assignment, loads, plan.live)
        bal = Balance.of(live)
        arrived = [(t["kafka_ts_first"], t["kafka_ts_last"]) for t in stage1
                   if t.get("kafka_ts_first") is not None]
        span = (max(b for _, b in arrived) - min(a for a, _ in arrived)) if arrived else 0.0
        metrics = {
            "run_id": self.run_id, "batch_id": batch_id, "window_start": start_wall,
            "window_end": datetime.now(UTC), "events_in": valid, "dead_letter": len(dead),
            "processed": processed, "out_events": len(outs), "missed": valid - processed,
            "selectivity": len(outs) / valid if valid else 0.0, "engines": plan.parallelism,
            "engine_loads": [int(x) for x in engine_loads], "rstd": bal.rstd,
            "var_load": bal.var,
            # the monitor of elastic-cep Eq. 1-2, the GPs' training data: In per second of
            # arrival (Kafka append times; a catch-up batch spans more than one trigger) and
            # Lat = engine work seconds per tuple (task time without the wait for input), the
            # planner's unit (the scaler's too)
            "input_rate": valid / max(span, self.trigger_s),
            "latency_s": engine_s / valid if valid else 0.0, "batch_duration_s": duration,
            "plan_version": plan.version, "policy": self.opt.policy,
        }
        append(self.spark, self.cfg, "metrics", [metrics], f"{self.run_id}/metrics", batch_id)
        with self._lock:
            t = self.totals
            t.batches += 1
            t.records += valid + len(dead)
            t.events_in += valid
            t.processed += processed
            t.dead_letter += len(dead)
            t.complex_events += len(outs)
            if len(migration):
                t.migrations += 1
                t.moved_groups += len(migration)
                t.moved_bytes += moved
            t.last_batch = batch_id
        self._write_timing({
            "batch_id": batch_id, "slots": slots, "engines_s": engines_s,
            "controller_s": controller_s, "migration_s": pause_s, "writes_s": writes_s,
            "duration_s": duration, "moved_groups": len(migration), "moved_bytes": moved,
            "tasks": tasks})

    def _output_writes(self, batch_id: int, outs: list[tuple], load_rows: list[tuple],
                       dead: list, plan) -> list:
        """The batch's appends to ``events_out``, ``key_loads`` and ``dead_letter``, as calls."""
        rid = self.run_id
        start = datetime.now(UTC)
        events = [
            {"run_id": rid, "batch_id": batch_id, "app": self.app, "engine": e, "group": g,
             "key": k, "ts": ts, "kind": kind, "detail": detail, "event_id": eid}
            for e, g, k, ts, kind, detail, eid in outs
        ]
        key_loads = [
            {"run_id": rid, "batch_id": batch_id, "window_start": start, "group": g,
             "engine": e, "load": n, "state_bytes": size, "plan_version": plan.version}
            for g, e, n, size in load_rows
        ]
        dead_rows = [
            {"run_id": rid, "batch_id": batch_id, "topic": self.topic, "partition": part,
             "offset": off, "kafka_ts": datetime.fromtimestamp(kts, UTC) if kts else None,
             "raw": (raw or "")[:4096], "reason": reason}
            for part, off, kts, raw, reason in dead
        ]
        return [
            (lambda name=name, rows=rows: append(self.spark, self.cfg, name, rows,
                                                 f"{rid}/{name}", batch_id))
            for name, rows in (("events_out", events), ("key_loads", key_loads),
                               ("dead_letter", dead_rows))
            if rows
        ]

    def _write_timing(self, record: dict[str, Any]) -> None:
        """Per-batch task records (the 1:1 proof, timings) as JSON lines in the run folder."""
        with open(self.run_dir / "batches.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    # -- helpers for callers (demo, tests, bench) --------------------------------------
    def wait_for(self, records: int, timeout_s: float, poll_s: float = 0.5) -> bool:
        """Block until this process has taken ``records`` Kafka records through batches."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.query is not None and self.query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {self.query.exception()}")
            with self._lock:
                if self.totals.records >= records:
                    return True
            time.sleep(poll_s)
        return False


def main(argv: list[str] | None = None) -> int:
    """Run one job until SIGTERM/SIGINT (``python -m streaming.job``; tests crash and restart it).

    Configuration comes from the usual places (``KEYSHIFT_CONFIG``, ``KEYSHIFT_*`` variables);
    restarting with the same ``--run-id`` resumes from the run's checkpoint and Delta state.
    """
    import argparse
    import signal

    from keyshift.config import load_config

    from .session import get_spark

    p = argparse.ArgumentParser(prog="python -m streaming.job")
    p.add_argument("--app", required=True)
    p.add_argument("--policy", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--topic")
    p.add_argument("--engines", type=int)
    p.add_argument("--max-offsets", type=int)
    p.add_argument("--params", default="{}", help="operator parameters as JSON")
    args = p.parse_args(argv)
    cfg = load_config()
    spark = get_spark(cfg, app_name=f"keyshift-job-{args.run_id}")
    job = StreamJob(spark, cfg, JobOptions(
        app=args.app, policy=args.policy, run_id=args.run_id, topic=args.topic,
        engines=args.engines, app_params=json.loads(args.params),
        max_offsets_per_trigger=args.max_offsets))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    query = job.start()
    print(f"running {job.run_id}", flush=True)
    while not stop.wait(0.5):
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", flush=True)
            return 1
    job.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
