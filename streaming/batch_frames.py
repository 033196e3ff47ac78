"""The Spark frames of every micro-batch: the parse, the route through the plan in force, the
engine stage and the output tables' frames.

Apart from :class:`keyshift.streaming.job.StreamJob` because they are the data path and
nothing else: a function of the batch's input, the plan and a few names, with no query,
controller or warehouse in sight, so a test builds them on any DataFrame. Built once per
job, since every ``F.*`` call is a round trip to the JVM (:class:`BatchExpressions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from keyshift.groups import spark_group_expr_sql
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION

from .engines import (
    DEAD,
    ENGINE_OUTPUT,
    OUT,
    OUT_FETCHED,
    BatchSpec,
    arrow_engine,
    arrow_split,
)
from .ingest import Classifier
from .placement import placement_keys

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# ``events_out``'s columns from the engine stage's (ENGINE_OUTPUT), after the run's own:
# one list for the executors' append and the driver's (:func:`events_out_rows`)
EVENTS_OUT_FROM = (("engine", "engine"), ("group", "grp"), ("key", "key"), ("ts", "ts"),
                   ("kind", "kind"), ("detail", "detail"), ("event_id", "event_id"))


@dataclass(frozen=True)
class BatchExpressions:
    """The expressions every micro-batch's parse and routing apply, built with the job:
    each ``F.*`` call is a round trip to the JVM, and rebuilding these ~100 per batch took
    0.27 s of a 1.3 s batch of 100 events. Unresolved columns hold no DataFrame, so one set
    serves every batch (the plan's own routing column: :meth:`BatchFrames.route`)."""

    classify: Classifier  # validation: event columns plus ``reason``
    parsed: list  # then the group and the typed event
    routed: list  # :data:`ENGINE_INPUT` up to the placement key
    summary: Column  # the last column, NULL before a split

    @classmethod
    def of(cls, app: str, names: list[str], groups: int) -> BatchExpressions:
        from pyspark.sql import functions as F

        return cls(
            classify=Classifier(app),
            parsed=["partition", "offset", "kafka_ts", "raw",
                    "reason", F.expr(spark_group_expr_sql("key", groups)).alias("group"),
                    F.struct(*names).alias("event")],
            routed=[F.col("group").cast("int").alias("grp"), F.col("partition").cast("int"),
                    F.col("offset").cast("bigint"), "event", "reason", "raw",
                    F.col("kafka_ts").cast("double").alias("kafka_ts")],
            summary=F.lit(None).cast("string").alias("summary"))


class BatchFrames:
    """One job's frames: its expressions, and the routing column of the plan in force."""

    def __init__(self, app: str, names: list[str], groups: int, run_id: str,
                 topic: str) -> None:
        self.app, self.run_id, self.topic = app, run_id, topic
        self.x = BatchExpressions.of(app, names, groups)
        # the routing of the plan in force: ((plan version, slots), placement key column)
        self._route: tuple[tuple[int, int], Column] | None = None
        self._input_schema: StructType | None = None  # the routed frame's, all nullable

    def forget_route(self) -> None:
        """A new attempt of the query rebuilds its routing from the plans it recovers."""
        self._route = None

    def parse(self, df: DataFrame) -> DataFrame:
        """The platform's validation (``ingest.Classifier``), plus the group and the typed
        event, one STRUCT that reaches the operator as a dict (:class:`BatchExpressions`):
        each record is parsed once, in the JVM, and never written back to text."""
        return self.x.classify(df).select(*self.x.parsed)

    def route(self, plan: Plan, slots: int) -> Column:
        """The engine's placement key of each event under the plan: the plan's assignment
        and the slots' keys as two array literals, looked up by group. One per plan
        version and slot count; rejected records go to engine 0's key, which writes them
        to ``dead_letter``.

        Not a join with a frame of the plan's rows: that frame came from Python, and its
        broadcast ran a Spark job with Python workers in every batch (~80 ms of 100
        events' ~1.2 s here). Each array travels as one string that the optimizer splits
        once (constant folding): 40 ms for 4,096 groups, against 150 ms for the same
        array spelled out in SQL."""
        from pyspark.sql import functions as F

        def literal(values: list[int], kind: str) -> Column:
            return F.split(F.lit(",".join(map(str, values))), ",").cast(f"array<{kind}>")

        key = (plan.version, slots)
        if self._route is None or self._route[0] != key:
            salts = placement_keys(slots)
            engine = F.element_at(literal(plan.assignment.tolist(), "int"), F.col("group") + 1)
            to_pkey = F.element_at(literal(salts, "bigint"), engine + 1)
            self._route = (key, F.when(F.col("reason").isNull(), to_pkey)
                           .otherwise(F.lit(salts[0]).cast("bigint")).alias("pkey"))
        return self._route[1]

    def engine_input(self, parsed: DataFrame, plan: Plan, slots: int,
                     spec: BatchSpec) -> DataFrame:
        """The batch (``parsed``: :meth:`parse` of its Kafka records, which the job's query
        applies once for all batches) as the engine stage reads it (:data:`ENGINE_INPUT`):
        valid events keyed for their engine through the plan (:meth:`route`), rejected
        records for engine 0, which writes them to ``dead_letter`` (one Spark job for all).

        With split groups (``spec.split_homes``), the input tasks replace those groups'
        events by their summaries per key before the shuffle (:func:`arrow_split`, in the
        same stage as the read), keyed for the groups' home engines.
        """
        routed = parsed.select(*self.x.routed, self.route(plan, slots), self.x.summary)
        if not spec.split_homes:
            return routed
        if self._input_schema is None:  # a JVM round trip: once a job
            from pyspark.sql.types import StructField, StructType

            self._input_schema = StructType([StructField(f.name, f.dataType, True)
                                             for f in routed.schema])
        return routed.mapInArrow(arrow_split(spec), self._input_schema)

    @staticmethod
    def engine_stage(routed: DataFrame, slots: int, spec: BatchSpec) -> DataFrame:
        """The engines: one task per slot over its routed tuples, the result kept for the
        writes that read it twice (the small bookkeeping rows, the outputs)."""
        from pyspark import StorageLevel

        return (routed.repartition(slots, "pkey")
                .mapInArrow(arrow_engine(spec), ENGINE_OUTPUT)
                .persist(StorageLevel.MEMORY_AND_DISK))

    def outputs(self, result: DataFrame, batch_id: int, outs: int,
                dead: int) -> dict[str, DataFrame]:
        """The batch's rows of ``events_out`` and ``dead_letter`` (the tables it has rows
        for), read from the cached engine result by the executors that write them, one file
        per table: the rows are few, and a task per engine would write one small file each."""
        from pyspark.sql import functions as F

        lit = F.lit
        head = [lit(SCHEMA_VERSION).alias("schema_version"), lit(self.run_id).alias("run_id"),
                lit(batch_id).cast("bigint").alias("batch_id")]
        frames = {
            "events_out": (outs > 0, (OUT, OUT_FETCHED), [
                *head, lit(self.app).alias("app"),
                *[F.col(src).alias(name) for name, src in EVENTS_OUT_FROM]]),
            "dead_letter": (dead > 0, (DEAD,), [
                *head, lit(self.topic).alias("topic"), "partition", "offset",
                F.timestamp_seconds("kafka_ts").alias("kafka_ts"), F.substring("raw", 1, 4096)
                .alias("raw"), "reason"]),
        }
        return {name: result.where(F.col("tag").isin(*tags)).select(*cols).coalesce(1)
                for name, (any_rows, tags, cols) in frames.items() if any_rows}


def events_out_rows(rows: pa.Table, run_id: str, app: str, batch_id: int) -> pa.Table:
    """The batch's ``events_out`` rows from the outputs the driver fetched from the engine
    stage (its ``OUT_FETCHED`` rows, :data:`ENGINE_OUTPUT` columns), exactly as the
    executors' append of :meth:`BatchFrames.outputs` would write them."""
    import pyarrow as pa

    from keyshift.lakehouse.delta_arrow import contract_table

    n = rows.num_rows
    head = {"schema_version": pa.array([SCHEMA_VERSION] * n, pa.int32()),
            "run_id": pa.array([run_id] * n, pa.string()),
            "batch_id": pa.array([batch_id] * n, pa.int64()),
            "app": pa.array([app] * n, pa.string())}
    return contract_table("events_out", pa.table(
        {**head, **{name: rows[src] for name, src in EVENTS_OUT_FROM}}))
