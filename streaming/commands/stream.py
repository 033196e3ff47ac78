"""``keyshift stream``: the speed layer in its ingestion-only mode.

    keyshift stream --app wordcount --run-id demo --duration 120
    keyshift stream --run-id demo                  # again: continues from the checkpoint
    keyshift stream --app mypkg.ops:Sessions --policy lptf   # route by the batch layer's plan

The same job as ``keyshift run`` (:class:`keyshift.streaming.job.StreamJob`, started by
:func:`keyshift.streaming.commands.run.start_job`) with ``ingest_only``: Kafka records are validated
(bad ones to ``dead_letter`` with the reason), routed by the controller's plan, and counted
per group by one task per engine, which writes ``key_loads``; the driver writes one
``metrics`` row per micro-batch. No operator runs, no state is kept, nothing migrates. So
there is one pipeline, one metrics builder and one meaning of ``metrics.latency_s`` (engine
work seconds per tuple; here the counting task's work). Its history under ``kg`` is what
the batch layer computes baseline plans from.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from keyshift.cli import UsageError, add_json_options, add_log_options, json_indent
from keyshift.config import Config, load_config
from keyshift.lakehouse.logs import one_line_failure
from keyshift.lakehouse.logs import say as say_line
from keyshift.run_ids import check_run_id, run_id_arg

SUMMARY = "ingest a Kafka topic into Delta without an operator"

DEFAULT_POLICY = "kg"  # ingestion measures loads; a hash plan never moves a group


def stream_policies() -> list[str]:
    """The plans ingestion routes by: every job policy that keeps a group on one engine
    (not the splitters, which need an operator's summary)."""
    from keyshift.policies.registry import WHOLE_GROUP_KINDS, policy_names

    return policy_names(WHOLE_GROUP_KINDS)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "stream", help=SUMMARY,
        description="keyshift run without an operator: Structured Streaming from the Kafka "
        "topic; bad records go to dead_letter; each micro-batch writes key_loads and one "
        "metrics row to Delta. Stop with Ctrl-C/SIGTERM (between batches) or --duration; "
        "running again with the same --run-id continues where it stopped.",
    )
    p.add_argument("--app", help="event schema: a shipped app, an entry point of group "
                   "keyshift.operators, or module:Class (default: controller.app)")
    p.add_argument("--run-id", default="default", type=run_id_arg,
                   help="run id: checkpoint, metrics rows, plans (default: 'default')")
    p.add_argument("--topic", help="Kafka topic (default: kafka.topic)")
    p.add_argument("--policy", default=DEFAULT_POLICY,
                   help=f"plan the routing follows: one of {', '.join(stream_policies())} "
                   f"(default {DEFAULT_POLICY}; lptf, clb and uhlb use the batch layer's plan)")
    p.add_argument("--window", type=float, help="micro-batch trigger = statistic window, "
                   "seconds (default: spark.trigger_s and controller.window_s)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: run "
                   "until Ctrl-C or SIGTERM)")
    p.add_argument("--from", dest="starting", choices=("earliest", "latest"), default="earliest",
                   help="where a new run starts in the topic (default earliest)")
    p.add_argument("--no-routing", action="store_true",
                   help="one engine under kg: every group on engine 0 (benchmark baseline)")
    p.add_argument("--scope", help=argparse.SUPPRESS)  # removed: a clear error, not argparse's
    add_json_options(p, "print the run's summary as one JSON object at the end (no table), "
                     "as keyshift run --json does")
    add_log_options(p)
    p.set_defaults(func=run)
    return p


def ingest_options(args: argparse.Namespace, cfg: Config) -> tuple[Config, Any]:
    """The config and :class:`keyshift.streaming.job.JobOptions` (``ingest_only``) of a stream run.

    A bad flag is a :class:`UsageError` naming it. ``--window`` sets both the trigger and the
    controller's window, so one statistic window is one micro-batch as the flag says; the
    engine scaler is off because its latency model is an operator's, and there is none.
    """
    from keyshift.apps import event_schema
    from keyshift.errors import FieldError
    from keyshift.policies import PolicyInputError
    from keyshift.policies.registry import WHOLE_GROUP_KINDS, policy_info
    from keyshift.streaming.job import JobOptions

    if args.scope is not None:
        raise UsageError("--scope: removed; the run's controller owns its plan. Use --policy "
                         "lptf|clb|uhlb to route by the batch layer's plan (scope 'baseline')")
    try:  # argparse checked it (run_id_arg); a caller that built args itself did not
        check_run_id(args.run_id)
    except ValueError as exc:
        raise UsageError(f"--run-id: {exc}") from None
    if args.window is not None and not args.window > 0:
        raise UsageError(f"--window: must be > 0 seconds, got {args.window}")
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration: must be > 0 seconds, got {args.duration}")
    try:
        policy_info(args.policy, WHOLE_GROUP_KINDS, "keyshift stream")
    except PolicyInputError as exc:
        raise UsageError(f"--{exc}") from None
    if args.no_routing and args.policy != "kg":
        raise UsageError(f"--no-routing: means one engine under kg; drop --policy {args.policy}")
    app = args.app or cfg.controller.app
    try:
        event_schema(app)  # only the schema: ingestion builds no operator
    except (FieldError, KeyError, ValueError) as exc:
        raise UsageError(f"--app: {str(exc).strip(chr(39))}") from None

    update: dict[str, Any] = {"planner": cfg.planner.model_copy(update={"enabled": False})}
    if args.window is not None:
        update["controller"] = cfg.controller.model_copy(update={"window_s": args.window})
    cfg = cfg.model_copy(update=update)
    opts = JobOptions(app=app, policy=args.policy, run_id=args.run_id,
                      topic=args.topic or cfg.kafka.topic,
                      engines=1 if args.no_routing else None, trigger_s=args.window,
                      starting_offsets=args.starting, ingest_only=True)
    return cfg, opts


