"""``keyshift produce``: synthetic events at a rate with a changing skew, or a real-data replay.

    keyshift produce --app wordcount --rate 2000 --duration 60 --skew zipf:0.2@0,1.5@20,0.2@40
    keyshift produce --replay data/dublin_siri_20130131_first10k.csv --speedup 600
    keyshift produce --from bad.jsonl --raw --topic t      # each line as it is, bad ones too

The topic must exist (``keyshift kafka topic create NAME``): a typo'd name is refused with
the topics there are (exit 2), never created. Ctrl-C stops between records, flushes what was
sent and says how many (exit 130); ``--json`` prints the counts as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys

from keyshift.cli import UsageError, add_json_options, add_log_options, json_indent
from keyshift.config import load_config
from keyshift.workloads import GENERATORS, REPLAYS, SkewSchedule, WorkloadInputError
from keyshift.workloads.rate import RateSchedule

SUMMARY = "send generated or replayed events to a Kafka topic"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "produce", help=SUMMARY,
        description="Send synthetic events at a controlled rate with a key skew that can "
        "change over time, or replay a real data set with time compression.",
    )
    p.add_argument("--topic", help="Kafka topic (default: kafka.topic)")
    p.add_argument("--app", metavar="SPEC",
                   help=f"application: one of {', '.join(sorted(GENERATORS))} (default: "
                   "controller.app); with --from, any operator (name or module:Class) whose "
                   "declared event schema types the file's records")
    p.add_argument("--rate", default="1000",
                   help="events per second (default 1000), or a schedule RATE@SECONDS,...: "
                        "100@0,800@60,100@180 is 100/s, 800/s from 60 s, 100/s from 180 s "
                        "(a ramp; with it the default --duration is the last step's start + 60 s)")
    p.add_argument("--duration", type=float, help="seconds to run (default 30 unless --count)")
    p.add_argument("--count", type=int, help="send exactly this many events")
    p.add_argument("--skew", default="zipf:1.0",
                   help="key skew over time: 'uniform', 'zipf:S' or 'zipf:S@T,S@T,...' "
                        "(exponent S from second T; default zipf:1.0)")
    p.add_argument("--keys", type=int, help="size of the key domain (default: per app)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the keys, payloads and bad records (default 0)")
    p.add_argument("--producer-id", default=None, help="prefix of event ids (default: random)")
    bad = p.add_mutually_exclusive_group()
    bad.add_argument("--malformed", type=int, default=0,
                     help="mix exactly K bad records into the run (spread evenly)")
    bad.add_argument("--bad-fraction", type=float, default=0.0,
                     help="each record is bad with this probability")
    p.add_argument("--replay", metavar="FILE",
                   help="replay a real data file instead (a bare name of data/ is found there)")
    p.add_argument("--format", choices=sorted(REPLAYS), help="replay format (default: by name)")
    p.add_argument("--speedup", type=float, default=60.0, help="replay time compression")
    p.add_argument("--limit", type=int, help="replay at most this many events")
    p.add_argument("--keep-ts", action="store_true",
                   help="replay with the original event times (default: shifted to now)")
    add_from_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_options(p, "print the counts as one JSON object (no table, no progress bar)")
    add_log_options(p)
    p.set_defaults(func=run)
    return p


def add_from_options(p: argparse.ArgumentParser) -> None:
    """``--from FILE``: a user's own records (keyshift.workloads.records)."""
    g = p.add_argument_group(
        "your own events (--from)",
        "Each record of a JSON-lines or CSV file (header row = column names) is sent as one "
        "JSON event keyed by its key, at --rate, as it is (ts included). It needs id, key and "
        "ts (epoch ms); with --app its columns are typed by the operator's event schema. A "
        "record that fails is skipped and reported with its line number, the count at the "
        "end, exit status 1.")
    g.add_argument("--from", dest="from_file", metavar="FILE.jsonl|FILE.csv",
                   help="send the records of this file instead of generated events")
    g.add_argument("--raw", action="store_true",
                   help="with --from: send each line as it is, byte for byte, without a key "
                   "and without any check (malformed records on purpose; a CSV's header too)")


