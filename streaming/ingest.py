"""The ingestion job: Kafka → validated, routed events → per-window metrics in Delta.

One statistic window is one micro-batch (trigger = ``controller.window_s``): the window's
loads are exactly what the batch routed, with no second aggregation clock to keep in step,
and Delta's per-batch idempotent writes then make the window history exact across restarts.

Pieces the engines' query reuses (documented in docs/platform.md):

* :func:`routed_events` — the validated, routed streaming DataFrame (id, key, ts, payload
  columns, group, engine, plan_version, ...), for a stateful operator to follow.
* :class:`WindowWriter` — a ``foreachBatch`` function that writes ``dead_letter``,
  ``key_loads`` and ``metrics`` for one micro-batch; :meth:`WindowWriter.write_window` takes
  an already-routed batch and the operator's own counts (processed, out, missed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config
from keyshift.metrics import load_variance, rstd
from keyshift.schemas import MAX_EVENT_BYTES, SCHEMA_VERSION, event_schema

from . import routing, sinks
from .session import ensure_tables

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

RAW_KEEP = 4096  # characters of a bad record kept in dead_letter.raw
TABLES_WRITTEN = ("metrics", "key_loads", "dead_letter", "plans")
_KAFKA_COLS = ("topic", "partition", "offset", "kafka_ts")


@dataclass(frozen=True)
class IngestSpec:
    """One run of the ingestion query: what it reads, how it routes, where it checkpoints."""

    app: str
    run_id: str
    topic: str
    bootstrap: str
    checkpoint: Path
    trigger_s: float
    groups: int
    kg_engines: int
    scope: str = ""  # plan scope; empty = run_id
    policy: str = "kg"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 20000
    routing: bool = True
    available_now: bool = False  # process what the topic holds, then stop (benchmarks, replays)

    @classmethod
    def from_config(cls, cfg: Config, run_id: str, **over: Any) -> IngestSpec:
        spec = cls(
            app=cfg.controller.app, run_id=run_id, topic=cfg.kafka.topic,
            bootstrap=cfg.kafka.bootstrap,
            checkpoint=cfg.home_path / "checkpoints" / run_id / "ingest",
            trigger_s=cfg.controller.window_s, groups=cfg.groups.count,
            kg_engines=cfg.engines.initial, policy=cfg.controller.policy,
            max_offsets_per_trigger=cfg.spark.max_offsets_per_trigger,
        )
        spec = replace(spec, **over)
        try:
            event_schema(spec.app)  # shipped app, entry point or module:Class
        except KeyError as exc:
            raise ValueError(str(exc).strip("'")) from None
        return spec

    @property
    def plan_scope(self) -> str:
        return self.scope or self.run_id


def kafka_source(spark: SparkSession, spec: IngestSpec) -> DataFrame:
    """The raw Kafka stream; a deleted or compacted offset range is skipped, not fatal."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spec.bootstrap)
        .option("subscribe", spec.topic)
        .option("startingOffsets", spec.starting_offsets)
        .option("maxOffsetsPerTrigger", spec.max_offsets_per_trigger)
        .option("failOnDataLoss", "false")
        .load()
    )


def classify(raw: DataFrame, app: str) -> DataFrame:
    """Kafka records → event columns plus ``reason`` (NULL for a valid event).

    Two parses of the same text: as a map of strings (does the JSON parse, which fields are
    present) and against the typed event schema (which present fields have the wrong type).
    Spark's ``from_json`` keeps the fields it could convert and nulls the others, so "present
    in the map, null in the typed struct" is exactly a wrong type.
    """
    from pyspark.sql import functions as F

    schema = event_schema(app)
    size = F.octet_length("value")
    text = F.when(size > MAX_EVENT_BYTES, F.lit(None)).otherwise(F.col("value").cast("string"))
    df = raw.select(
        "topic", "partition", "offset", F.col("timestamp").alias("kafka_ts"),
        size.alias("_size"),
        F.substring(F.col("value").cast("string"), 1, RAW_KEEP).alias("raw"),
        F.from_json(text, "MAP<STRING,STRING>").alias("_m"),
        F.from_json(text, schema.ddl()).alias("_t"),
    )
    reason: Column = F.when(
        F.col("_size") > MAX_EVENT_BYTES,
        F.format_string(f"oversized: %d bytes > {MAX_EVENT_BYTES}", F.col("_size")),
    ).when(F.col("_m").isNull(), F.lit("malformed json"))
    for c in schema.columns:
        if not c.nullable:
            reason = reason.when(F.col("_m")[c.name].isNull(), F.lit(f"missing field: {c.name}"))
    for c in schema.columns:
        reason = reason.when(
            F.col("_m")[c.name].isNotNull() & F.col(f"_t.{c.name}").isNull(),
            F.lit(f"wrong type: {c.name} (expected {c.type})"),
        )
    return df.select(
        *_KAFKA_COLS, "raw", reason.alias("reason"),
        *[F.col(f"_t.{c}").alias(c) for c in schema.names],
    )


