"""Routing key → key group → engine inside the streaming query, through the newest plan.

The plan is a stream-static join with the Delta ``plans`` table: Spark re-reads a Delta
table's latest snapshot on every micro-batch of a stream-static join (checked by
``tests/test_ingest.py``), so a plan version written while the query runs takes effect from
the next micro-batch, with no restart and no driver-side polling. The static side is the
newest version of the run's scope exploded to (group, engine) rows, ≤ p rows, broadcast.
With no plan for the scope, the join finds nothing and the KG engine ``group mod N`` is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from keyshift.config import Config
from keyshift.groups import spark_group_expr_sql
from keyshift.plan import Plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def plan_rows(spark: SparkSession, cfg: Config, scope: str) -> DataFrame:
    """(group, engine, plan_version, plan_engines, plan_live) of the newest plan of ``scope``.

    Plans for another group count p are ignored: their group numbers mean other keys.
    """
    from pyspark.sql import functions as F

    from .session import ensure_tables

    ensure_tables(spark, cfg, ["plans"])
    plans = (
        spark.read.format("delta").load(cfg.table_path("plans"))
        .where((F.col("scope") == scope) & (F.col("groups") == cfg.groups.count))
        .orderBy(F.col("version").desc()).limit(1)
    )
    return plans.select(
        F.posexplode("assignment").alias("group", "engine"),
        F.col("version").alias("plan_version"),
        F.col("engines").alias("plan_engines"),
        F.col("live").alias("plan_live"),
    ).select(
        F.col("group").cast("int"), F.col("engine").cast("int"), "plan_version",
        "plan_engines", "plan_live",
    )


def with_group(df: DataFrame, groups: int) -> DataFrame:
    """Adds ``group``: the same xxHash64-mod-p as :func:`keyshift.groups.group_of`."""
    from pyspark.sql import functions as F

    return df.withColumn("group", F.expr(spark_group_expr_sql("key", groups)))


def route(df: DataFrame, plans: DataFrame, groups: int, kg_engines: int) -> DataFrame:
    """Adds group, engine, plan_version, plan_engines, plan_live (KG with version 0 if no plan)."""
    from pyspark.sql import functions as F

    kg_live = F.array_repeat(F.lit(True), kg_engines)
    return (
        with_group(df, groups)
        .join(F.broadcast(plans), on="group", how="left")
        .withColumn("engine", F.coalesce("engine", F.pmod("group", F.lit(kg_engines))))
        .withColumn("plan_version", F.coalesce("plan_version", F.lit(0).cast("bigint")))
        .withColumn("plan_engines", F.coalesce("plan_engines", F.lit(kg_engines)))
        .withColumn("plan_live", F.coalesce("plan_live", kg_live))
    )


def unrouted(df: DataFrame) -> DataFrame:
    """Routing off (the benchmark's baseline): every event on engine 0, group 0, no plan."""
    from pyspark.sql import functions as F

    return (
        df.withColumn("group", F.lit(0)).withColumn("engine", F.lit(0))
        .withColumn("plan_version", F.lit(0).cast("bigint"))
        .withColumn("plan_engines", F.lit(1))
        .withColumn("plan_live", F.array(F.lit(True)))
    )


def newest_plan(spark: SparkSession, cfg: Config, scope: str) -> Plan | None:
    """The plan in force for ``scope`` as a pure :class:`Plan` (None: KG applies)."""
    from pyspark.sql import functions as F

    from .session import ensure_tables

    ensure_tables(spark, cfg, ["plans"])
    row = (
        spark.read.format("delta").load(cfg.table_path("plans"))
        .where((F.col("scope") == scope) & (F.col("groups") == cfg.groups.count))
        .orderBy(F.col("version").desc()).limit(1).collect()
    )
    if not row:
        return None
    r = row[0]
    return Plan(np.asarray(r["assignment"], dtype=np.int64), int(r["engines"]),
                int(r["version"]), np.asarray(r["live"], dtype=bool))
