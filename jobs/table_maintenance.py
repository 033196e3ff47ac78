"""Compact and vacuum keyshift's Delta tables: the small files the streaming job leaves behind.

Every micro-batch appends one small file to each table it writes (``metrics``,
``key_loads``, ``decisions``…), so after a day a table is thousands of files of a few
kilobytes and every reader (the nightly jobs, ``keyshift report``) pays for opening them.
This job runs, per table, Delta's ``OPTIMIZE`` (bin-packing compaction: the small files are
rewritten into a few large ones, a new table version; the old files stay on disk,
*removed* from the log) and then ``VACUUM`` (deletes removed files older than
``warehouse.vacuum_retention_hours``).

Retention: the config refuses less than 168 h, Delta's own safe minimum, and this job never
turns off Delta's ``retentionDurationCheck``. Delta 4 ignores a retention passed to VACUUM
(anything but 0 h; "Vacuum with retention threshold other than 0 hours is ignored"): it reads
the table property ``delta.deletedFileRetentionDuration``, so the job sets that property to
``warehouse.vacuum_retention_hours`` (a commit only when it differs) and vacuums by it.

Time: VACUUM lists the table's folder with Spark's parallel file listing, whose parallelism
(``spark.sql.sources.parallelPartitionDiscovery.parallelism``) defaults to 10,000: 100,046
tasks per table, 66-156 s for a table of one file on a loaded 2-core machine, 20 min for
keyshift's tables. The job lowers it to ``spark.shuffle_partitions`` for its own run (66
tasks, 6-7 s per table). A shorter retention would delete files that a
running reader or a time-travel query still needs, e.g. the table version an MLflow model
records as its training data. So compaction shows at once (fewer active files) while the
disk space of the compacted files comes back a week later.

By hand: ``python -m keyshift.jobs.table_maintenance [--tables metrics,key_loads]
[--retention-hours 336] [--json]`` or ``keyshift job maintenance ...``; nightly: the
``keyshift_table_maintenance`` DAG. Idempotent: a compacted table is left as it is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from keyshift.cli import add_config_option
from keyshift.config import Config, load_config
from keyshift.schemas import TABLES

if TYPE_CHECKING:  # Spark is imported where a session exists, never at module import
    from pyspark.sql import SparkSession

JOB = "table_maintenance"


class MaintenanceError(RuntimeError):
    """One or more tables could not be compacted or vacuumed (the others were)."""


def parse_tables(text: str | Sequence[str] | None) -> list[str]:
    """``"metrics,key_loads"`` or a list → known table names; empty or None → every table.

    An unknown name is a ``ValueError`` naming the field and the known tables, before any
    Spark session starts.
    """
    if text is None:
        return list(TABLES)
    names = [s.strip() for s in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        raise ValueError(f"tables: unknown table {', '.join(unknown)}; "
                         f"known: {', '.join(TABLES)}")
    return names or list(TABLES)


def maintain_table(spark: SparkSession, path: str, retention_hours: float) -> dict[str, Any]:
    """OPTIMIZE then VACUUM one Delta table; the file counts before and after.

    ``files_before``/``files_after`` are the table's active files (what a reader opens);
    ``vacuumed_files`` the removed files VACUUM deleted from storage (older than the
    retention), read back from the table's history.
    """
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


RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
#: Spark's parallel file listing (VACUUM's) starts this many tasks by default
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


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


def run(cfg: Config, tables: Sequence[str] | str | None = None,
        spark: SparkSession | None = None) -> dict[str, Any]:
    """Maintain ``tables`` (default: all of ``keyshift.schemas.TABLES``) in the warehouse.

    A table not created yet is reported ``absent`` and left alone; when none exists the
    result is ``skipped`` (a fresh warehouse is not an error). A table that fails does not
    stop the others; :class:`MaintenanceError` names every failed table at the end.
    """
    from keyshift.lakehouse.delta import table_exists
    from keyshift.lakehouse.session import get_spark

    names = parse_tables(tables)
    retention = cfg.warehouse.vacuum_retention_hours
    spark = spark or get_spark(cfg, app_name="keyshift-table-maintenance")
    results: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    listing = spark.conf.get(LISTING_PARALLELISM, None)
    spark.conf.set(LISTING_PARALLELISM, str(cfg.spark.shuffle_partitions))
    try:
        for name in names:
            if not table_exists(spark, cfg, name):
                results[name] = {"status": "absent"}
                continue
            try:
                results[name] = maintain_table(spark, cfg.table_path(name), retention)
            except Exception as exc:  # noqa: BLE001 - the other tables still get maintained
                first = (str(exc).strip().splitlines()[0] if str(exc).strip()
                         else type(exc).__name__)
                failed[name] = first
                results[name] = {"status": "failed", "error": first}
    finally:  # a session shared with other work (tests, a notebook) gets its setting back
        if listing is None:
            spark.conf.unset(LISTING_PARALLELISM)
        else:
            spark.conf.set(LISTING_PARALLELISM, listing)
    if failed:
        raise MaintenanceError("; ".join(f"{n}: {e}" for n, e in failed.items()))
    summary: dict[str, Any] = {"job": JOB, "warehouse": cfg.warehouse_uri,
                               "retention_hours": retention, "tables": results}
    if all(r["status"] == "absent" for r in results.values()):
        summary.update(status="skipped",
                       reason=f"no Delta table of {', '.join(names)} in {cfg.warehouse_uri} yet")
    else:
        summary["status"] = "maintained"
    return summary


def summary_line(result: dict[str, Any]) -> str:
    """One human line per run: files before → after per maintained table."""
    parts = [
        f"{name} {r['files_before']}→{r['files_after']} files"
        + (f" ({r['vacuumed_files']} vacuumed)" if r.get("vacuumed_files") else "")
        for name, r in result["tables"].items() if r["status"] == "maintained"
    ]
    absent = [name for name, r in result["tables"].items() if r["status"] == "absent"]
    line = (f"maintenance (retention {result['retention_hours']:g} h): "
            + ("; ".join(parts) or "nothing to compact"))
    return line + (f"; absent: {', '.join(absent)}" if absent else "")


def print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result["status"] == "skipped":
        console.print(f"[yellow]{JOB} skipped[/]: {result['reason']}")
        return
    t = Table(title=f"Delta maintenance in {result['warehouse']} "
                    f"(VACUUM retention {result['retention_hours']:g} h)")
    for col in ("table", "files before", "files after", "compacted", "vacuumed", "seconds"):
        t.add_column(col, justify="left" if col == "table" else "right")
    for name, r in result["tables"].items():
        if r["status"] != "maintained":
            t.add_row(name, "—", "—", "—", "—", r["status"])
            continue
        t.add_row(name, str(r["files_before"]), str(r["files_after"]), str(r["files_compacted"]),
                  str(r["vacuumed_files"] if r["vacuumed_files"] is not None else "?"),
                  f"{r['seconds']:.1f}")
    console.print(t)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tables", default=None, metavar="T1,T2",
                   help=f"comma-separated tables (default: all of {', '.join(TABLES)})")
    p.add_argument("--retention-hours", type=float, default=None, metavar="HOURS",
                   help="VACUUM retention (default: warehouse.vacuum_retention_hours; >= 168)")
    add_config_option(p)  # SUPPRESS below `keyshift`; main() sets None
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


RUNTIME_ERRORS: tuple[type[BaseException], ...] = (MaintenanceError,)


def run_from_args(args: argparse.Namespace) -> dict[str, Any]:
    over = ({"warehouse": {"vacuum_retention_hours": args.retention_hours}}
            if args.retention_hours is not None else {})
    cfg = load_config(args.config, **over)
    return run(cfg, parse_tables(args.tables))


def main(argv: list[str] | None = None) -> int:
    from keyshift.jobs.report import run_job

    p = argparse.ArgumentParser(prog="python -m keyshift.jobs.table_maintenance",
                                description="Compact (OPTIMIZE) and vacuum keyshift's Delta "
                                            "tables.")
    add_arguments(p)
    p.set_defaults(config=None)
    return run_job(JOB, p.parse_args(argv), run_from_args, print_summary, RUNTIME_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
