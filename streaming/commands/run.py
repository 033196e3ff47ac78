"""``keyshift run``: the speed layer on your own topic with your own operator.

    keyshift run --app wordcount --topic clicks                     # until Ctrl-C / SIGTERM
    keyshift run --app mypkg.ops:Sessions --topic t --policy dlb-h --engines 8
    keyshift run --app wordcount --topic t --available-now --json   # backfill, then exit 0

The same ``--run-id`` resumes a run: Kafka offsets and the query's checkpoint, the engines'
durable state and the controller's plans and decisions all live under the warehouse. One
progress line per micro-batch goes to stderr; ``--json`` prints one object at the end.

Exit status: 0 done (or stopped by SIGTERM), 130 stopped by Ctrl-C, 2 bad input (one line,
before Spark starts), 1 the query failed or its stop did (the first cause is the one
reported; ``--json`` still prints the summary, with ``failed`` and ``error``), 3 records were
lost before the run read them (Kafka deleted them; ``kafka.fail_on_data_loss = false``
accepts that). Spark's own log goes to
``<home>/runs/<run id>/spark.log``; a failure is one line naming its root cause and that file.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from typing import Any, NamedTuple

from keyshift.control.batch_cost import cost_lines
from keyshift.cli import UsageError, add_config_option, add_log_options
from keyshift.config import load_config
from keyshift.lakehouse.logs import failure_line, log_hint, one_line_failure
from keyshift.lakehouse.logs import say as say_line
from keyshift.run_ids import check_run_id, run_id_arg
from keyshift.startup import StartupClock
from keyshift.streaming.executors import ResourcesError, resources_mode

SUMMARY = "run your operator on a Kafka topic, kept balanced"


def job_policies() -> list[str]:
    """The policies the job runs, shipped and installed (kinds online, fixed, from-plans,
    splitter: :data:`keyshift.policies.JOB_KINDS`)."""
    from keyshift.policies import JOB_KINDS, policy_names

    return policy_names(JOB_KINDS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", help="operator: a shipped app (fsd, traffic, clicks, wordcount, heavy), an "
                   "entry point of group keyshift.operators, or module:Class "
                   "(default: controller.app)")
    p.add_argument("--params", default="{}", help="operator parameters as a JSON object")
    p.add_argument("--py-files", metavar="FILES",
                   help="comma-separated .py, .zip or .egg files the operator needs, shipped to "
                   "the executors as with spark-submit (the operator's own module, when it is "
                   "not installed, is shipped without it)")
    p.add_argument("--topic", help="Kafka topic to read (default: kafka.topic)")
    p.add_argument("--policy", help=f"balancer: one of {', '.join(job_policies())} "
                   "(shipped, or an entry point of group keyshift.policies; default: "
                   "controller.policy)")
    p.add_argument("--planner", action="store_true",
                   help="let the engine scaler choose N as well ([planner] enabled)")
    p.add_argument("--run-id", type=run_id_arg,
                   help="names the run; the same id resumes it (default: new id)")
    p.add_argument("--engines", type=int, help="engines at start (default: engines.initial)")
    p.add_argument("--max-offsets", type=int,
                   help="most Kafka records per micro-batch (default: spark.max_offsets_per_trigger)")
    p.add_argument("--from", dest="starting", choices=("earliest", "latest"), default="earliest",
                   help="where a new run starts in the topic (default earliest)")
    p.add_argument("--available-now", action="store_true",
                   help="process what the topic holds now, then exit 0 (backfills, benchmarks)")
    p.add_argument("--duration", type=float,
                   help="stop this many seconds after the query started: the start-up before "
                   "it (said on its own line, 'start-up: ...') is not counted (default: run "
                   "until Ctrl-C or SIGTERM)")
    p.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    add_log_options(p)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", help=SUMMARY,
        description="Structured Streaming from the topic; each key group runs on one of N "
        "engines through a plan the balancer keeps even; outputs, dead letters, key loads, "
        "metrics, plans and migrations go to the Delta warehouse. Stop with Ctrl-C/SIGTERM "
        "(between batches); the same --run-id resumes.",
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def options_from(args: argparse.Namespace, cfg) -> Any:
    """Validated :class:`keyshift.streaming.job.JobOptions` (a bad value: UsageError naming the flag)."""
    from keyshift.policies import JOB_KINDS, PolicyInputError, PolicyKind, policy_info
    from keyshift.streaming.job import JobOptions

    policy = args.policy or cfg.controller.policy
    try:
        kind = policy_info(policy, JOB_KINDS, "keyshift run").kind
    except PolicyInputError as exc:
        raise UsageError(f"--{exc}") from None
    run_id = args.run_id or time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    try:  # argparse checked it (run_id_arg); a caller that built args itself did not
        check_run_id(run_id)
    except ValueError as exc:
        raise UsageError(f"--run-id: {exc}") from None
    if args.engines is not None and not cfg.engines.min <= args.engines <= cfg.engines.max:
        raise UsageError(f"--engines: must be in {cfg.engines.min}..{cfg.engines.max} "
                         f"(engines.min..engines.max), got {args.engines}")
    if args.max_offsets is not None and args.max_offsets < 1:
        raise UsageError(f"--max-offsets: must be >= 1, got {args.max_offsets}")
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration: must be > 0 seconds, got {args.duration}")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--params: not JSON ({exc})") from None
    if not isinstance(params, dict):
        raise UsageError("--params: must be a JSON object of operator parameters")
    app = args.app or cfg.controller.app
    from keyshift.streaming.code_shipping import driver_py_files  # on the driver's path first

    py_files = driver_py_files(getattr(args, "py_files", None), cfg.home_path / "pyfiles")
    _check_operator(app, params)
    if kind is PolicyKind.SPLITTER:  # split hot keys over engines (mergeable operators)
        from keyshift.streaming.job import hot_key_splitter

        try:
            hot_key_splitter(cfg, policy, app, params)
        except PolicyInputError as exc:  # "policy: dc splits ... but operator 'fsd' ..."
            raise UsageError(f"--{exc}") from None
    from keyshift.streaming.faults import phases_from_env

    try:  # the fault tests' kill hook; a production run has none
        phases = phases_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return JobOptions(app=app, policy=policy, run_id=run_id, topic=args.topic or cfg.kafka.topic,
                      engines=args.engines, app_params=params,
                      max_offsets_per_trigger=args.max_offsets,
                      available_now=args.available_now, starting_offsets=args.starting,
                      py_files=tuple(str(p) for p in py_files), phases=phases)


def _check_operator(app: str, params: dict) -> None:
    """Resolve the operator and build it once here, so a typo fails before Spark starts."""
    from keyshift.apps import event_schema, make_operator
    from keyshift.errors import FieldError

    try:
        event_schema(app)
    except (FieldError, KeyError, ValueError) as exc:
        why = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise UsageError(f"--app: {why.removeprefix('app: ')}") from None
    try:  # the operator resolved: what fails now is a parameter's
        make_operator(app, **params)
    except (FieldError, ValueError) as exc:
        raise UsageError(f"--params: {str(exc).removeprefix('params: ')}") from None


def check_topic(cfg, topic: str) -> None:
    """A broker that is down, refuses this client's TLS or SASL handshake (the certificate,
    the credentials: named, with the keys to check) or a topic that is missing: one clear
    line, before Spark."""
    from keyshift.streaming.kafka_client import (
        BrokerError,
        HandshakeError,
        client_options,
        metadata,
    )

    try:
        meta = metadata(cfg.kafka.bootstrap, timeout_s=10, security=client_options(cfg.kafka))
    except HandshakeError as exc:  # the broker is there: its address is not the problem
        raise UsageError(f"kafka: {exc}") from None
    except BrokerError as exc:
        raise UsageError(f"kafka: {exc} (kafka.host/kafka.port, or `keyshift kafka start`)") \
            from None
    if topic not in meta["topics"]:
        raise UsageError(f"--topic: no topic {topic!r} on {cfg.kafka.bootstrap} (create it, "
                         f"or pick one of: {', '.join(meta['topics'][:10]) or 'none'})")


def progress_line(r) -> str:
    """One line per micro-batch: what a person watching the run wants to see."""
    mig = (f"  migrated {r.moved_groups} groups ({r.moved_bytes / 1024:.1f} KiB)"
           if r.moved_groups else "")
    return (f"batch {r.batch_id:>5}  events {r.events:>7}  dead {r.dead_letter:>4}  "
            f"out {r.complex_events:>6}  RSTD {r.rstd:6.1f}%  engines {r.engines:>3}  "
            f"plan v{r.plan_version}  {r.duration_s:5.2f} s{mig}")


class BatchLedger:
    """This process's batches as the job reported them, by batch id: a batch the query runs
    again (started again in place after a storage outage) replaces its first account, as its
    rows replace theirs in the warehouse, so the summary counts it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: dict[int, tuple[int, int, int]] = {}

    def add(self, report) -> None:
        """One :class:`~keyshift.streaming.job.BatchReport` (the job's ``on_batch``)."""
        with self._lock:
            self._batches[int(report.batch_id)] = (
                int(report.events), int(report.dead_letter), int(report.complex_events))

    def __len__(self) -> int:
        return len(self._batches)

    def counters(self) -> dict[str, int]:
        """:func:`keyshift.streaming.report.batch_counters` of these batches (the job
        processes every valid event it routes) and their complex events."""
        from keyshift.streaming.report import batch_counters

        with self._lock:
            got = dict(self._batches)
        return {**batch_counters((b, v, d, v) for b, (v, d, _) in got.items()),
                "complex_events": sum(o for _, _, o in got.values())}