def _run_from_file(args: argparse.Namespace) -> int:
    """``keyshift produce --from FILE``: read and type the records (bad file or header, bad
    --app: exit 2 before anything is sent), send the good ones, report the bad ones."""
    for flag, given in (("--replay", args.replay), ("--count", args.count),
                        ("--duration", args.duration), ("--malformed", args.malformed),
                        ("--bad-fraction", args.bad_fraction), ("--keys", args.keys)):
        if given:
            raise UsageError(f"--from: does not go with {flag}")
    if args.raw:
        return _run_raw(args)
    records = _typed_records(args)
    from rich.console import Console
    from rich.table import Table

    from keyshift.lakehouse.logs import configure_python_logging, log_file
    from keyshift.streaming.producer import ProducerError, send_records

    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    configure_python_logging(log_file(cfg, "produce"), args.log_level)
    topic = args.topic or cfg.kafka.topic
    producer = connect_at_start(cfg, topic)  # broker down: UsageError, exit 2
    shown, bad_lines = 10, []

    def bad(item) -> None:  # each one named (the first 10 with why), the count at the end
        bad_lines.append(item.line)
        if len(bad_lines) <= shown:
            print(f"keyshift produce: skipped {args.from_file} {item}", file=sys.stderr)

    try:
        stats = send_records(producer, topic, records, rate=args.rate.peak, limit=args.limit,
                             on_bad=bad)
    except ProducerError as exc:
        print(f"keyshift produce: {exc}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(args, cfg, topic, stats, source=args.from_file)
    else:
        table = Table(title=f"keyshift produce: {args.from_file} → {topic} at "
                      f"{cfg.kafka.bootstrap}")
        for col in ("sent", "skipped", "failed", "seconds", "records/s"):
            table.add_column(col, justify="right")
        table.add_row(f"{stats.sent:,}", f"{stats.skipped:,}", f"{stats.failed:,}",
                      f"{stats.elapsed_s:.1f}", f"{stats.rate:,.0f}")
        Console().print(table)
    status = 0
    if stats.skipped and not stats.interrupted:
        more = (f" (lines {', '.join(map(str, bad_lines[:shown]))}, ...)"
                if len(bad_lines) > shown else "")
        print(f"keyshift produce: skipped {stats.skipped} records of {args.from_file} that "
              f"failed{more}; {stats.good} sent", file=sys.stderr)
        status = 1
    return _exit_status(stats, topic, status)


def _typed_records(args: argparse.Namespace):
    """The file's records typed by ``--app``'s event schema (none: as they are); a bad
    file, header or operator is a UsageError before anything is sent."""
    from keyshift.apps import OperatorInputError, resolve_operator
    from keyshift.workloads.records import read_records

    schema = None
    if args.app:
        try:
            schema = resolve_operator(args.app).schema
        except OperatorInputError as exc:
            raise UsageError(f"--app: {str(exc).removeprefix('app: ')}") from None
    try:
        return read_records(args.from_file, schema)
    except WorkloadInputError as exc:
        raise UsageError(f"--{exc}") from None


def _run_raw(args: argparse.Namespace) -> int:
    """``keyshift produce --from FILE --raw``: each line of the file to the topic as it is."""
    from keyshift.lakehouse.logs import configure_python_logging, log_file
    from keyshift.streaming.producer import ProducerError, send_lines

    if args.app:
        raise UsageError("--raw: sends lines unchecked; --app types records, drop one of them")
    try:
        lines = open(args.from_file, "rb")  # noqa: SIM115 -- closed below
    except OSError as exc:
        raise UsageError(f"--from: cannot read {args.from_file}: {exc.strerror}") from None
    with lines:
        cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
        configure_python_logging(log_file(cfg, "produce"), args.log_level)
        topic = args.topic or cfg.kafka.topic
        producer = connect_at_start(cfg, topic)  # broker down, no topic: UsageError, exit 2
        try:
            stats = send_lines(producer, topic, lines, rate=args.rate.peak, limit=args.limit)
        except ProducerError as exc:
            print(f"keyshift produce: {exc}", file=sys.stderr)
            return 1
    if args.json:
        _print_json(args, cfg, topic, stats, source=args.from_file, raw=True)
    else:
        print(f"keyshift produce: sent {stats.sent:,} lines of {args.from_file} as they are "
              f"to {topic} at {cfg.kafka.bootstrap} in {stats.elapsed_s:.1f} s", file=sys.stderr)
    return _exit_status(stats, topic)


def _print_json(args: argparse.Namespace, cfg, topic: str, stats, **what) -> None:
    """The run's one JSON object on stdout (``--json``)."""
    print(json.dumps({"topic": topic, "bootstrap": cfg.kafka.bootstrap, **what,
                      **stats.as_json()}, indent=json_indent(args)), flush=True)


def _exit_status(stats, topic: str, status: int = 0) -> int:
    """How a produce ends: 130 after Ctrl-C (with how many went out), 1 when records were not
    delivered (said), else ``status``."""
    if stats.interrupted:
        return _interrupted(stats, topic)
    if stats.failed:
        print(f"keyshift produce: {stats.failed} records were not delivered; first error: "
              f"{stats.first_error}", file=sys.stderr)
        return 1
    return status


def _interrupted(stats, topic: str) -> int:
    """Ctrl-C: how many records went out (flushed before this line), exit status 130."""
    lost = f"; {stats.failed:,} of them not delivered ({stats.first_error})" \
        if stats.failed else ""
    print(f"keyshift produce: interrupted after sending {stats.sent:,} records to {topic} "
          f"(flushed){lost}", file=sys.stderr, flush=True)
    return 130


def connect_at_start(cfg, topic: str):
    """A producer for ``topic``. The topic must exist: a typo'd name is refused with the
    topics there are, never created (the local broker does not create topics on first use
    either). That, and a broker that does not answer, are things missing before any work:
    :class:`UsageError`, exit status 2 (docs/platform.md, "Exit codes"), as ``keyshift run``
    says them."""
    from keyshift.streaming.kafka_client import (
        BrokerError,
        HandshakeError,
        client_options,
        metadata,
    )
    from keyshift.streaming.producer import ProducerError, connect

    try:
        topics = metadata(cfg.kafka.bootstrap, timeout_s=10,
                          security=client_options(cfg.kafka))["topics"]
    except HandshakeError as exc:
        raise UsageError(f"kafka: {exc}") from None
    except BrokerError as exc:
        raise UsageError(f"kafka: {exc} (kafka.host/kafka.port, or `keyshift kafka start`)") \
            from None
    if topic not in topics:
        import difflib

        # the names nearest the one asked for first: a typo's topic is among them even
        # where the broker holds hundreds
        near = difflib.get_close_matches(topic, topics, n=5, cutoff=0.6)
        shown = near + [t for t in sorted(topics) if t not in near][:20 - len(near)]
        more = f" and {len(topics) - len(shown)} more" if len(topics) > len(shown) else ""
        raise UsageError(
            f"--topic: no topic {topic!r} on {cfg.kafka.bootstrap}; it has "
            f"{', '.join(shown) or 'none'}{more}. Create "
            f"it with `keyshift kafka topic create {topic} --partitions N`")
    try:
        return connect(cfg.kafka.bootstrap, security=client_options(cfg.kafka))
    except ProducerError as exc:
        raise UsageError(f"kafka: {exc}") from None


def _validate(args: argparse.Namespace) -> None:
    try:
        args.rate = RateSchedule.parse(args.rate)
    except WorkloadInputError as exc:
        raise UsageError(f"--{exc}") from None
    if args.raw and not args.from_file:
        raise UsageError("--raw: sends the lines of a file; give it with --from FILE")
    if args.from_file and not args.rate.constant:
        raise UsageError("--rate: a schedule paces generated events; --from sends at one "
                         "rate (--rate N)")
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration: must be > 0 seconds, got {args.duration}")
    if args.count is not None and args.count < 1:
        raise UsageError(f"--count: must be >= 1, got {args.count}")
    if args.malformed < 0:
        raise UsageError(f"--malformed: must be >= 0, got {args.malformed}")
    if not 0.0 <= args.bad_fraction <= 1.0:
        raise UsageError(f"--bad-fraction: must be in [0, 1], got {args.bad_fraction}")
    if args.speedup <= 0:
        raise UsageError(f"--speedup: must be > 0, got {args.speedup}")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit: must be >= 1, got {args.limit}")
    if args.keys is not None and args.keys < 1:
        raise UsageError(f"--keys: must be >= 1, got {args.keys}")
    try:
        SkewSchedule.parse(args.skew)
    except WorkloadInputError as exc:
        raise UsageError(f"--{exc}") from None


def _default_duration(rate: RateSchedule) -> float:
    """30 s at a constant rate; a schedule runs a minute past its last step's start."""
    return 30.0 if rate.constant else rate.last_start + 60.0


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from keyshift.lakehouse.logs import configure_python_logging, log_file
    from keyshift.streaming.producer import ProducerError, produce, replay

    _validate(args)
    if args.from_file:
        return _run_from_file(args)
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    configure_python_logging(log_file(cfg, "produce"), args.log_level)
    topic = args.topic or cfg.kafka.topic
    console = Console(stderr=True)
    app, source, total = _source(args, cfg)
    producer = connect_at_start(cfg, topic)  # broker down: UsageError, exit 2

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}"),
        TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
        console=console, disable=args.no_progress or args.json, transient=False,
    ) as bar:
        task = bar.add_task(f"{app} → {topic}", total=total, info="")

        def show(stats) -> None:
            bar.update(task, completed=stats.sent,
                       info=f"{stats.rate:,.0f}/s bad {stats.bad_total}")

        try:
            if args.replay:
                stats = replay(producer, topic, source, speedup=args.speedup, limit=args.limit,
                               keep_ts=args.keep_ts, progress=show)
            else:
                stats = produce(producer, topic, source, rate=args.rate, duration_s=args.duration,
                                count=total, malformed=args.malformed,
                                bad_fraction=args.bad_fraction, seed=args.seed, progress=show)
        except ProducerError as exc:
            print(f"keyshift produce: {exc}", file=sys.stderr)
            return 1
        show(stats)

    if args.json:
        _print_json(args, cfg, topic, stats, **({"replay": args.replay} if args.replay
                                                else {"app": app}))
    else:
        _print_table(f"keyshift produce: {app} → {topic} at {cfg.kafka.bootstrap}", stats)
    return _exit_status(stats, topic)


