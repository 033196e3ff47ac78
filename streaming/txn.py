"""Idempotent Delta appends from inside a micro-batch: every row of a batch lands once, also
when the batch is executed again after a crash.

Two ways, by how often a table is written: :class:`RunAppends` for the per-batch tables
(a look for the batch's rows only in the first batch of a process, a plain append after
that), and :func:`append` with Delta's transaction identifier (``txnAppId`` = run id +
table + purpose, ``txnVersion`` = batch id) for the rare rows (plans, migrations), where
Delta's own check per commit costs nothing that matters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from functools import cache
from typing import TYPE_CHECKING, Any

from keyshift.config import Config
from keyshift.schemas import SCHEMA_VERSION, table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def append(
    spark: SparkSession,
    cfg: Config,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    txn_app: str,
    txn_version: int,
) -> int:
    """Append rows (dicts by column name) to table ``name`` once per (txn_app, txn_version).

    ``schema_version`` is filled in when the table has it. Returns the rows handed to Delta
    (0 when there were none; an already committed (app, version) is skipped by Delta itself).
    """
    if not rows:
        return 0
    from .sinks import append as append_frame

    append_frame(contract_frame(spark, name, rows), cfg, name, txn_app, txn_version)
    return len(rows)


def contract_frame(spark: SparkSession, name: str,
                   rows: Sequence[Mapping[str, Any]]) -> DataFrame:
    """Rows (dicts by column name) as a frame of the table's contract; stamps the schema."""
    from .sinks import rows_frame

    names = table(name).names
    return rows_frame(spark, name, [{"schema_version": SCHEMA_VERSION, **r}
                                    if "schema_version" in names else r for r in rows])


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

    def written(self, name: str, batch_id: int) -> bool:
        """Whether table ``name`` already has rows of this run's batch ``batch_id``."""
        from pyspark.sql import functions as F

        df = self.spark.read.format("delta").load(self.cfg.table_path(name))
        return bool(df.where((F.col("run_id") == self.run_id) & (F.col("batch_id") == batch_id))
                    .limit(1).count())

    def append(self, name: str, frame: DataFrame, batch_id: int) -> None:
        """``frame`` (a table's rows of this batch) into ``name``, unless already there."""
        from .sinks import append as append_frame

        if self.may_exist(batch_id) and self.written(name, batch_id):
            return
        append_frame(frame, self.cfg, name)

    def append_rows(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int) -> int:
        """Like :meth:`append` for rows built on the driver (dicts by column name)."""
        if not rows:
            return 0
        self.append(name, contract_frame(self.spark, name, rows), batch_id)
        return len(rows)