def run_summary(job, ledger: BatchLedger | None, cfg) -> dict[str, Any]:
    """``keyshift run``'s summary: the job's (timings, resources) with the counts of
    ``status`` and ``report``. Those come from the run's ``metrics`` rows in the warehouse,
    one per batch id, all of the run's processes included, so a batch a resumed run ran again
    is counted once (``counted_from``: ``warehouse``); this process's own batches, each id
    once (``ledger``; without one, the job's running totals), are under ``this_process``. A
    warehouse that cannot be read now leaves this process's counts at the top
    (``counted_from``: ``this process``)."""
    from keyshift.streaming.report import counters, metrics_counters
    from keyshift.streaming.runs import answer

    summary = job.summary()
    if ledger:
        mine = ledger.counters()
    else:
        mine = {"batches": summary["batches"], **counters(
            summary["events_in"], summary["dead_letter"], summary["processed"]),
            "complex_events": summary["complex_events"]}
    summary["this_process"] = mine
    busy = summary.get("busy_s") or 0.0
    summary["events_per_s"] = mine["processed"] / busy if busy else 0.0
    cols = ["batch_id", "events_in", "dead_letter", "processed", "out_events"]
    try:
        m = answer(cfg, lambda rows: rows.frame("metrics", job.run_id, cols),
                   spark=getattr(job, "spark", None))
        run = {**metrics_counters(m), "complex_events": int(m.out_events.sum()) if len(m) else 0}
        summary["counted_from"] = "warehouse"
    except Exception as exc:  # noqa: BLE001 -- the summary still prints, from this process
        run = mine
        summary["counted_from"] = "this process"
        summary["counted_why"] = f"the warehouse could not be read: {failure_line(exc)}"
    summary.pop("records", None)  # the job's running totals: replaced by the counts below
    summary.update(run)
    return summary


