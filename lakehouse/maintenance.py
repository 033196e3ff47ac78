"""OPTIMIZE and VACUUM of one Delta table: the gateway's maintenance operations.

The batch job that picks the tables and reports on them is ``keyshift.jobs.table_maintenance``;
what Delta is asked to do, and the traps in asking, are here with the other Delta access.

Retention: the config refuses less than 168 h, Delta's own safe minimum, and nothing here
turns off Delta's ``retentionDurationCheck``. Delta 4 ignores a retention passed to VACUUM
(anything but 0 h; "Vacuum with retention threshold other than 0 hours is ignored"): it reads
the table property ``delta.deletedFileRetentionDuration``, so :func:`maintain_table` sets that
property to the retention asked for (a commit only when it differs) and vacuums by it. A
shorter retention would delete files that a running reader or a time-travel query still
needs, e.g. the table version an MLflow model records as its training data. So compaction
shows at once (fewer active files) while the disk space of the compacted files comes back a
week later.

Time: VACUUM lists the table's folder with Spark's parallel file listing, whose parallelism
(``spark.sql.sources.parallelPartitionDiscovery.parallelism``) defaults to 10,000: 100,046
tasks per table, 66-156 s for a table of one file on a loaded 2-core machine, 20 min for
keyshift's tables. :func:`maintain_table` lowers it around its own work (to
``spark.shuffle_partitions``: 66 tasks, 6-7 s per table) and gives the session its setting
back afterwards, so no caller can forget it: the maintenance test's own VACUUM once did,
and spent 32-36 s deleting 43 files of a one-file table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Spark is imported where a session exists, never at module import
    from pyspark.sql import SparkSession

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
#: Spark's parallel file listing (VACUUM's) starts this many tasks by default
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def maintain_table(spark: SparkSession, path: str, retention_hours: float) -> dict[str, Any]:
    """OPTIMIZE then VACUUM one Delta table; the file counts before and after.

    ``files_before``/``files_after`` are the table's active files (what a reader opens);
    ``vacuumed_files`` the removed files VACUUM deleted from storage (older than the
    retention), read back from the table's history. VACUUM's file listing runs as many
    tasks as the session's ``spark.sql.shuffle.partitions`` (``spark.shuffle_partitions``),
    not Spark's 10,000 (module docstring).
    """
    with listing_parallelism(spark, int(spark.conf.get("spark.sql.shuffle.partitions"))):
        return _optimize_and_vacuum(spark, path, retention_hours)


def _optimize_and_vacuum(spark: SparkSession, path: str,
                         retention_hours: float) -> dict[str, Any]:
    from delta.tables import DeltaTable

    started = time.monotonic()
    table = DeltaTable.forPath(spark, path)
    before = table.detail().select("numFiles", "sizeInBytes", "properties").first()
    compaction = table.optimize().executeCompaction().select("metrics").first()["metrics"]
    compacted_version = int(table.history(1).first()["version"])
    retention = retention_interval(retention_hours)
    if (before["properties"] or {}).get(RETENTION_PROPERTY) != retention:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                  f"('{RETENTION_PROPERTY}' = '{retention}')")
    table.vacuum()  # by the table's property: Delta 4 ignores a retention given here
    after = table.detail().select("numFiles", "sizeInBytes").first()
    return {
        "status": "maintained",
        "files_before": int(before["numFiles"]),
        "files_after": int(after["numFiles"]),
        "bytes_before": int(before["sizeInBytes"]),
        "bytes_after": int(after["sizeInBytes"]),
        "files_compacted": int(compaction["numFilesRemoved"]),
        "files_written": int(compaction["numFilesAdded"]),
        "vacuumed_files": _vacuum_deleted_since(table, compacted_version),
        "seconds": round(time.monotonic() - started, 1),
    }


def retention_interval(hours: float) -> str:
    """The table property's value for ``hours`` (whole hours, else whole seconds)."""
    if float(hours).is_integer():
        return f"interval {int(hours)} hours"
    return f"interval {round(hours * 3600)} seconds"


def _vacuum_deleted_since(table: Any, version: int) -> int | None:
    """Files the VACUUM after ``version`` deleted, from its ``VACUUM END`` history entry
    (None when Delta logged none, e.g. with vacuum logging disabled)."""
    rows = table.history(5).select("version", "operation", "operationMetrics").collect()
    for row in rows:
        if row["version"] > version and row["operation"] == "VACUUM END":
            return int((row["operationMetrics"] or {}).get("numDeletedFiles", 0))
    return None


@contextmanager
def listing_parallelism(spark: SparkSession, tasks: int) -> Iterator[None]:
    """Spark's parallel file listing at ``tasks`` for the block; a session shared with other
    work (tests, a notebook) gets its own setting back."""
    before = spark.conf.get(LISTING_PARALLELISM, None)
    spark.conf.set(LISTING_PARALLELISM, str(tasks))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(LISTING_PARALLELISM)
        else:
            spark.conf.set(LISTING_PARALLELISM, before)
