"""Validation of Kafka records: the platform's one rule for what a good event is.

:func:`classify` is the first step of every micro-batch of the speed layer
(:meth:`streaming.job.StreamJob._parse`), in both of its modes: ``keyshift run`` (engines
run the operator) and ``keyshift stream`` (ingestion only: the engines count). A bad record
is not an error of the job: it goes to ``dead_letter`` with its reason, the job goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keyshift.apps import event_schema
from keyshift.schemas import MAX_EVENT_BYTES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

RAW_KEEP = 4096  # characters of a bad record kept in dead_letter.raw
_KAFKA_COLS = ("topic", "partition", "offset", "kafka_ts")


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
