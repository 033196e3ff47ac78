"""``keyshift demo``: broker, topic, a producer with a skew schedule, the streaming job with a
balancing policy, then a summary and an HTML report in the run folder.

    keyshift demo                                  # a few minutes, DLB-H, first story detection
    keyshift demo --duration 60 --policy kg --json
    keyshift demo --planner                        # and the engine scaler chooses N
    keyshift demo --seed-history                   # ... from champion GPs trained first

The summary compares the run with KG: the busiest engine's load under the run's plans
against KG's plan on the same input, per statistic window, computed from the per-group loads
the run measured (``batches.jsonl``); a counterfactual, not a timed KG run.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
import uuid
from typing import Any

from keyshift.cli import UsageError, add_log_options
from keyshift.config import load_config, with_workload
from keyshift.lakehouse.logs import one_line_failure
from keyshift.lakehouse.logs import say as say_line

SUMMARY = "see the balancer at work on a skewed stream, with a report"

APPS = ("fsd", "traffic", "clicks", "wordcount", "heavy")


def demo_policies() -> list[str]:
    """The policies the demo runs: every job policy that moves whole key groups (the demo's
    default operator, fsd, cannot take a split key), from the policies' registry."""
    from keyshift.policies.registry import WHOLE_GROUP_KINDS, policy_names

    return policy_names(WHOLE_GROUP_KINDS)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "demo", help=SUMMARY,
        description="Start the local Kafka broker, create a topic, produce events whose key "
        "skew changes over time, run the streaming job with a balancing policy, and print a "
        "summary; an HTML report with plots goes to <home>/runs/<run id>/.",
    )
    p.add_argument("--duration", type=float, default=180.0,
                   help="seconds of input to produce (default 180)")
    p.add_argument("--policy", default=None, help=f"one of {', '.join(demo_policies())} "
                   "(default: controller.policy)")
    p.add_argument("--app", default=None, help=f"one of {', '.join(APPS)} "
                   "(default: controller.app)")
    p.add_argument("--rate", type=float, default=300.0, help="events per second (default 300)")
    p.add_argument("--skew", default=None,
                   help="skew schedule (default: zipf:0.2, then 1.5 from a third of the run)")
    p.add_argument("--engines", type=int, default=None, help="initial engines (engines.initial)")
    p.add_argument("--planner", action="store_true",
                   help="let the engine scaler choose N as well ([planner] enabled): the "
                   "champion GPs of the local MLflow registry when there are, else the "
                   "pure-core forecast fitted on the run's own windows")
    p.add_argument("--seed-history", action="store_true",
                   help="implies --planner: first write a synthetic history of this workload "
                   "ending now into Delta and run the nightly retrain on it, so the local "
                   "MLflow registry holds champion GPs and the scaler forecasts from them "
                   "from the first window (a failed retrain: the fallback forecast)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_log_options(p)
    p.set_defaults(func=run)
    return p


def _validate(args: argparse.Namespace, cfg) -> tuple[str, str]:
    if not args.duration > 0:
        raise UsageError(f"--duration: must be > 0 seconds, got {args.duration}")
    if not args.rate > 0:
        raise UsageError(f"--rate: must be > 0 events/s, got {args.rate}")
    from keyshift.policies import PolicyInputError
    from keyshift.policies.registry import WHOLE_GROUP_KINDS, policy_info

    policy = args.policy or cfg.controller.policy
    try:
        policy_info(policy, WHOLE_GROUP_KINDS, "keyshift demo")
    except PolicyInputError as exc:
        raise UsageError(f"--{exc}") from None
    app = args.app or cfg.controller.app
    if app not in APPS:
        raise UsageError(f"--app: unknown application {app!r}; choose one of {', '.join(APPS)}")
    if args.engines is not None and not cfg.engines.min <= args.engines <= cfg.engines.max:
        raise UsageError(f"--engines: must be in {cfg.engines.min}..{cfg.engines.max}, "
                         f"got {args.engines}")
    if args.skew is not None:
        from keyshift.workloads import SkewSchedule, WorkloadInputError

        try:
            SkewSchedule.parse(args.skew)
        except WorkloadInputError as exc:
            raise UsageError(f"--{exc}") from None
    return policy, app


class _Stop(Exception):
    pass


@one_line_failure("demo")
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    policy, app = _validate(args, cfg)
    if args.planner or args.seed_history:
        cfg = cfg.model_copy(update={"planner": cfg.planner.model_copy(update={"enabled": True})})
    # each demo has a topic of its own: one workload for all of them, so the champions a
    # --seed-history demo trained are the next demo's too (keyshift.workload_names)
    cfg = with_workload(cfg, app, f"{cfg.kafka.topic}-demo")
    say = say_line if args.json else functools.partial(say_line, file=sys.stdout)
    run_id = time.strftime("demo-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]

    from keyshift.streaming.broker import Broker
    from keyshift.streaming.kafka_client import BrokerError, client_options, create_topic
    from keyshift.streaming.commands.run import start_job, stop_job
    from keyshift.streaming.job import JobOptions

    broker = Broker.from_config(cfg)
    started_broker = False
    stop = threading.Event()
    job = None
    try:
        try:
            was_up = broker.healthy(timeout_s=3)
            say(f"broker: {broker.start()}")
            started_broker = not was_up
            topic = f"{cfg.kafka.topic}-{run_id}"
            say(create_topic(cfg.kafka.bootstrap, topic, cfg.kafka.partitions,
                             security=client_options(cfg.kafka)))
        except BrokerError as exc:
            raise UsageError(f"kafka: {exc}") from None
        say("starting Spark (first start resolves jars, later ones reuse the cache) ...")
        seeded = _seed(cfg, run_id, args.rate, args.log_level, say) if args.seed_history \
            else None
        # the demo is `keyshift run` on its own topic, plus a producer and a report
        job = start_job(cfg, JobOptions(app=app, policy=policy, run_id=run_id, topic=topic,
                                        engines=args.engines), args.log_level, say_line)
        return _drive(args, cfg, job, topic, stop, say, seeded)
    except KeyboardInterrupt:
        say("interrupted again: stopping without a summary ...")
        return 130
    finally:
        stop.set()
        if job is not None:  # stopped already, or a failure is on its way: not masked
            stop_job(job, timeout_s=30)
        if started_broker:
            broker.stop()


def _drive(args: argparse.Namespace, cfg, job, topic: str, stop: threading.Event, say,
           seeded: dict[str, Any] | None) -> int:
    """The producer beside the running job until it has taken what was sent (or Ctrl-C),
    the stop, then the summary and report; returns the exit status."""
    from keyshift.streaming.commands.run import query_failed, stop_failed_line, stop_job

    app, policy = job.app, job.opt.policy
    skew = args.skew or f"zipf:0.2@0,1.5@{args.duration / 3:g}"
    produced: dict[str, Any] = {}
    thread = threading.Thread(target=_produce, daemon=True, args=(
        cfg, topic, app, skew, args.rate, args.duration, stop, produced))
    t0 = time.monotonic()
    thread.start()
    scaler = ", engine scaler on" if cfg.planner.enabled else ""
    say(f"run {job.run_id}: {app} with {policy}{scaler}, {args.rate:g} events/s for "
        f"{args.duration:g} s, skew {skew}; Ctrl-C stops")
    interrupted, failed = False, None
    try:
        failed = _watch(job, thread, args.duration, say, produced)
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: stopping the producer, then the streaming job after its "
            "current batch ...")
    wall = time.monotonic() - t0
    stop.set()
    thread.join(timeout=30)
    stop_failed = stop_job(job)  # the query's failure, if any, is the one reported
    if failed:
        say_line(f"keyshift demo: {query_failed(failed, stop_failed=stop_failed)}")
        return 1
    if stop_failed:
        say_line(f"keyshift demo: {stop_failed_line(stop_failed)}")
        return 1
    if "error" in produced and not interrupted:
        raise UsageError(f"producer: {produced['error']}")
    summary = _summary(cfg, job, wall, {
        "app": app, "policy": policy, "planner": cfg.planner.enabled,
        "produced": produced.get("sent", 0), "run_dir": str(job.run_dir),
        "interrupted": interrupted, **({"seeded": seeded} if seeded else {})})
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 130 if interrupted else 0


def _summary(cfg, job, wall: float, extra: dict[str, Any]) -> dict[str, Any]:
    """The demo's summary and report: ``keyshift report``'s, with the comparison with KG
    from the run's measured loads (``vs_kg``) and the demo's own numbers (``extra``)."""
    from keyshift.control.batch_cost import kg_counterfactual, read_jsonl
    from keyshift.streaming.report import report_run
    from keyshift.streaming.runs import answer

    vs_kg = kg_counterfactual(read_jsonl(job.run_dir / "batches.jsonl"), job.groups,
                              job.per_window, job.controller.plan_for)
    extra = {**extra, **({"vs_kg": vs_kg} if vs_kg else {})}
    # read as `keyshift report` reads (without the JVM, 5 s sooner here), the job's
    # session where that path cannot
    return answer(cfg, lambda rows: report_run(
        rows, cfg, job.run_id, job.run_dir, extra["app"], wall, job.totals.records, extra),
        spark=job.spark)


def _seed(cfg, run_id: str, rate: float, log_level: str | None, say) -> dict[str, Any]:
    """``--seed-history``: champion GPs before the job starts (it loads them at its start),
    in the session the job then reuses. Any failure is one line, and the demo goes on with
    the scaler's fallback forecast: the demo shows the loop, it does not need the models.
    MLflow's and torch's chatter while training goes to the run's log, not the terminal."""
    import contextlib
    import io
    import warnings

    from keyshift.control.scaling import one_line
    from keyshift.jobs.seed import champion_line, seed_champions, seeded_models
    from keyshift.lakehouse.logs import (
        configure_spark_logging,
        log_file,
        set_session_level,
    )
    from keyshift.lakehouse.session import get_spark

    log = log_file(cfg, "run", run_id)
    configure_spark_logging(log, log_level)
    spark = get_spark(cfg, app_name=f"keyshift-{run_id}")  # its failure is the job's too
    set_session_level(spark, log_level)
    say("seeding a history of this workload and retraining the GPs on it ...")
    fallback = "; the scaler starts on the fallback forecast"
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stderr(chatter), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = seed_champions(spark, cfg, rate)
    except Exception as exc:  # noqa: BLE001 -- the demo goes on without champions
        say(f"seeding failed: {one_line(exc)}{fallback}")
        return {"status": "failed", "reason": one_line(exc)}
    finally:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(chatter.getvalue())
    say(champion_line(result) + ("" if result["status"] == "trained" else fallback))
    out = {"status": result["status"], "seconds": round(result["seconds"], 1),
           "history": result["history"]}
    if result["status"] == "trained":
        out["models"] = {which: m["version"] if m["champion_moved"] else m["previous_champion"]
                         for which, m in seeded_models(result).items()}
    else:
        out["reason"] = result["reason"]
    return out


def _produce(cfg, topic: str, app: str, skew: str, rate: float, duration: float,
             stop: threading.Event, out: dict) -> None:
    from keyshift.streaming.kafka_client import client_options
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads.events import make_generator

    gen = make_generator(app, skew=skew, seed=0, producer_id=topic[-4:])

    class Stoppable:
        def batch(self, n: int, t_s: float, now_ms: int):
            if stop.is_set():
                raise _Stop
            return gen.batch(n, t_s, now_ms)

    seen: dict[str, Any] = {}
    try:
        stats = produce(connect(cfg.kafka.bootstrap, security=client_options(cfg.kafka)),
                        topic, Stoppable(), rate=rate,
                        duration_s=duration, progress=lambda st: seen.setdefault("stats", st))
        out["sent"] = stats.sent
    except _Stop:
        # the sender was flushed and closed before _Stop left produce(): the count is final
        out["sent"] = seen["stats"].sent if "stats" in seen else 0
    except Exception as exc:  # reported by the main thread as one line
        out["error"] = repr(exc)
    finally:
        out["done"] = True


def _watch(job, thread: threading.Thread, duration: float, say, produced: dict) -> str | None:
    """Wait until the producer is done and the job has taken everything it sent (the job
    prints one line per batch meanwhile); returns the query's failure, if it failed."""
    t0 = time.monotonic()
    while True:
        failure = job.lifecycle.failure()
        if failure is not None:
            return failure
        t = job.totals
        if produced.get("done"):
            sent = produced.get("sent", 0)
            if "error" in produced or t.records >= sent:
                return None
            if time.monotonic() - t0 > duration + 600:
                say(f"stopping with {sent - t.records} records not yet consumed")
                return None
        time.sleep(0.5)


def kg_line(vs_kg: dict[str, Any]) -> str:
    return (f"busiest engine's load vs KG on the same input: {vs_kg['busiest_vs_kg']:.2f}x "
            f"(floor {vs_kg['floor_vs_kg']:.2f}x) over {vs_kg['windows']} windows; "
            f"{vs_kg['basis']}")


def _print_summary(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"keyshift demo {s['run_id']} ({s['app']}, {s['policy']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in ("records", "valid", "dead_letters", "processed", "complex_events", "batches",
              "migrations", "moved_groups", "moved_bytes", "rstd_mean", "rstd_max",
              "events_per_s", "batch_p50_s", "batch_p95_s", "engines_min", "engines_max",
              "engines_final", "scale_actions"):
        v = s[k]
        table.add_row(k, f"{v:.2f}" if isinstance(v, float) else str(v))
    console = Console()
    console.print(table)
    if s.get("vs_kg"):
        console.print(kg_line(s["vs_kg"]))
    from keyshift.control.batch_cost import cost_lines

    for line in cost_lines(s):
        console.print(line)
    console.print(f"report: {s['report']}\nwarehouse: {s['warehouse']}")
