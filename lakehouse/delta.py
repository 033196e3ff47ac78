"""The one Delta gateway of keyshift: every read and write of the warehouse's tables by the
speed layer (``streaming/``) and the batch layer (``jobs/``) goes through here.

Why one module: the tables are the contract between the layers (``keyshift.schemas``), so
creating them, reading them with a clear error when one is missing, turning rows into a
frame of exactly the contract's columns, appending without ever writing a batch twice, and
the plan ↔ ``plans`` row codec are each written once, and a schema change breaks here.

Idempotent appends come two ways, by how often a table is written: :class:`RunAppends` for
the per-batch tables (a look for the batch's rows only in the first batch of a process, a
plain append after that), and :func:`append_rows` with Delta's transaction identifier
(``txnAppId`` = run id + table + purpose, ``txnVersion`` = batch id) for the rare rows
(plans, migrations, control state outside the job), where Delta's own check per commit
costs nothing that matters. Delta records the highest version written per app id in the
table's log and silently skips a write with a version it has seen; with Kafka offsets in
the Spark checkpoint that makes a restart count nothing twice.

Spark is imported inside the functions that need a session, so the plan codec is usable
(and testable) without one. The commands a person waits on (``keyshift status``, ``report``,
``dead-letters``) read the same tables without a JVM through
:mod:`keyshift.lakehouse.delta_arrow` (delta-rs), which checks the same contract, and a
running job's staged bookkeeping and a light batch's complex events are appended there too
(``append_arrow``), Spark's append below taking over where delta-rs cannot write a table as
Spark would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from keyshift.config import Config
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, TABLES, table

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession


class TableMissingError(LookupError):
    """A Delta table a reader needs has not been written yet."""


class TableSchemaError(ValueError):
    """A Delta table lacks columns its contract (``keyshift.schemas``) names."""


# --- tables: existence, creation, reads ----------------------------------------------------


def table_exists(spark: SparkSession, cfg: Config, name: str) -> bool:
    """Whether table ``name`` exists under the warehouse root (on this machine's disk the
    answer comes from the file system; elsewhere Delta is asked)."""
    location = cfg.table_path(name)
    if _exists_locally(location):
        return True
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, location))


def ensure_tables(spark: SparkSession, cfg: Config,
                  names: Iterable[str] | None = None) -> list[str]:
    """Create the named Delta tables (all of keyshift.schemas.TABLES by default) when absent.

    Creating them empty up front lets readers and ``MERGE``/stream-static joins work before
    the first writer has run, with the schema taken from the one contract module. The
    missing ones are created side by side: each creation is a short chain of driver-side
    steps (a schema, a first commit) that leaves the other core idle, and a fresh
    warehouse's ten tables took 3.0-3.6 s one by one against 1.6-1.9 s four at a time here
    (8.1 against 6.0 s in a driver's first seconds), at every first start of a run.
    Returns the names it created.
    """
    missing = [n for n in (names if names is not None else TABLES)
               if not _exists_locally(cfg.table_path(n))]  # exists: no Delta round trip
    if not missing:
        return []
    with ThreadPoolExecutor(max_workers=min(4, len(missing)),
                            thread_name_prefix="keyshift-tables") as pool:
        for done in [pool.submit(_create_table, spark, cfg, n) for n in missing]:
            done.result()  # the first failure, by table order, is raised
    return missing


STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def _create_table(spark: SparkSession, cfg: Config, name: str) -> None:
    from delta.tables import DeltaTable

    schema = table(name)
    builder = DeltaTable.createIfNotExists(spark).location(cfg.table_path(name))
    builder = builder.addColumns(spark.createDataFrame([], schema.ddl()).schema)
    if schema.partition_by:
        builder = builder.partitionedBy(*schema.partition_by)
    if schema.stats_columns:
        builder = builder.property(STATS_COLUMNS, ",".join(schema.stats_columns))
    builder.execute()


def align_stats_columns(spark: SparkSession, cfg: Config, names: Iterable[str]) -> list[str]:
    """Give tables an older keyshift made the statistics columns their contract names
    (:attr:`keyshift.schemas.TableSchema.stats_columns`): one metadata commit per table
    whose property differs, so a warehouse from before the contract named them stops
    paying for every column's statistics in each micro-batch's commit. Returns the tables
    it changed. Files already written keep their statistics; Delta reads either kind."""
    changed = []
    for name in names:
        wanted = ",".join(table(name).stats_columns)
        if not wanted:
            continue
        path = cfg.table_path(name)
        if table_properties(spark, path).get(STATS_COLUMNS) != wanted:
            quoted = path.replace("`", "``")
            spark.sql(f"ALTER TABLE delta.`{quoted}` SET TBLPROPERTIES "
                      f"('{STATS_COLUMNS}' = '{wanted}')")
            changed.append(name)
    return changed


def table_properties(spark: SparkSession, location: str) -> dict[str, str]:
    """The table's properties: read by delta-rs when the table is on this machine's disk
    (the fast reader of :mod:`keyshift.lakehouse.delta_arrow`, ~20 ms, against 1.5-3.5 s for
    Spark's ``DESCRIBE DETAIL`` at a job's start here); anywhere else Spark's Delta."""
    if _exists_locally(location):
        from deltalake import DeltaTable as RsTable

        return dict(RsTable(str(_local_path(location))).metadata().configuration or {})
    from delta.tables import DeltaTable

    return dict(DeltaTable.forPath(spark, location).detail().first()["properties"] or {})


def _is_local(location: str) -> bool:
    return "://" not in location or location.startswith("file:")


def _local_path(location: str) -> Path:
    return Path(location[5:] if location.startswith("file:") else location)


def _exists_locally(location: str) -> bool:
    """A table on this machine's disk that already has a log (a remote one: ask Delta)."""
    return _is_local(location) and (_local_path(location) / "_delta_log").is_dir()


def read_table(spark: SparkSession, cfg: Config, name: str) -> DataFrame:
    """A batch read of a keyshift Delta table, checked against its contract.

    A missing table is an operator's mistake (wrong warehouse root, the streaming job never
    ran) and a :class:`TableMissingError` naming the table and the path, not a stack; a
    table without the contract's columns is a :class:`TableSchemaError`.
    """
    path = _existing_path(spark, cfg, name)
    return conform(spark.read.format("delta").load(path), name, path)


def _existing_path(spark: SparkSession, cfg: Config, name: str) -> str:
    """The path of table ``name``, or the :class:`TableMissingError` naming it."""
    table(name)  # unknown names fail with the list of known ones
    path = cfg.table_path(name)
    if not table_exists(spark, cfg, name):
        raise TableMissingError(
            f"{name}: no Delta table at {path} (warehouse.root={cfg.warehouse_path}); "
            "has the streaming job written there (or call ensure_tables)?"
        )
    return path


def read_pinned(spark: SparkSession, cfg: Config, name: str) -> tuple[DataFrame, int]:
    """The checked read of ``name`` (:func:`read_table`) at its latest version, and that version.

    The read is pinned to the version (time travel), so the version is exactly what was read
    even while the streaming job appends: it is a training run's lineage, and a reviewer
    re-reads the same rows with ``versionAsOf``. A missing table or schema is the same error
    naming the path as :func:`read_table`'s.
    """
    from delta.tables import DeltaTable

    path = _existing_path(spark, cfg, name)
    version = int(DeltaTable.forPath(spark, path).history(1).select("version").first()[0])
    pinned = spark.read.format("delta").option("versionAsOf", version).load(path)
    return conform(pinned, name, path), version  # an older table: added columns as nulls


def conform(df: DataFrame, name: str, path: str | None = None) -> DataFrame:
    """``df`` (a read of table ``name``) with the columns a later schema version added and
    the table does not have yet as nulls (its rows are older: ``keyshift.schemas``); a
    missing column of the table's first version is a :class:`TableSchemaError`."""
    from pyspark.sql import functions as F

    schema = table(name)
    missing = [c for c in schema.columns if c.name not in df.columns]
    lost = [c.name for c in missing if c.since <= 1]
    if lost:
        raise TableSchemaError(
            f"{name}: table at {path or 'its location'} lacks columns {', '.join(lost)} "
            f"(schema version {SCHEMA_VERSION} expects {', '.join(schema.names)})"
        )
    for c in missing:
        df = df.withColumn(c.name, F.lit(None).cast(c.type))
    return df


def read_run(spark: SparkSession, cfg: Config, name: str, run_id: str) -> DataFrame:
    """One run's rows of a per-run table (every table with a ``run_id`` column)."""
    from pyspark.sql import functions as F

    return read_table(spark, cfg, name).where(F.col("run_id") == run_id)


def run_keys(spark: SparkSession, cfg: Config, name: str, key: Sequence[str],
             run_id: str) -> DataFrame:
    """The ``key`` columns of one run's rows of ``name``, where ``key[0]`` holds the run's id
    (``run_id``, or a plan's ``scope``): what a retried append anti-joins against so that a
    row a predecessor already committed is not written twice."""
    from pyspark.sql import functions as F

    return read_table(spark, cfg, name).where(F.col(key[0]) == run_id).select(*key)


# --- frames and appends ---------------------------------------------------------------------


def contract_frame(spark: SparkSession, name: str,
                   rows: Sequence[Mapping[str, Any]]) -> DataFrame:
    """Rows (dicts by column name) as a frame of exactly table ``name``'s contract schema.

    A column a row lacks is null; ``schema_version`` is stamped when the table has it.
    """
    schema = table(name)
    stamp = {"schema_version": SCHEMA_VERSION} if "schema_version" in schema.names else {}
    return spark.createDataFrame(
        [tuple({**stamp, **r}.get(c) for c in schema.names) for r in rows], schema.ddl())


def append_frame(df: DataFrame, cfg: Config, name: str, txn_app: str | None = None,
                 txn_version: int | None = None) -> None:
    """Append ``df`` (the contract's columns, in any order) to table ``name``.

    With ``txn_app``/``txn_version`` the append is idempotent: a repeat of the same pair is
    skipped by Delta.
    """
    schema = table(name)
    w = df.select(*[f"`{c}`" for c in schema.names]).write.format("delta").mode("append")
    if schema.evolved:  # a table an older version made gains the added columns
        w = w.option("mergeSchema", "true")
    if txn_app is not None and txn_version is not None:
        w = w.option("txnAppId", txn_app).option("txnVersion", int(txn_version))
    try:
        w.save(cfg.table_path(name))
    except Exception as exc:  # py4j's text names a JVM object; a person needs the table
        from .logs import failure_line

        raise TableWriteError(f"cannot append to table {name} at {cfg.table_path(name)}: "
                              f"{failure_line(str(exc))}") from exc


class TableWriteError(RuntimeError):
    """An append that Delta refused, with the table, its location and the root cause."""


def append_rows(
    spark: SparkSession,
    cfg: Config,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    txn_app: str | None = None,
    txn_version: int | None = None,
) -> int:
    """Append rows (dicts by column name) to table ``name``, once per (txn_app, txn_version)
    when given; returns the rows handed to Delta (0 when there were none; an already
    committed (app, version) is skipped by Delta itself)."""
    if not rows:
        return 0
    append_frame(contract_frame(spark, name, rows), cfg, name, txn_app, txn_version)
    return len(rows)


def replace_runs(spark: SparkSession, cfg: Config, name: str, frame: pd.DataFrame) -> int:
    """Replace this pandas frame's runs in table ``name`` (idempotent per ``run_id``): the
    batch layer's writes of whole histories. Returns the rows written."""
    frame = frame[table(name).names]
    df = spark.createDataFrame(frame, schema=table(name).ddl())  # Arrow: no per-row Python
    runs = sorted(frame["run_id"].unique().tolist())
    w = df.write.format("delta")
    if table(name).evolved:  # a table an older version made gains the added columns
        w = w.option("mergeSchema", "true")
    if table_exists(spark, cfg, name):
        w = w.mode("overwrite").option(
            "replaceWhere", "run_id IN (" + ", ".join(_sql_str(r) for r in runs) + ")")
    else:
        w = w.mode("append")
    w.save(cfg.table_path(name))
    return len(frame)


def _sql_str(text: str) -> str:
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run independent Delta writes at once and wait for all of them.

    A Delta commit here costs ~1 s of mostly fixed work (the write job, then the snapshot
    jobs that check ``txnAppId`` and rebuild the table state), so the appends of one batch to
    different tables overlap instead of queueing. Every call runs to its end before the first
    error is raised, so a failing batch never leaves a write running into its re-execution.
    """
    futures = [_writers().submit(c) for c in calls]
    wait(futures)
    for f in futures:
        if f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]


@cache
def _writers() -> ThreadPoolExecutor:
    """One pool per process, made on first use (a batch has at most six appends at once)."""
    return ThreadPoolExecutor(max_workers=6, thread_name_prefix="keyshift-delta")


class Stager(Protocol):
    """Where bookkeeping rows go: appended at once (:meth:`RunAppends.put`), or staged and
    committed later by an explicit flush (:class:`keyshift.streaming.staging.StagedAppends`,
    the job's). Whoever writes is given one at construction, so which it is never changes
    under it. ``match``: the key of a table not keyed by (run, batch), for an append at once
    to look for (a staged commit goes by the table's own key)."""

    @property
    def run_id(self) -> str: ...

    def put(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int,
            match: Mapping[str, Any] | None = None) -> int: ...


class RunAppends:
    """The appends of one run's micro-batches, each landing once, at one Spark job apiece.

    ``txnAppId``/``txnVersion`` make an append idempotent, but Delta then looks up the
    table's transaction versions before every commit: state reconstruction, three more
    Spark jobs per append (measured: 4 jobs and ~2.5 s against 1 job and ~0.6 s for the
    same 20-row append on this machine; ``bench/bench_delta_commit.py``). Yet only one
    batch of a process can have been written before: the first one it runs, which a crashed
    predecessor may have committed in part. Later batches are new by construction (a batch
    that fails stops the query; nothing retries it in the same process). So the first batch
    of each process looks for its rows (``run_id``, ``batch_id``) before appending each
    table, and every later batch appends blind.
    """

    def __init__(self, spark: SparkSession, cfg: Config, run_id: str) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        self.first: int | None = None  # the first batch this process runs
        self.fresh = False  # no process ran this run before: nothing can be there yet

    def begin(self, batch_id: int) -> None:
        if self.first is None:
            self.first = batch_id

    def may_exist(self, batch_id: int) -> bool:
        return not self.fresh and (self.first is None or batch_id <= self.first)

    def written(self, name: str, batch_id: int, match: Mapping[str, Any] | None = None) -> bool:
        """Whether table ``name`` already has the rows: this run's batch ``batch_id``, or
        those with the column values of ``match`` (tables keyed otherwise: plans by scope
        and version, migrations by id and status)."""
        from pyspark.sql import functions as F

        key = match or {"run_id": self.run_id, "batch_id": batch_id}
        cond = None
        for col, value in key.items():
            c = F.col(col) == value
            cond = c if cond is None else cond & c
        df = self.spark.read.format("delta").load(self.cfg.table_path(name))
        return bool(df.where(cond).limit(1).count())

    def put(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int,
            match: Mapping[str, Any] | None = None) -> int:
        """:class:`Stager` that appends at once (:meth:`append_rows`): the writers' default
        outside the job, which stages instead."""
        return self.append_rows(name, rows, batch_id, match)

    def append(self, name: str, frame: DataFrame, batch_id: int,
               match: Mapping[str, Any] | None = None) -> None:
        """``frame`` (a table's rows of this batch) into ``name``, unless already there."""
        if self.may_exist(batch_id) and self.written(name, batch_id, match):
            return
        append_frame(frame, self.cfg, name)

    def append_rows(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int,
                    match: Mapping[str, Any] | None = None) -> int:
        """Like :meth:`append` for rows built on the driver (dicts by column name)."""
        if not rows:
            return 0
        self.append(name, contract_frame(self.spark, name, rows), batch_id, match)
        return len(rows)


# --- the plan ↔ ``plans`` row codec ---------------------------------------------------------


def plan_row(
    plan: Plan,
    scope: str,
    policy: str,
    reason: str | None = None,
    *,
    created_at: datetime | None = None,
    source_from: datetime | None = None,
    source_to: datetime | None = None,
    expected_rstd: float | None = None,
    expected_var: float | None = None,
) -> dict[str, Any]:
    """The ``plans`` row (every column of the contract, by name) of one plan version.

    ``scope`` says who reads it: a run id, or ``'baseline'`` for the batch layer's plans;
    ``source_*`` and ``expected_*`` are the history a batch plan was computed on and the
    imbalance it would have had there.
    """
    return {
        "schema_version": SCHEMA_VERSION, "version": int(plan.version), "scope": scope,
        "created_at": created_at or datetime.now(UTC), "policy": policy,
        "groups": plan.groups, "engines": int(plan.slots),
        "live": np.asarray(plan.live, dtype=bool).tolist(),
        "assignment": np.asarray(plan.assignment, dtype=np.int64).tolist(),
        "source_from": source_from, "source_to": source_to,
        "expected_rstd": None if expected_rstd is None else float(expected_rstd),
        "expected_var": None if expected_var is None else float(expected_var),
        "reason": reason,
    }


def plan_of(row: Mapping[str, Any]) -> Plan:
    """The :class:`Plan` of a ``plans`` row (a dict or a Spark ``Row``, both by name)."""
    try:
        assignment, groups = row["assignment"], row["groups"]
        engines, version, live = row["engines"], row["version"], row["live"]
    except (KeyError, ValueError) as exc:  # a Spark Row raises ValueError for a name
        raise ValueError(f"plans row: missing column {exc}") from None
    assignment = np.asarray(assignment, dtype=np.int64)
    if assignment.size != int(groups):
        raise ValueError(f"plans.assignment: {assignment.size} entries for groups={groups}")
    return Plan(assignment, int(engines), int(version), np.asarray(live, dtype=bool))
