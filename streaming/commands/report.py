"""``keyshift report RUN_ID``: the HTML report with plots (the one the demo writes) of any run
in the warehouse, live or finished.

    keyshift report run-20261126-101500-ab12                # <home>/runs/<run id>/report.html
    keyshift report run-20261126-101500-ab12 --out /tmp/r --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from keyshift.cli import UsageError
from keyshift.config import load_config
from keyshift.lakehouse.logs import one_line_failure
from keyshift.run_ids import run_id_arg

from .status import add_common

SUMMARY = "write the HTML report with plots of a run"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report", help=SUMMARY,
        description="Read a run's rows from the Delta warehouse (a live run's not yet "
        "committed ones too; without Spark when the warehouse is on this machine's disk) "
        "and write report.html with its plots (imbalance, throughput, batch duration, load "
        "per engine), decisions and migrations, and summary.json; prints the report's path.",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=run_id_arg,
                   help="the run (see `keyshift status`)")
    p.add_argument("--out", help="folder for the report and its plots "
                   "(default: <home>/runs/<RUN_ID>/)")
    add_common(p)
    p.set_defaults(func=run)
    return p


@one_line_failure("report")
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    folder = Path(args.out).expanduser() if args.out else cfg.run_dir(args.run_id)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out: {folder} is a file; give a folder for the report")
    from keyshift.streaming.report import report_run
    from keyshift.streaming.runs import Rows, answer, find_run

    def write(rows: Rows) -> dict:
        found = find_run(rows, cfg, args.run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--out: cannot create {folder}: {exc.strerror}") from None
        return report_run(rows, cfg, args.run_id, folder, found["app"], extra={
            "app": found["app"], "policy": found["policy"], "alive": found["alive"]})

    summary = answer(cfg, write, args.log_level, app_name="keyshift-report")
    print(json.dumps(summary) if args.json else summary["report"])
    return 0
