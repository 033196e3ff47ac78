"""``keyshift dead-letters RUN_ID``: what a run refused, by reason, with samples to look at.

    keyshift dead-letters run-20261126-101500-ab12              # a table per reason
    keyshift dead-letters run-20261126-101500-ab12 --limit 10 --json --pretty

A bad record never stops the job: it goes to ``dead_letter`` with its reason
(:mod:`keyshift.streaming.ingest`), and ``status`` only counts them. A person fixing a producer
needs the reasons, how often each came, and where to find an example in Kafka (topic,
partition, offset) next to the start of what was sent.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from keyshift.cli import UsageError, add_json_options, add_log_options, json_indent
from keyshift.config import load_config
from keyshift.lakehouse.logs import one_line_failure
from keyshift.run_ids import run_id_arg

SUMMARY = "list a run's dead letters: counts and samples per reason"
RAW_SHOWN = 200  # characters of a sample's record shown (dead_letter.raw keeps up to 4096)
# a reason's part that is the record's own (an oversized record's size): the group says N,
# each sample keeps its reason as stored
_OWN = re.compile(r"^oversized: \d+ bytes")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "dead-letters", help=SUMMARY,
        description="The records a run sent to the dead_letter table (not JSON, a missing "
        "or mistyped field, oversized), grouped by reason, most frequent first: the count "
        "of each, up to --limit samples (batch, topic, partition, offset, the record's first "
        f"{RAW_SHOWN} characters) and the total. Read without Spark when the warehouse is on "
        "this machine's disk.",
    )
    p.add_argument("run_id", metavar="RUN_ID", type=run_id_arg,
                   help="the run (see `keyshift status`)")
    p.add_argument("--limit", type=int, default=3,
                   help="samples shown per reason, the earliest first (default 3; 0: counts only)")
    add_json_options(p)
    add_log_options(p)
    p.set_defaults(func=run)
    return p


@one_line_failure("dead-letters")
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    if args.limit < 0:
        raise UsageError(f"--limit: must be >= 0, got {args.limit}")
    from keyshift.streaming.runs import Rows, answer, find_run

    def read(rows: Rows) -> dict[str, Any]:
        find_run(rows, cfg, args.run_id)  # an unknown id names the known runs
        return dead_letters(rows, args.run_id, args.limit)

    result = {"warehouse": cfg.warehouse_uri,
              **answer(cfg, read, args.log_level, app_name="keyshift-dead-letters")}
    if args.json or args.pretty:
        print(json.dumps(result, indent=json_indent(args), default=str))
    else:
        _print(result)
    return 0


def dead_letters(rows: Any, run_id: str, limit: int) -> dict[str, Any]:
    """The run's dead letters per reason (most frequent first, ties by reason; an oversized
    record's size is its own, so those group as ``oversized: N bytes > ...``): the count and
    the first ``limit`` records by batch, partition and offset, their ``raw`` cut to
    :data:`RAW_SHOWN` characters (``raw_chars`` keeps the length stored)."""
    d = rows.frame("dead_letter", run_id, ["batch_id", "topic", "partition", "offset",
                                           "kafka_ts", "raw", "reason"])
    d = d.sort_values(["batch_id", "partition", "offset"], kind="stable")
    d["group"] = d.reason.map(lambda x: _OWN.sub("oversized: N bytes", x))
    reasons = []
    for reason, group in d.groupby("group", sort=False):
        samples = []
        for r in group.head(limit).itertuples():
            raw = r.raw if isinstance(r.raw, str) else None
            samples.append({
                "batch_id": int(r.batch_id), "topic": r.topic, "partition": int(r.partition),
                "offset": int(r.offset),
                "kafka_ts": None if r.kafka_ts is None or r.kafka_ts != r.kafka_ts
                else r.kafka_ts.isoformat(),
                "raw": None if raw is None else raw[:RAW_SHOWN],
                "raw_chars": None if raw is None else len(raw), "reason": r.reason})
        reasons.append({"reason": reason, "count": len(group), "samples": samples})
    reasons.sort(key=lambda x: (-x["count"], x["reason"]))
    return {"run_id": run_id, "total": len(d), "reasons": reasons}


def _print(result: dict[str, Any]) -> None:
    from rich.table import Table

    from keyshift.cli import printable

    from .status import _console

    console = _console()
    if not result["total"]:
        console.print(f"run {printable(result['run_id'])}: no dead letters")
        return
    t = Table(title=f"dead letters of run {printable(result['run_id'])}: {result['total']} in "
              f"{len(result['reasons'])} reasons")
    for col in ("reason", "count", "batch", "partition", "offset", "record"):
        t.add_column(col, justify="right" if col in ("count", "batch", "partition", "offset")
                     else "left", overflow="fold")
    for r in result["reasons"]:
        t.add_row(printable(r["reason"]), str(r["count"]), "", "", "", "",
                  end_section=not r["samples"])
        for i, s in enumerate(r["samples"]):
            cut = "" if s["raw_chars"] is None or s["raw_chars"] <= len(s["raw"]) else (
                f" ... ({s['raw_chars']} chars)")
            t.add_row("", "", str(s["batch_id"]), str(s["partition"]), str(s["offset"]),
                      printable(s["raw"]) + cut if s["raw"] is not None else "(none)",
                      end_section=i == len(r["samples"]) - 1)
    console.print(t)
