"""Compact and vacuum keyshift's Delta tables: the small files the streaming job leaves behind.

Every micro-batch appends one small file to each table it writes (``metrics``,
``key_loads``, ``decisions``…), so after a day a table is thousands of files of a few
kilobytes and every reader (the nightly jobs, ``keyshift report``) pays for opening them.
This job runs, per table, Delta's ``OPTIMIZE`` (bin-packing compaction: the small files are
rewritten into a few large ones, a new table version; the old files stay on disk,
*removed* from the log) and then ``VACUUM`` (deletes removed files older than
``warehouse.vacuum_retention_hours``).

The Delta operations themselves (OPTIMIZE, the retention property, VACUUM and its file
listing) are the gateway's: :mod:`keyshift.lakehouse.maintenance` says how and why.

By hand: ``python -m keyshift.jobs.table_maintenance [--tables metrics,key_loads]
[--retention-hours 336] [--json]`` or ``keyshift job maintenance ...``; nightly: the
``keyshift_table_maintenance`` DAG. Idempotent: a compacted table is left as it is.
"""

from __future__ import annotations

import argparse
import sys
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


def run(cfg: Config, tables: Sequence[str] | str | None = None,
        spark: SparkSession | None = None) -> dict[str, Any]:
    """Maintain ``tables`` (default: all of ``keyshift.schemas.TABLES``) in the warehouse.

    A table not created yet is reported ``absent`` and left alone; when none exists the
    result is ``skipped`` (a fresh warehouse is not an error). A table that fails does not
    stop the others; :class:`MaintenanceError` names every failed table at the end.
    """
    from keyshift.lakehouse.delta import table_exists
    from keyshift.lakehouse.maintenance import maintain_table
    from keyshift.lakehouse.session import get_spark

    names = parse_tables(tables)
    retention = cfg.warehouse.vacuum_retention_hours
    spark = spark or get_spark(cfg, app_name="keyshift-table-maintenance")
    results: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
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