def _source(args: argparse.Namespace, cfg):
    """(operator, events, how many): a replayed data set's events or a generator of the
    operator's events; a bad workload option is a UsageError before the broker is asked."""
    import uuid

    from keyshift.workloads import make_generator, replay_events

    try:
        if args.replay:
            app, events = replay_events(args.replay, args.format)
            return app, events, args.limit
        app = args.app or cfg.controller.app
        gen = make_generator(app, keys=args.keys, skew=args.skew, seed=args.seed,
                             producer_id=args.producer_id or uuid.uuid4().hex[:8])
    except WorkloadInputError as exc:
        raise UsageError(f"--{exc}") from None
    total = args.count if args.count is not None else args.rate.events(
        args.duration or _default_duration(args.rate))
    if args.malformed > total:
        raise UsageError(f"--malformed: {args.malformed} exceeds the {total} events sent")
    return app, gen, total


def _print_table(title: str, stats) -> None:
    """A produce run's counts as a table on stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("sent", "valid", "bad", "failed", "seconds", "events/s"):
        table.add_column(col, justify="right")
    bad_text = str(stats.bad_total) + (
        f" ({', '.join(f'{k} {v}' for k, v in sorted(stats.bad.items()))})" if stats.bad else "")
    table.add_row(f"{stats.sent:,}", f"{stats.good:,}", bad_text, f"{stats.failed:,}",
                  f"{stats.elapsed_s:.1f}", f"{stats.rate:,.0f}")
    Console().print(table)
