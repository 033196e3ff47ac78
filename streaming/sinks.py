"""Delta writers of the streaming job: idempotent per micro-batch, schemas from one module.

A micro-batch can run twice (a crash after the write and before the checkpoint commit), so
every append carries Delta's ``txnAppId``/``txnVersion``: Delta records the highest version
written per app id in the table's log and silently skips a write with a version it has seen.
That, with Kafka offsets in the Spark checkpoint, makes a restart count nothing twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def append(df: DataFrame, cfg: Config, name: str, app_id: str | None = None,
           version: int | None = None) -> None:
    """Append ``df`` (columns in the contract's order) to table ``name``.

    With ``app_id``/``version`` the append is idempotent: a repeat of the same pair is skipped.
    """
    schema = table(name)
    w = df.select(*[f"`{c}`" for c in schema.names]).write.format("delta").mode("append")
    if app_id is not None and version is not None:
        w = w.option("txnAppId", app_id).option("txnVersion", int(version))
    w.save(cfg.table_path(name))


def rows_frame(spark: SparkSession, name: str, rows: list[dict[str, Any]]) -> DataFrame:
    """A DataFrame of ``rows`` with exactly the contract schema of table ``name``."""
    schema = table(name)
    return spark.createDataFrame(
        [tuple(r.get(c) for c in schema.names) for r in rows], schema.ddl())


def write_plan(spark: SparkSession, cfg: Config, plan: Plan, scope: str, policy: str,
               reason: str | None = None, expected_rstd: float | None = None,
               expected_var: float | None = None) -> None:
    """Append one plan version for ``scope``; the routing picks it up on the next batch."""
    if plan.groups != cfg.groups.count:
        raise ValueError(f"plan has {plan.groups} groups, the deployment uses {cfg.groups.count}")
    row = {
        "schema_version": SCHEMA_VERSION, "version": int(plan.version), "scope": scope,
        "created_at": datetime.now(UTC), "policy": policy, "groups": plan.groups,
        "engines": plan.engines, "live": [bool(x) for x in plan.live],
        "assignment": [int(x) for x in np.asarray(plan.assignment)],
        "source_from": None, "source_to": None, "expected_rstd": expected_rstd,
        "expected_var": expected_var, "reason": reason,
    }
    append(rows_frame(spark, "plans", [row]), cfg, "plans")