@one_line_failure("stream")
def run(args: argparse.Namespace) -> int:
    cfg, opts = ingest_options(args, load_config(args.config))  # ConfigError: one line
    from keyshift.lakehouse.jars import JarResolutionError

    from .run import (
        BatchLedger,
        check_topic,
        query_failed,
        run_summary,
        start_job,
        stop_failed_line,
        wait_and_stop,
    )

    check_topic(cfg, opts.topic)  # broker down or topic missing: UsageError, before Spark
    say = say_line
    try:
        ledger = BatchLedger()  # this process's batches, each once (--json's this_process)
        job = start_job(cfg, opts, args.log_level, say, ledger)
    except JarResolutionError as exc:
        print(f"keyshift stream: {exc}", file=sys.stderr)
        return 1
    say(f"stream {job.run_id}: {opts.app} from {opts.topic}@{cfg.kafka.bootstrap}, ingestion "
        f"only, plan {opts.policy} on {job.initial_engines} engine(s), trigger "
        f"{job.trigger_s:g} s, checkpoint {job.checkpoint}")
    failed, why, stop_failed = wait_and_stop(job, args.duration, say)
    s = job.summary()
    # this process's batches; the run's counts (each batch once) are in --json and status
    say(f"{job.run_id}: {s['batches']} batches in this process, "
        f"{s['events_in'] + s['dead_letter']} records: {s['events_in']} valid, "
        f"{s['dead_letter']} dead letters; {s['events_per_s']:.0f} events/s busy, batch p50 "
        f"{s['batch_p50_s']:.2f} s")
    if args.json:  # keyshift run's summary, failures included (the line on stderr says why)
        from keyshift.lakehouse.logs import failure_line

        s = run_summary(job, ledger, cfg)
        s.update(interrupted=bool(why), failed=bool(failed or stop_failed),
                 error=(failure_line(failed) if failed else stop_failed) or None)
        print(json.dumps(s, indent=json_indent(args)), flush=True)
    if failed:  # the first cause; a failed stop after it is its second clause
        print(f"keyshift stream: {query_failed(failed, job.run_id, stop_failed)}",
              file=sys.stderr)
        return 1
    if stop_failed:
        print(f"keyshift stream: {stop_failed_line(stop_failed, job.run_id)}", file=sys.stderr)
        return 1
    if not args.json:
        from rich.console import Console

        from keyshift.lakehouse.delta import read_table

        _summary(read_table(job.spark, cfg, "metrics"), job.run_id, Console())
    return 130 if why and why[0] == signal.SIGINT else 0


def _summary(metrics, run_id: str, console) -> None:
    """The run's last ten metrics rows as a table (the same rows ``keyshift run`` writes)."""
    from pyspark.sql import functions as F
    from rich.table import Table

    rows = (metrics.where(F.col("run_id") == run_id).orderBy(F.col("batch_id").desc())
            .limit(10).collect())
    table = Table(title=f"metrics of run {run_id} (last 10 batches)")
    for col in ("batch", "valid", "dead letters", "engines", "engine loads", "RSTD %",
                "var(L)", "events/s", "work µs/tuple", "plan"):
        table.add_column(col, justify="right")
    for r in reversed(rows):
        table.add_row(str(r["batch_id"]), f"{r['events_in']:,}", str(r["dead_letter"]),
                      str(r["engines"]), str(list(r["engine_loads"])), f"{r['rstd']:.1f}",
                      f"{r['var_load']:.1f}", f"{r['input_rate']:,.0f}",
                      f"{r['latency_s'] * 1e6:,.1f}", str(r["plan_version"]))
    console.print(table)