def start_job(cfg, opts, log_level: str | None = None, say=None,
              ledger: BatchLedger | None = None, startup=None):
    """The speed layer's one way to start: Spark's log to the run's folder (or from
    ``log_level`` up to the terminal), the session, the job with a progress line per batch
    (each also kept in ``ledger``, when given) and live metrics (Prometheus on ``[metrics]
    host:port`` unless the port is 0, :mod:`keyshift.streaming.live_metrics`), the query.
    ``keyshift run`` and ``keyshift demo`` both use it. ``startup`` (a
    :class:`keyshift.startup.StartupClock`) gets the phases up to the first batch."""
    from keyshift.lakehouse.logs import (
        configure_spark_logging,
        log_file,
        set_session_level,
    )
    from keyshift.streaming.live_metrics import live_metrics_for

    say = say or say_line
    configure_spark_logging(log_file(cfg, "run", opts.run_id), log_level)
    from keyshift.lakehouse.session import get_spark
    from keyshift.streaming.job import StreamJob

    spark = get_spark(cfg, app_name=f"keyshift-{opts.run_id}", startup=startup)
    set_session_level(spark, log_level)
    live = live_metrics_for(cfg, opts, say)
    failed: list[str] = []

    def on_batch(report) -> None:
        if ledger is not None:
            ledger.add(report)
        say(progress_line(report))
        if live is None:
            return
        try:
            live.observe(job, report)
        except Exception as exc:  # noqa: BLE001 -- watching the job never fails it; said once
            if not failed:
                failed.append(str(exc))
                say(f"live metrics not updated: {exc}")

    job = StreamJob(spark, cfg, opts, on_batch=on_batch, startup=startup)
    job.start()
    return job


