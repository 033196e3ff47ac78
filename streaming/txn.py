"""Idempotent Delta appends from inside a micro-batch.

Every append of the streaming job carries Delta's transaction identifier (``txnAppId`` =
run id + table + purpose, ``txnVersion`` = batch id). When a batch is executed again after a
crash, Delta skips the appends the first attempt already committed, so each row lands once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from functools import cache
from typing import TYPE_CHECKING, Any

from keyshift.config import Config
from keyshift.schemas import SCHEMA_VERSION, table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
    from .sinks import rows_frame

    names = table(name).names
    full = [{"schema_version": SCHEMA_VERSION, **r} if "schema_version" in names else r
            for r in rows]
    append_frame(rows_frame(spark, name, full), cfg, name, txn_app, txn_version)
    return len(full)


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
