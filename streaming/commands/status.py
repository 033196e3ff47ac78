"""``keyshift status``: the runs in the warehouse, or one run's last batches and decisions.

    keyshift status                          # every run, newest first
    keyshift status --run-id run-2026... --last 20
    keyshift status --json                   # one JSON object
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from keyshift.cli import UsageError, add_log_options, printable
from keyshift.config import load_config
from keyshift.lakehouse.logs import one_line_failure
from keyshift.run_ids import run_id_arg

SUMMARY = "list the runs, or one run's last batches and decisions"


def add_common(p: argparse.ArgumentParser) -> None:
    """The options ``status`` and ``report`` share."""
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_log_options(p)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "status", help=SUMMARY,
        description="Every run in the Delta warehouse, newest first: its operator and "
        "policy, first and last batch, events, dead letters, engines now, the controller's "
        "last decision, migrations, and whether its job is alive (its heartbeat, written "
        "every 5 s while it runs, idle or not, is younger than 3 x max(trigger, 10 s)). "
        "With --run-id, that run's last batches and decisions. A live run is shown "
        "up to its last batch (rows it has not committed to Delta yet included). "
        "A warehouse on this machine's disk is read without Spark (delta-rs), in seconds; "
        "a remote one through Spark.",
    )
    add_common(p)
    p.add_argument("--run-id", type=run_id_arg, help="show this run's last batches and decisions")
    p.add_argument("--last", type=int, default=10,
                   help="with --run-id: how many batches and decisions (default 10)")
    p.set_defaults(func=run)
    return p


@one_line_failure("status")
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    if args.last < 1:
        raise UsageError(f"--last: must be >= 1, got {args.last}")
    from keyshift.streaming import runs

    def read(rows: runs.Rows) -> dict[str, Any]:
        if args.run_id is None:
            return {"warehouse": cfg.warehouse_uri,
                    "runs": [_counted(r) for r in runs.list_runs(rows, cfg)]}
        return {"warehouse": cfg.warehouse_uri,
                "run": _counted(runs.find_run(rows, cfg, args.run_id)),
                **runs.recent(rows, cfg, args.run_id, args.last)}

    result = runs.answer(cfg, read, args.log_level)
    if args.json:
        print(json.dumps(result, default=str))
    elif args.run_id is None:
        _print_runs(result["runs"], cfg.warehouse_uri)
    else:
        _print_run(result)
    return 0


def _counted(run: dict[str, Any]) -> dict[str, Any]:
    """A run of the overview with its counts in the vocabulary ``run --json`` and ``report``
    use (:func:`keyshift.streaming.report.counters`): the overview sums ``metrics`` once per
    batch, as the report does."""
    from keyshift.streaming.report import counters

    return {**run, **counters(run["events_in"], run["dead_letters"], None)}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _num(value: Any, fmt: str = "") -> str:
    return "" if value is None or math.isnan(value) else format(value, fmt)


def _console():
    """rich's console, taking no markup (``[...]`` in a row is text; a row's control
    characters are escaped by :func:`keyshift.cli.printable`); piped output gets a wide page
    instead of 80 columns of wrapped cells."""
    from rich.console import Console

    console = Console(highlight=False, markup=False)
    return console if console.is_terminal else Console(highlight=False, markup=False,
                                                       width=200)


def _print_runs(runs: list[dict[str, Any]], warehouse: str) -> None:
    from rich.table import Table

    p = printable
    t = Table(title=f"keyshift runs in {p(warehouse)} (newest first)")
    for col in ("run", "app", "policy", "batches", "last batch", "alive", "records", "valid",
                "dead letters", "engines", "migrations", "last decision"):
        numeric = col in ("records", "valid", "dead letters", "engines", "migrations")
        t.add_column(col, justify="right" if numeric else "left",
                     no_wrap=col in ("run", "batches", "last batch"))
    for r in runs:
        if r["batches"]:
            batches = f"{r['first_batch']}-{r['last_batch']}"
            last = f"{r['last_time'][:19].replace('T', ' ')} ({_age(r['last_batch_age_s'])})"
        else:
            batches, last = "none yet", f"started {p((r['started'] or '?')[:19])}"
        d = r["last_decision"]
        t.add_row(p(r["run_id"]), p(r["app"] or "?"), p(r["policy"] or "?"), batches, last,
                  "yes" if r["alive"] else "no", f"{r['records']:,}", f"{r['valid']:,}",
                  f"{r['dead_letters']:,}", _num(r["engines"]), str(r["migrations"]),
                  f"{p(d['action'])} (batch {d['batch_id']})" if d else "")
    console = _console()
    console.print(t)
    for r in runs:  # the reasons are sentences: below the table, not squeezed into a cell
        if (d := r["last_decision"]):
            console.print(f"{p(r['run_id'])}: batch {d['batch_id']}, {p(d['component'])} "
                          f"{p(d['action'])}: {p(d['reason'])}")


def _print_run(result: dict[str, Any]) -> None:
    from rich.table import Table

    from keyshift.control.batch_cost import cost_lines

    p = printable
    r = result["run"]
    console = _console()
    console.print(
        f"run {p(r['run_id'])}: {p(r['app'] or '?')} with {p(r['policy'] or '?')}; batches "
        f"{r['first_batch']}-{r['last_batch']}, last {_age(r['last_batch_age_s'])} "
        f"({'alive' if r['alive'] else 'not running'}); "
        f"{r['records']:,} records ({r['valid']:,} valid, {r['dead_letters']:,} dead "
        f"letters), {r['complex_events']:,} complex events; {_num(r['engines'])} engines now; "
        f"{r['migrations']} migrations")
    b = Table(title=f"last {len(result['batches'])} batches")
    for col in ("batch", "time", "valid", "dead letters", "out", "duration s", "e2e p50 s",
                "RSTD %", "engines", "cores held", "plan"):
        b.add_column(col, justify="left" if col == "time" else "right")
    for x in result["batches"]:
        b.add_row(str(x["batch_id"]), p((x["time"] or "")[:19].replace("T", " ")),
                  str(x["events_in"]), str(x["dead_letter"]), str(x["out_events"]),
                  _num(x["batch_duration_s"], ".2f"), _num(x.get("e2e_p50_s"), ".2f"),
                  _num(x["rstd"], ".1f"),
                  str(x["engines"]), _num(x.get("cores_held")), f"v{x['plan_version']}")
    console.print(b)
    for line in cost_lines(result.get("cost") or {}):  # the run folder, on the driver's host
        console.print(p(line))
    if result.get("floor"):
        console.print(p(f"the floor: {result['floor']}"))
    if (held := result.get("held")):
        billed = ("as the cluster bills them, from each process's registration"
                  if held["core_seconds_billed"]
                  else "a local master: nothing was billed by a cluster")
        console.print(f"core-seconds held: {held['core_seconds']:,.1f} ({billed}; "
                      f"{held['processes']} process{'es' if held['processes'] > 1 else ''})")
    d = Table(title=f"last {len(result['decisions'])} decisions")
    for col in ("batch", "component", "action", "RSTD before", "RSTD after", "moved groups",
                "engines", "reason"):
        d.add_column(col, justify="left" if col in ("component", "action", "reason") else "right")
    for x in result["decisions"]:
        engines = (f"{x['engines_before']}->{x['engines_after']}"
                   if x["engines_before"] is not None else "")
        d.add_row(str(x["batch_id"]), p(x["component"]), p(x["action"]),
                  _num(x["rstd_before"], ".1f"), _num(x["rstd_after"], ".1f"),
                  _num(x["moved_groups"]), engines, p(x["reason"]))
    console.print(d)