class Ending(NamedTuple):
    """How a run ended (:func:`wait_and_stop`): the query's failure (None: none), the signals
    received, and the stop's own failure (None: it stopped cleanly) as one line."""

    failed: str | None
    signals: list[int]
    stop_failed: str | None = None


def wait_and_stop(job, duration: float | None, say) -> Ending:
    """Run until the query ends (availableNow), the duration passes, or Ctrl-C / SIGTERM,
    then stop between batches (:meth:`StreamJob.stop`); a second Ctrl-C leaves at once.

    A query that fails because the warehouse refuses writes is started again in place once
    the warehouse answers, for up to ``warehouse.outage_s`` (:meth:`StreamJob.ride_out`);
    past that, or for any other failure, the run stops. The stop commits the staged
    bookkeeping; when that fails (a warehouse gone read-only fails the query first, then
    this commit) its failure is kept apart (:func:`stop_job`), so the query's failure, the
    first cause, is the one reported."""
    stop = threading.Event()
    why: list[int] = []

    def on_signal(signum, _frame) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        why.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    deadline = time.monotonic() + duration if duration else None
    failed = None
    life = job.lifecycle  # the query across restarts of its source (query_lifecycle.py)
    try:
        while True:
            while not stop.wait(0.5):
                if life.failure() is not None:
                    break
                if not life.running() or (deadline is not None
                                          and time.monotonic() >= deadline):
                    break
            # read after the loop too: a query that failed between the two checks above is
            # inactive with its exception set, and is a failure, not an end
            failure = life.failure()
            if failure is None:
                break
            left = job.ride_out(failure, stop)
            if left is None:  # started again after a storage outage: wait on the new query
                continue
            failed = str(left)
            break
        if stop.is_set():
            say("stopping after the current batch ...")
        stop_failed = stop_job(job)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return Ending(failed, why, stop_failed)


def stop_job(job, **kwargs: Any) -> str | None:
    """``job.stop(**kwargs)``: None when it stopped cleanly, else its failure as one line
    (the traceback goes to the run's log), for the caller to report after the query's own
    failure, if any. Ctrl-C is not caught."""
    from keyshift.lakehouse.logs import log_traceback

    try:
        job.stop(**kwargs)
    except Exception as exc:  # noqa: BLE001 -- reported by the caller, second to the first cause
        log_traceback("stopping the run failed", exc)
        return failure_line(exc)
    return None


