"""Batch job: a topic's own past as input rates, so a workload has a forecast from day one.

Every Kafka record carries a timestamp (its producer's create time, or the broker's append
time), for as long as the topic retains it. Counted per statistic window, those timestamps
are the input rate the job would have measured had it run all along: days of history for
the input-rate forecaster before the job ever ran (docs/models.md, "A forecast from day
one"). The latency model cannot be had this way; it waits for runs of the operator.

The topic is read with Spark's batch Kafka source from ``since`` on (``startingTimestamp``:
the broker finds each partition's first offset at that time) up to the end offsets of the
moment of the read, and counted in Spark: only the counts per window reach the driver,
whatever the topic's size. The rows go to ``input_rates`` under one run id per workload and
topic (``topic:<topic>``), replaced at each derivation, so a second run of the job refreshes
the history instead of doubling it. The last window, still filling at the read, is left
out; windows without a record inside the read span count as 0 events/s.

Run by hand: ``keyshift job history --topic T [--days D] [--workload W]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from keyshift.config import Config, config_workload
from keyshift.jobs.history import HistoryError
from keyshift.schemas import SCHEMA_VERSION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_DAYS = 7


@dataclass(frozen=True)
class TopicRead:
    """Which part of which topic becomes whose history, in windows of ``window_s``."""

    topic: str
    since: datetime
    window_s: float
    workload: str

    @property
    def run_id(self) -> str:
        return f"topic:{self.topic}"


def run(cfg: Config, topic: str, days: float = DEFAULT_DAYS, workload: str = "",
        window_s: float | None = None, spark: SparkSession | None = None,
        now: datetime | None = None) -> dict[str, Any]:
    """Derive and write ``topic``'s input rates of the last ``days``; a JSON-able summary
    with ``status`` written|skipped. The workload defaults to ``cfg``'s operator on this
    topic (``controller.app``, :func:`keyshift.config.config_workload`)."""
    if not days > 0:
        raise ValueError(f"days: must be > 0, got {days!r}")
    window_s = float(window_s or cfg.controller.window_s)
    if not window_s >= 1:
        raise ValueError(f"window_s: must be >= 1 second, got {window_s!r}")
    if not workload:
        named = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"topic": topic})})
        workload = config_workload(named)
    now = now or datetime.now(UTC)
    read = TopicRead(topic, now - timedelta(days=days), window_s, workload)
    summary: dict[str, Any] = {"job": "topic_rates", "topic": topic, "workload": workload,
                               "window_s": window_s, "since": read.since.isoformat(),
                               "bootstrap": cfg.kafka.bootstrap}
    if spark is None:
        from keyshift.lakehouse.session import get_spark

        spark = get_spark(cfg, app_name="keyshift-topic-rates")
    counts = count_windows(spark, cfg, read)
    rows = rate_rows(counts, read, now)
    if rows.empty:
        return {**summary, "status": "skipped",
                "reason": f"topic {topic!r} holds no record since {read.since:%Y-%m-%d %H:%M} "
                          "UTC in a closed window"}
    from keyshift.lakehouse.delta import replace_runs

    written = replace_runs(spark, cfg, "input_rates", rows)
    return {**summary, "status": "written", "rows": written, "run_id": read.run_id,
            "events": int(rows["events_in"].sum()),
            "from": rows["window_start"].iloc[0].isoformat(),
            "to": rows["window_end"].iloc[-1].isoformat(),
            "mean_rate": float(rows["input_rate"].mean()),
            "table": cfg.table_path("input_rates")}


def count_windows(spark: SparkSession, cfg: Config, read: TopicRead) -> pd.DataFrame:
    """``bucket`` (window index since the epoch) and ``events`` per window with a record,
    counted by Spark; a topic or broker that cannot be read is one :class:`HistoryError`."""
    from pyspark.sql import functions as F

    from keyshift.kafka_security import BrokerError, spark_options

    try:
        security = spark_options(cfg.kafka)
    except BrokerError as exc:
        raise HistoryError(str(exc)) from None
    _check_listening(cfg.kafka.bootstrap, read.topic)
    source = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", cfg.kafka.bootstrap)
              .option("subscribe", read.topic)
              .option("startingTimestamp", str(int(read.since.timestamp() * 1000)))
              # a partition with no record since then gives none, instead of an error
              .option("startingOffsetsByTimestampStrategy", "latest")
              .option("endingOffsets", "latest")
              .option("kafka.request.timeout.ms", "20000")
              .option("kafka.default.api.timeout.ms", "20000")
              .options(**security).load())
    bucket = F.floor(F.col("timestamp").cast("double") / F.lit(read.window_s))
    try:
        frame = (source.select(bucket.alias("bucket")).groupBy("bucket")
                 .agg(F.count(F.lit(1)).alias("events")).toPandas())
    except Exception as exc:  # noqa: BLE001 -- Py4J wraps the Kafka client's errors
        raise HistoryError(f"cannot read topic {read.topic!r} at {cfg.kafka.bootstrap}: "
                           f"{_kafka_reason(exc)}") from None
    return frame


def _check_listening(bootstrap: str, topic: str, timeout_s: float = 5.0) -> None:
    """Some broker of ``bootstrap`` accepts a connection, else a HistoryError at once: the
    Kafka source would retry its metadata call for a minute before saying so."""
    import socket

    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
            return
        except (OSError, ValueError):
            continue
    raise HistoryError(f"cannot read topic {topic!r}: no broker of {bootstrap} accepts a "
                       "connection (is it running? `keyshift kafka start` for the local one)")


def _kafka_reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("UnknownTopicOrPartitionException", "Timeout", "does not exist"):
        if marker in text:
            line = next((ln for ln in text.splitlines() if marker in ln), marker)
            return line.strip()[:300]
    return (text.strip().splitlines() or [type(exc).__name__])[0][:300]


def rate_rows(counts: pd.DataFrame, read: TopicRead, now: datetime) -> pd.DataFrame:
    """``input_rates`` rows from window counts: every window from the first with a record to
    the last closed one before ``now``, the empty ones at 0."""
    names = ["schema_version", "run_id", "workload", "topic", "window_start", "window_end",
             "events_in", "input_rate", "derived_at"]
    if counts.empty:
        return pd.DataFrame(columns=names)
    w = read.window_s
    buckets = counts["bucket"].to_numpy(np.int64)
    first = int(max(buckets.min(), np.ceil(read.since.timestamp() / w)))
    last = int(np.floor(now.timestamp() / w)) - 1  # the window still filling is left out
    if last < first:
        return pd.DataFrame(columns=names)
    index = np.arange(first, last + 1, dtype=np.int64)
    events = (pd.Series(counts["events"].to_numpy(np.int64), index=buckets)
              .groupby(level=0).sum().reindex(index, fill_value=0).to_numpy(np.int64))
    starts = pd.to_datetime(index * w, unit="s", utc=True)
    return pd.DataFrame({
        "schema_version": SCHEMA_VERSION, "run_id": read.run_id, "workload": read.workload,
        "topic": read.topic, "window_start": starts,
        "window_end": starts + pd.Timedelta(seconds=w), "events_in": events,
        "input_rate": events / w, "derived_at": pd.Timestamp(now)})


def read_rates(spark: SparkSession, cfg: Config, start: datetime, end: datetime
               ) -> pd.DataFrame:
    """The ``input_rates`` rows of [start, end), oldest first; empty when no topic's past was
    ever derived (no table): the retrain then trains on ``metrics`` alone."""
    from pyspark.sql import functions as F

    from keyshift.lakehouse.delta import read_table, table_exists
    from keyshift.schemas import TABLES

    if not table_exists(spark, cfg, "input_rates"):
        return pd.DataFrame(columns=TABLES["input_rates"].names)
    df = read_table(spark, cfg, "input_rates")
    df = df.where((F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end)))
    return df.select(*TABLES["input_rates"].names).orderBy("window_start").toPandas()


def print_summary(result: dict[str, Any]) -> None:
    if result["status"] == "skipped":
        print(f"topic history skipped: {result['reason']}")
        return
    print(f"wrote {result['rows']} windows of {result['window_s']:g} s of topic "
          f"{result['topic']!r} ({result['events']} records, {result['from'][:16]} to "
          f"{result['to'][:16]} UTC, mean {result['mean_rate']:.3g} events/s) as the input-rate "
          f"history of workload {result['workload']!r} into {result['table']}")


__all__ = ["DEFAULT_DAYS", "TopicRead", "count_windows", "print_summary", "rate_rows",
           "read_rates", "run"]
