"""``keyshift stream``: run the ingestion job (Kafka → validate → route → Delta metrics).

    keyshift stream --app wordcount --run-id demo --duration 120
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from keyshift.cli import UsageError
from keyshift.config import load_config

_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "stream", help="run the ingestion job: Kafka → validated, routed events → Delta",
        description="Structured Streaming from the Kafka topic; bad records go to dead_letter; "
        "each micro-batch (statistic window) writes metrics and key_loads to Delta. Stop with "
        "Ctrl-C or --duration; running again with the same --run-id continues where it stopped.",
    )
    p.add_argument("--config", help="TOML file (default: $KEYSHIFT_CONFIG or built-in)")
    p.add_argument("--app", help="event schema: a shipped app, an entry point of group "
                   "keyshift.operators, or module:Class (default: controller.app)")
    p.add_argument("--run-id", default="default", help="run id: checkpoint, metrics rows, plan scope")
    p.add_argument("--scope", help="plan scope to route by (default: the run id)")
    p.add_argument("--topic", help="Kafka topic (default: kafka.topic)")
    p.add_argument("--window", type=float, help="statistic window = trigger, seconds "
                   "(default: controller.window_s)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: run)")
    p.add_argument("--from", dest="starting", choices=("earliest", "latest"), default="earliest",
                   help="where a new run starts in the topic (default earliest)")
    p.add_argument("--no-routing", action="store_true",
                   help="skip key → group → engine routing (benchmark baseline)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if not _RUN_ID.match(args.run_id):
        raise UsageError(f"--run-id: use 1-64 letters, digits, '.', '_' or '-', got {args.run_id!r}")
    if args.window is not None and not args.window > 0:
        raise UsageError(f"--window: must be > 0 seconds, got {args.window}")
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration: must be > 0 seconds, got {args.duration}")
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message

    from rich.console import Console
    from rich.table import Table

    from streaming.broker import Broker
    from streaming.ingest import IngestSpec, start_ingest
    from streaming.jars import JarResolutionError
    from streaming.session import get_spark, read_table

    over = {"starting_offsets": args.starting, "routing": not args.no_routing}
    for name, value in (("app", args.app), ("topic", args.topic), ("trigger_s", args.window),
                        ("scope", args.scope)):
        if value is not None:
            over[name] = value
    spec = IngestSpec.from_config(cfg, args.run_id, **over)
    console = Console(stderr=True)
    if not Broker.from_config(cfg).healthy(timeout_s=5):
        print(f"keyshift stream: no Kafka broker answers at {cfg.kafka.bootstrap} "
              "(run 'keyshift kafka start')", file=sys.stderr)
        return 1
    try:
        spark = get_spark(cfg, app_name=f"keyshift-stream-{args.run_id}")
    except JarResolutionError as exc:
        print(f"keyshift stream: {exc}", file=sys.stderr)
        return 1
    query = start_ingest(spark, cfg, spec)
    console.print(f"stream: {spec.app} from {spec.topic}@{spec.bootstrap}, window "
                  f"{spec.trigger_s:g}s, run {spec.run_id}, checkpoint {spec.checkpoint}")
    seen = -1
    deadline = time.monotonic() + args.duration if args.duration else float("inf")
    try:
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
            prog = query.lastProgress
            if prog and prog["batchId"] != seen:
                seen = prog["batchId"]
                console.print(
                    f"batch {prog['batchId']}: {prog['numInputRows']} records, "
                    f"{prog.get('processedRowsPerSecond', 0):,.0f} rows/s, "
                    f"{prog['durationMs'].get('triggerExecution', 0) / 1000:.1f}s")
        _let_batch_finish(query, console)
    except KeyboardInterrupt:
        console.print("stream: stopping")
    finally:
        error = query.exception()
        query.stop()
    if error is not None:
        print(f"keyshift stream: the query failed: {str(error).splitlines()[0][:500]}",
              file=sys.stderr)
        return 1
    _summary(read_table(spark, cfg, "metrics"), spec.run_id, Console(), Table)
    return 0


def _let_batch_finish(query, console, limit_s: float = 300.0) -> None:
    """Stop between batches: a batch cut off mid-way is redone on restart, wasted work."""
    deadline = time.monotonic() + limit_s
    if query.isActive and query.status.get("isTriggerActive"):
        console.print("stream: letting the running batch finish")
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.5)


def _summary(metrics, run_id: str, console, table_cls) -> None:
    from pyspark.sql import functions as F

    rows = (metrics.where(F.col("run_id") == run_id).orderBy(F.col("batch_id").desc())
            .limit(10).collect())
    table = table_cls(title=f"metrics of run {run_id} (last 10 windows)")
    for col in ("batch", "events in", "dead letter", "engines", "engine loads", "RSTD %",
                "var(L)", "events/s", "plan"):
        table.add_column(col, justify="right")
    for r in reversed(rows):
        table.add_row(str(r["batch_id"]), f"{r['events_in']:,}", str(r["dead_letter"]),
                      str(r["engines"]), str(list(r["engine_loads"])), f"{r['rstd']:.1f}",
                      f"{r['var_load']:.1f}", f"{r['input_rate']:,.0f}", str(r["plan_version"]))
    console.print(table)