@one_line_failure("run")
def run(args: argparse.Namespace) -> int:
    startup = StartupClock()
    startup.mark("Python and keyshift's imports")
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    if args.planner:
        cfg = cfg.model_copy(update={"planner": cfg.planner.model_copy(update={"enabled": True})})
    opts = options_from(args, cfg)
    try:  # a resources setting that cannot work stops here, before Spark starts
        resources = resources_mode(cfg)
    except ResourcesError as exc:
        raise UsageError(str(exc)) from None
    check_topic(cfg, opts.topic)
    startup.mark("the config and the topic's check")
    say = say_line
    ledger = BatchLedger()
    job = start_job(cfg, opts, args.log_level, say, ledger, startup=startup)
    mode = "available now" if opts.available_now else (
        f"for {args.duration:g} s" if args.duration else "until Ctrl-C")
    held = ("engines on executors requested and released with the plan"
            if resources == "executors" else
            "Spark's dynamic allocation holds the executors" if cfg.spark.dynamic_allocation
            else "fixed resources: the engines share the cores the job holds")
    say(f"running {job.run_id}: {opts.app} on {opts.topic} with {opts.policy}"
        f"{', engine scaler on' if cfg.planner.enabled else ''}, {mode}; {held}")
    failed, why, stop_failed = wait_and_stop(job, args.duration, say)
    summary = run_summary(job, ledger, cfg)
    summary["interrupted"] = bool(why)
    # the first cause: the query's failure, else the stop's (its commit of the bookkeeping)
    summary["failed"] = bool(failed or stop_failed)
    summary["error"] = (failure_line(failed) if failed else stop_failed) or None
    if failed and stop_failed:
        summary["stop_error"] = stop_failed
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        say(f"{job.run_id}: {summary['batches']:,} batches, {summary['records']:,} records "
            f"({summary['valid']:,} valid, {summary['dead_letters']:,} dead letters), "
            f"{summary['complex_events']:,} complex events, {summary['migrations']} "
            f"migrations; {summary['events_per_s']:,.0f} events/s busy, batch p50 "
            f"{summary['batch_p50_s']:.2f} s")
        for line in cost_lines(summary):
            say(f"{job.run_id}: {line}")
    recreated = failed and data_lost(failed) and _recreated(cfg, job)
    if recreated:  # not the advice below: taking it would skip the new topic's records
        say(f"keyshift run: {recreated}." + (f" {stop_also(stop_failed)}" if stop_failed else ""))
        return 3
    if failed and data_lost(failed):
        say(f"records of topic {opts.topic} were lost: Kafka deleted them (retention, or a "
            "delete) before this run read them, and the run stops rather than skip them. To "
            "accept the loss and go on, restart it with KEYSHIFT_KAFKA__FAIL_ON_DATA_LOSS=false "
            "(kafka.fail_on_data_loss = false)."
            + (f" {stop_also(stop_failed)}" if stop_failed else ""))
        return 3
    if failed:
        say(f"keyshift run: {query_failed(failed, job.run_id, stop_failed)}")
        return 1
    if stop_failed:
        say(f"keyshift run: {stop_failed_line(stop_failed, job.run_id)}")
        return 1
    return 130 if why and why[0] == signal.SIGINT else 0


def query_failed(error: str, run_id: str | None = None, stop_failed: str | None = None) -> str:
    """The one line a failed query leaves: its root cause (first: it is why the run
    stopped), the stop's own failure after it when the stop failed too, how to go on
    (resume the run, when it can be resumed), where the log is."""
    also = f" {stop_also(stop_failed)}" if stop_failed else ""
    return f"the streaming query failed: {failure_line(error)}.{also}{_resume(run_id)}" \
           f"{log_hint()}"


def stop_also(stop_failed: str) -> str:
    """The second clause of a failure line when the stop failed as well."""
    return (f"Stopping the run failed too (its staged bookkeeping stays staged until the "
            f"run resumes): {stop_failed}.")


def stop_failed_line(stop_failed: str, run_id: str | None = None) -> str:
    """The one line of a run whose query ended well but whose stop failed (the commit of
    the staged bookkeeping): the cause, how to go on, where the log is."""
    return (f"stopping the run failed: {stop_failed}; its staged bookkeeping stays staged "
            f"until the run resumes.{_resume(run_id, 'commit it and go on')}{log_hint()}")


def _resume(run_id: str | None, to: str = "resume from the failed batch") -> str:
    return f" Fix the cause and run again with --run-id {run_id} to {to}." if run_id else ""


def _recreated(cfg, job) -> str | None:
    """Why the run's topic cannot be read on, when Spark's lost records are a recreated
    topic's (streaming/source_resume.py)."""
    from keyshift.streaming.source_resume import topic_recreated

    return topic_recreated(cfg, job.run_id, job.topic, job.checkpoint, job.run_uri)


def data_lost(error: str) -> bool:
    """Whether the query failed because Kafka no longer holds offsets it had to read
    (Spark's KAFKA_DATA_LOSS errors, raised with failOnDataLoss=true)."""
    return "KAFKA_DATA_LOSS" in error or "Some data may have been lost" in error


def main(argv: list[str] | None = None) -> int:
    """``python -m keyshift.streaming.commands.run ARGS``: ``keyshift run`` without the CLI's plugin
    loader (the crash and cluster tests start the job this way)."""
    p = argparse.ArgumentParser(prog="python -m keyshift.streaming.commands.run")
    add_arguments(p)
    add_config_option(p)  # keyshift's top-level parser holds it for `keyshift run`
    p.set_defaults(config=None)
    args = p.parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"keyshift run: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
