"""Validation of Kafka records: the platform's one rule for what a good event is.

:func:`classify` is the first step of every micro-batch of the speed layer
(:meth:`keyshift.streaming.job.StreamJob._parse`), in both of its modes: ``keyshift run`` (engines
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
_FLOATS = frozenset({"DOUBLE", "FLOAT", "REAL"})


def classify(raw: DataFrame, app: str) -> DataFrame:
    """Kafka records → event columns plus ``reason`` (NULL for a valid event); see
    :class:`Classifier`, which a job builds once and applies to every micro-batch."""
    return Classifier(app)(raw)


class Classifier:
    """Kafka records → event columns plus ``reason`` (NULL for a valid event).

    Two parses of the same text. The strict one (Spark's VARIANT parser, of the record
    wrapped in ``[...]``) decides whether the record is one JSON object and which fields
    are present: it refuses what JSON does not allow and the lenient parser would take
    silently (NaN and Infinity literals, single quotes, duplicate names whose value would
    depend on the parser, lone surrogates it would turn into ``?``, text after the object,
    a second object it would drop). The typed one (``from_json`` against the event schema)
    gives the values; it keeps the fields it could convert and nulls the others, so
    "present, yet null in the typed struct" is exactly a wrong type. Bytes that are not
    UTF-8 are refused before either (they would reach the engines' Arrow input as strings
    Python cannot decode, failing the task), and ``raw`` keeps valid UTF-8 for the same
    reason. A DOUBLE must be finite: ``1e400`` parses to infinity, which no JSON number is.
    A STRING field takes any non-null JSON value as its JSON text (Spark's rule; numeric
    ids are common).

    The three projections are built once and applied to every micro-batch (why:
    :class:`keyshift.streaming.batch_frames.BatchExpressions`).
    """

    def __init__(self, app: str) -> None:
        from pyspark.sql import functions as F

        schema = event_schema(app)
        size = F.octet_length("value")
        string = F.col("value").cast("string")
        utf8 = F.is_valid_utf8(string)
        text = F.when((size > MAX_EVENT_BYTES) | ~utf8, F.lit(None)).otherwise(string)
        self._parsed = [
            "topic", "partition", "offset", F.col("timestamp").alias("kafka_ts"),
            size.alias("_size"), utf8.alias("_utf8"),
            F.make_valid_utf8(F.substring(string, 1, RAW_KEEP)).alias("raw"),
            F.try_parse_json(F.concat(F.lit("["), text, F.lit("]"))).alias("_v"),
            # the parser stops at the end of the first value: the array wrap above catches any
            # text after the object but a "]", which would close the array early; the object
            # wrap catches that one (it fails on "]"), and is parsed only for a record with a "]"
            F.when(F.instr(text, "]") == 0, F.lit(True))
            .otherwise(F.try_parse_json(F.concat(F.lit('{"":'), text, F.lit("}"))).isNotNull())
            .alias("_closed"),
            F.regexp_like(text, F.lit(r"^[ \t\r\n]*\{")).alias("_object"),
            F.from_json(text, schema.ddl()).alias("_t"),
        ]

        def present(name: str) -> Column:
            value = F.try_variant_get("_v", f"$[0].{name}", "variant")
            return value.isNotNull() & ~F.is_variant_null(value)

        # presence once per field (a column, not an expression repeated in each branch below)
        self._present = ["*", *[present(c.name).alias(f"_p{i}")
                                for i, c in enumerate(schema.columns)]]
        one_object = (F.col("_v").isNotNull() & F.col("_object") & F.col("_closed")
                      & F.try_variant_get("_v", "$[1]", "variant").isNull())
        reason: Column = F.when(
            F.col("_size") > MAX_EVENT_BYTES,
            F.format_string(f"oversized: %d bytes > {MAX_EVENT_BYTES}", F.col("_size")),
        ).when(~F.col("_utf8"), F.lit("malformed json: not UTF-8")
        ).when(~one_object, F.lit("malformed json"))
        for i, c in enumerate(schema.columns):
            if not c.nullable:
                reason = reason.when(~F.col(f"_p{i}"), F.lit(f"missing field: {c.name}"))
        for i, c in enumerate(schema.columns):
            typed = F.col(f"_t.{c.name}")
            wrong = typed.isNull()
            if c.type.upper() in _FLOATS:
                wrong = wrong | F.isnan(typed) | (F.abs(typed) == float("inf"))
            reason = reason.when(F.col(f"_p{i}") & wrong,
                                 F.lit(f"wrong type: {c.name} (expected {c.type})"))
        self._classified = [
            *_KAFKA_COLS, "raw", reason.alias("reason"),
            *[F.col(f"_t.{c}").alias(c) for c in schema.names],
        ]

    def __call__(self, raw: DataFrame) -> DataFrame:
        return raw.select(*self._parsed).select(*self._present).select(*self._classified)