def route_classified(spark: SparkSession, cfg: Config, spec: IngestSpec,
                     classified: DataFrame) -> DataFrame:
    """Adds group/engine/plan columns (routing off: everything on engine 0)."""
    if not spec.routing:
        return routing.unrouted(classified)
    plans = routing.plan_rows(spark, cfg, spec.plan_scope)
    return routing.route(classified, plans, spec.groups, spec.kg_engines)


def routed_events(spark: SparkSession, cfg: Config, spec: IngestSpec) -> DataFrame:
    """The validated, routed event stream for a stateful operator to follow.

    Columns: id, key, ts, the app's payload columns, topic, partition, offset, kafka_ts,
    group, engine, plan_version, plan_engines, plan_live. Bad records are dropped here;
    use :func:`start_ingest` (or :class:`WindowWriter`) to record them in ``dead_letter``.
    """
    from pyspark.sql import functions as F

    classified = classify(kafka_source(spark, spec), spec.app).where(F.col("reason").isNull())
    return route_classified(spark, cfg, spec, classified).drop("reason", "raw")


@dataclass
class WindowWriter:
    """``foreachBatch`` body: dead letters, per-group loads and the window's metrics row."""

    spark: SparkSession
    cfg: Config
    spec: IngestSpec
    app_id: str = ""
    _last_end: datetime | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.app_id = self.app_id or f"keyshift-ingest-{self.spec.run_id}"

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """One micro-batch of :func:`classify` + routing output (valid and bad rows)."""
        from pyspark.sql import functions as F

        started = time.perf_counter()
        window_end = datetime.now(UTC)
        batch.persist()
        try:
            bad = batch.where(F.col("reason").isNotNull())
            counts = self._aggregate(batch)
            dead = int(sum(r["n"] for r in counts if r["bad"]))
            if dead:
                self._write_dead_letter(bad, batch_id)
            self._write(
                [r for r in counts if not r["bad"]], batch_id, dead, window_end, started)
        finally:
            batch.unpersist()

    def write_window(self, routed: DataFrame, batch_id: int, dead_letter: int = 0,
                     processed: int | None = None, out_events: int = 0,
                     missed: int = 0) -> dict[str, Any]:
        """Metrics and key loads of an already-routed, valid-only batch; returns the row."""
        started = time.perf_counter()
        window_end = datetime.now(UTC)
        counts = self._aggregate(routed.withColumn("reason", _null_reason()))
        return self._write(counts, batch_id, dead_letter, window_end, started,
                           processed=processed, out_events=out_events, missed=missed)

    # --- internals ------------------------------------------------------------------
    def _aggregate(self, batch: DataFrame) -> list[dict[str, Any]]:
        """One small collect: count and Kafka-time sum per (valid?, group, engine)."""
        from pyspark.sql import functions as F

        rows = (
            batch.groupBy(F.col("reason").isNotNull().alias("bad"), "group", "engine")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(F.unix_millis("kafka_ts")).alias("ts_sum"),
                F.max("plan_version").alias("plan_version"),
                F.max("plan_engines").alias("plan_engines"),
                F.first("plan_live").alias("plan_live"),
            )
            .collect()
        )
        return [r.asDict() for r in rows]

    def _write_dead_letter(self, bad: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        out = bad.select(
            F.lit(SCHEMA_VERSION).alias("schema_version"),
            F.lit(self.spec.run_id).alias("run_id"),
            F.lit(batch_id).cast("bigint").alias("batch_id"),
            "topic", "partition", "offset", "kafka_ts", "raw", "reason",
        )
        sinks.append(out, self.cfg, "dead_letter", self.app_id, batch_id)

    def _write(self, counts: list[dict[str, Any]], batch_id: int, dead: int,
               window_end: datetime, started: float, processed: int | None = None,
               out_events: int = 0, missed: int = 0) -> dict[str, Any]:
        window_start = self._last_end or window_end - timedelta(seconds=self.spec.trigger_s)
        self._last_end = window_end
        n = np.array([r["n"] for r in counts], dtype=np.int64)
        events_in = int(n.sum())
        if counts:
            plan_version = int(max(r["plan_version"] for r in counts))
            slots = int(max(r["plan_engines"] for r in counts))
            live = np.asarray(next(r["plan_live"] for r in counts
                                   if r["plan_version"] == plan_version), dtype=bool)
            engines = np.array([r["engine"] for r in counts], dtype=np.int64)
            per_slot = np.bincount(engines, weights=n, minlength=slots).astype(np.int64)
            ts_mean_ms = float(sum(r["ts_sum"] for r in counts)) / max(events_in, 1)
            latency = max(0.0, window_end.timestamp() - ts_mean_ms / 1000.0)
        else:
            plan_version, slots = 0, self.spec.kg_engines
            live = np.ones(slots, dtype=bool)
            per_slot = np.zeros(slots, dtype=np.int64)
            latency = 0.0
        live_loads = per_slot[live[: per_slot.size]] if live.size >= per_slot.size else per_slot
        span = max((window_end - window_start).total_seconds(), 1e-3)
        if counts:
            key_rows = [{
                "schema_version": SCHEMA_VERSION, "run_id": self.spec.run_id,
                "batch_id": batch_id, "window_start": window_start, "group": int(r["group"]),
                "engine": int(r["engine"]), "load": int(r["n"]), "state_bytes": None,
                "plan_version": int(r["plan_version"]),
            } for r in counts]
            sinks.append(sinks.rows_frame(self.spark, "key_loads", key_rows), self.cfg,
                         "key_loads", self.app_id, batch_id)
        processed = events_in if processed is None else processed
        row = {
            "schema_version": SCHEMA_VERSION, "run_id": self.spec.run_id, "batch_id": batch_id,
            "window_start": window_start, "window_end": window_end, "events_in": events_in,
            "dead_letter": dead, "processed": processed, "out_events": out_events,
            "missed": missed, "selectivity": out_events / events_in if events_in else 0.0,
            "engines": int(live.sum()), "engine_loads": [int(x) for x in per_slot],
            "rstd": rstd(live_loads), "var_load": load_variance(live_loads),
            "input_rate": events_in / span, "latency_s": latency,
            "batch_duration_s": time.perf_counter() - started,
            "plan_version": plan_version, "policy": self.spec.policy,
        }
        sinks.append(sinks.rows_frame(self.spark, "metrics", [row]), self.cfg, "metrics",
                     self.app_id, batch_id)
        return row


def _null_reason() -> Column:
    from pyspark.sql import functions as F

    return F.lit(None).cast("string")


def start_ingest(spark: SparkSession, cfg: Config, spec: IngestSpec,
                 query_name: str | None = None) -> StreamingQuery:
    """Start the ingestion query (Kafka → classify → route → foreachBatch writer).

    The checkpoint holds the Kafka offsets: stopping and starting again with the same spec
    continues where the last committed batch ended.
    """
    ensure_tables(spark, cfg, TABLES_WRITTEN)
    classified = classify(kafka_source(spark, spec), spec.app)
    routed = route_classified(spark, cfg, spec, classified)
    spec.checkpoint.mkdir(parents=True, exist_ok=True)
    return (
        routed.writeStream.queryName(query_name or f"ingest-{spec.run_id}")
        .foreachBatch(WindowWriter(spark, cfg, spec))
        .option("checkpointLocation", str(spec.checkpoint))
        .trigger(**({"availableNow": True} if spec.available_now
                    else {"processingTime": f"{spec.trigger_s} seconds"}))
        .start()
    )
