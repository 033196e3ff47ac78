"""Soak: a long `keyshift run` at a steady rate with migrations; memory, stores and latency must stay flat.

Issue 16 item 5. A private broker (free ports, temporary home) gets one topic; ``keyshift
produce`` sends wordcount events to it at ``--rate`` events/s for ``--duration`` seconds,
with a Zipf exponent that alternates between 0.2 and 1.5 every ``--shift-s`` seconds, each
1.5 phase on another hot set (the skew's ``+R`` rotation), so DLB-H keeps migrating
groups. ``keyshift run --policy dlb-h`` reads it with a ``--trigger-s`` trigger, a
subprocess as a user starts it. Every ``--sample-s`` seconds the bench records, from outside the job:

* driver RSS: the ``keyshift run`` process and its JVM (in ``local[*]`` the executors live
  in that JVM too), and Python worker RSS: the ``pyspark.daemon`` / worker processes of its
  tree;
* engine store bytes: the run's durable changelog (``<warehouse>/_engine_state/<run>``)
  and the executors' caches (``keyshift-engines/<run>`` under Spark's local dirs);
* files staged and not yet committed (``<warehouse>/_runs/<run>/staged``);
* Delta files per table (data ``*.parquet`` and ``_delta_log/*.json``);
* batches and events read so far, how far the job is behind the producer (``--rate`` × time
  − events read: flat when it keeps up), the p95 of the batches since the previous sample
  (the job's ``batches.jsonl``), and migrations so far (batches that moved groups).

One row per sample as it is taken, a table at the end, and a FLATNESS line per series: the
Theil–Sen slope (robust to one odd sample) over the samples after ``--warmup-s``, per minute
and as % of their mean, judged FLAT when |slope| × the minutes those samples span <
``--tolerance`` (10 %) of their mean. Delta file counts, batches and migrations grow by
design (until table maintenance compacts the tables): their growth per minute is printed, not
judged. At the end the job gets SIGTERM (its clean stop between batches), then the broker
stops; the raw numbers stay in the bench's home (``soak.json``), which is printed.

    .venv/bin/python bench/bench_soak.py                                   # 30 minutes
    .venv/bin/python bench/bench_soak.py --duration 180 --sample-s 15 --warmup-s 60
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_stream's helpers, also when imported by a test

from bench_stream import config_env, keyshift_exe, parse_run_json, percentile

PARTITIONS = 4
LOW, HIGH = 0.2, 1.5  # the alternating Zipf exponents
ROTATE = 97  # keys the hot set moves on between two high phases
# series that only grow while the job runs (Delta files until maintenance compacts them)
GROWING = ("batches", "events", "migrations")


# --- pure helpers (tests/test_bench_soak.py) --------------------------------------------
def shifting_skew(duration_s: float, shift_s: float, low: float = LOW,
                  high: float = HIGH, rotate: int = ROTATE) -> str:
    """A ``--skew`` schedule that alternates ``low`` and ``high`` every ``shift_s`` seconds
    over ``duration_s``, each ``high`` phase on another hot set (ranks rotated ``rotate``
    keys further each time): each switch changes which groups are loaded, so DLB-H has to
    migrate again and again in one run (with one hot set, one rebalance serves every phase)."""
    if shift_s <= 0 or duration_s <= 0:
        raise ValueError(f"shift_s and duration_s must be > 0, got {shift_s}, {duration_s}")
    steps, t, i = [], 0.0, 0
    while t < duration_s:
        if i % 2 == 0:
            steps.append(f"{low:g}@{t:g}")
        else:
            steps.append(f"{high:g}@{t:g}" + (f"+{rotate * (i // 2)}" if i // 2 else ""))
        t += shift_s
        i += 1
    return "zipf:" + ",".join(steps)


@dataclass(frozen=True)
class Flatness:
    """One series' trend after the warm-up: ``verdict`` is FLAT, GROWS, SHRINKS,
    ``grows by design`` or ``n/a (...)``."""

    series: str
    samples: int
    span_min: float
    mean: float
    slope_per_min: float
    verdict: str

    @property
    def slope_pct_of_mean(self) -> float:
        return 100.0 * self.slope_per_min / self.mean if self.mean else math.nan


def flatness(series: str, t_min: Sequence[float], ys: Sequence[float], warmup_min: float,
             tolerance: float = 0.10, by_design: bool = False) -> Flatness:
    """The rule of the issue's target "flat after the first 5 minutes": fit a line to the
    samples at or after ``warmup_min``; the series is FLAT when the fitted change over the
    span those samples cover, |slope| × span, is under ``tolerance`` × their mean. The
    Theil–Sen slope (median of the pairwise slopes), not least squares or first-versus-last,
    so that one noisy sample (a GC, a minute whose batches migrated) does not decide while a
    steady leak does. ``by_design`` series (Delta files, counters) get their slope and no
    verdict."""
    import numpy as np
    from scipy.stats import theilslopes

    pts = [(t, y) for t, y in zip(t_min, ys, strict=True) if t >= warmup_min]
    if len(pts) < 3:
        return Flatness(series, len(pts), 0.0, math.nan, math.nan,
                        f"n/a ({len(pts)} samples after the warm-up, need 3)")
    t = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)
    slope = float(theilslopes(y, t).slope)
    span = float(t[-1] - t[0])
    mean = float(y.mean())
    if by_design:
        verdict = "grows by design"
    elif abs(slope) * span <= tolerance * abs(mean):
        verdict = "FLAT"
    else:
        verdict = "GROWS" if slope > 0 else "SHRINKS"
    return Flatness(series, len(pts), span, mean, slope, verdict)


def new_batches(text: str, seen: int) -> tuple[list[dict[str, Any]], int]:
    """The batch records of ``batches.jsonl`` (its ``text``) after the first ``seen``
    complete lines, and the new count; a last line without its newline (the job is writing
    it) waits for the next sample."""
    complete = text.split("\n")[:-1]
    records = [json.loads(ln) for ln in complete[seen:] if ln.strip()]
    return records, max(seen, len(complete))


# --- what one sample reads ------------------------------------------------------------
def tree_bytes(root: Path) -> tuple[int, int]:
    """Bytes and files under ``root`` (0, 0 when it does not exist); files that vanish while
    walking (a compaction, a commit) are skipped."""
    total = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return total, files


def cache_folders(spark_local: Path, run_id: str) -> list[Path]:
    """The executors' engine caches of the run: ``keyshift-engines/<run>`` under Spark's
    per-application files folder (inside ``spark.local.dir``), or under the temp dir where
    a task ran without one (keyshift.streaming.engine_state.cache_root)."""
    found = [Path(folder) / run_id for folder, dirs, _ in os.walk(spark_local)
             if Path(folder).name == "keyshift-engines" and run_id in dirs]
    fallback = Path(tempfile.gettempdir()) / "keyshift-engines" / run_id
    return found + ([fallback] if fallback.is_dir() else [])


def delta_files(warehouse: Path) -> dict[str, dict[str, int]]:
    """Per Delta table of the warehouse: its data files and its commit files."""
    out: dict[str, dict[str, int]] = {}
    if not warehouse.is_dir():
        return out
    for table in sorted(p for p in warehouse.iterdir()
                        if p.is_dir() and not p.name.startswith("_")
                        and (p / "_delta_log").is_dir()):
        parquet = sum(1 for folder, _, names in os.walk(table) if "_delta_log" not in folder
                      for n in names if n.endswith(".parquet"))
        commits = sum(1 for n in os.listdir(table / "_delta_log") if n.endswith(".json"))
        out[table.name] = {"parquet": parquet, "log_json": commits}
    return out


def rss_split(pid: int) -> tuple[int, int]:
    """RSS bytes of the process tree of ``pid``: (driver: the process, its JVM and anything
    else that is not Python worker; workers: ``pyspark.daemon`` / ``pyspark.worker``
    processes and their children)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    workers: set[int] = set()
    for p in procs:
        try:
            cmd = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            workers.add(p.pid)
            try:
                workers.update(c.pid for c in p.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
    driver = worker = 0
    for p in procs:
        try:
            rss = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        if p.pid in workers:
            worker += rss
        else:
            driver += rss
    return driver, worker


@dataclass
class Sample:
    t_min: float
    driver_rss_mb: float
    worker_rss_mb: float
    state_durable_mb: float
    state_cache_mb: float
    staged_files: int
    delta_parquet: int
    delta_log_json: int
    batches: int
    events: int
    behind: int
    batch_p95_s: float
    migrations: int
    tables: dict[str, dict[str, int]] = field(default_factory=dict)


class Sampler:
    """Reads one run's numbers from outside the job, as the sample loop calls it."""

    def __init__(self, pid: int, home: Path, warehouse: Path, run_id: str,
                 rate: float) -> None:
        self.pid, self.home, self.warehouse, self.run_id = pid, home, warehouse, run_id
        self.rate = rate
        self.batches_file = home / "runs" / run_id / "batches.jsonl"
        self.seen = self.batches = self.events = self.migrations = 0

    def take(self, t_min: float) -> Sample:
        driver, worker = rss_split(self.pid)
        durable, _ = tree_bytes(self.warehouse / "_engine_state" / self.run_id)
        cache = sum(tree_bytes(p)[0] for p in cache_folders(self.home / "spark-local",
                                                              self.run_id))
        _, staged = tree_bytes(self.warehouse / "_runs" / self.run_id / "staged")
        tables = delta_files(self.warehouse)
        text = self.batches_file.read_text() if self.batches_file.is_file() else ""
        fresh, self.seen = new_batches(text, self.seen)
        self.batches += len(fresh)
        # input events as bench_stream.read_batches counts them (a restored task read none)
        self.events += sum(int(t.get("events", 0)) for b in fresh for t in b.get("tasks", [])
                           if not t.get("restore"))
        self.migrations += sum(1 for b in fresh if b.get("moved_groups", 0) > 0)
        mb = 1024 * 1024
        return Sample(
            t_min=round(t_min, 3), driver_rss_mb=driver / mb, worker_rss_mb=worker / mb,
            state_durable_mb=durable / mb, state_cache_mb=cache / mb, staged_files=staged,
            delta_parquet=sum(t["parquet"] for t in tables.values()),
            delta_log_json=sum(t["log_json"] for t in tables.values()),
            batches=self.batches, events=self.events,
            behind=max(0, round(self.rate * t_min * 60) - self.events),
            batch_p95_s=percentile([float(b["duration_s"]) for b in fresh], 95),
            migrations=self.migrations, tables=tables)


# --- the report ------------------------------------------------------------------------
SERIES = ("driver_rss_mb", "worker_rss_mb", "state_durable_mb", "state_cache_mb",
          "staged_files", "batch_p95_s", "behind", "delta_parquet", "delta_log_json",
          "batches", "events", "migrations")
HEAD = {"driver_rss_mb": "driver MB", "worker_rss_mb": "workers MB",
        "state_durable_mb": "state MB", "state_cache_mb": "cache MB", "staged_files": "staged",
        "batch_p95_s": "p95 s", "behind": "behind", "events": "events", "delta_parquet": "parquet", "delta_log_json": "log json",
        "batches": "batches", "migrations": "migr."}


def row_text(s: Sample) -> str:
    return (f"{s.t_min:6.1f} min  driver {s.driver_rss_mb:7.1f} MB  workers "
            f"{s.worker_rss_mb:7.1f} MB  state {s.state_durable_mb:6.2f} MB  cache "
            f"{s.state_cache_mb:6.2f} MB  staged {s.staged_files:4d}  parquet "
            f"{s.delta_parquet:5d}  log {s.delta_log_json:5d}  batches {s.batches:5d}  "
            f"events {s.events:8d}  behind {s.behind:6d}  p95 {s.batch_p95_s:5.2f}s  "
            f"migrations {s.migrations}")


def judge(samples: Sequence[Sample], warmup_min: float, tolerance: float) -> list[Flatness]:
    t = [s.t_min for s in samples]
    # p95 of an interval without batches is 0 (a stall): kept, it is what happened
    return [flatness(name, t, [float(getattr(s, name)) for s in samples], warmup_min,
                     tolerance, by_design=name.startswith("delta_") or name in GROWING)
            for name in SERIES]


def flatness_line(f: Flatness, tolerance: float) -> str:
    if f.verdict.startswith("n/a"):
        return f"FLATNESS {f.series}: {f.verdict}"
    rule = ("Delta files grow by design until table maintenance compacts them"
            if f.series.startswith("delta_") else "a counter")
    if f.verdict == "grows by design":
        return (f"FLATNESS {f.series}: {f.slope_per_min:+,.2f}/min over {f.span_min:.1f} min "
                f"({f.samples} samples; {rule}, not judged)")
    return (f"FLATNESS {f.series}: slope {f.slope_per_min:+.4g}/min = "
            f"{f.slope_pct_of_mean:+.2f} %/min of its mean {f.mean:.4g}, over "
            f"{f.span_min:.1f} min, {f.samples} samples: "
            f"{f.verdict} (rule: |slope| x {f.span_min:.1f} min "
            f"{'<=' if f.verdict == 'FLAT' else '>'} {tolerance:.0%} of the mean)")


def print_table(console, samples: Iterable[Sample]) -> None:
    from rich.table import Table

    table = Table(title="soak samples")
    table.add_column("min", justify="right")
    for name in SERIES:
        table.add_column(HEAD[name], justify="right")
    for s in samples:
        table.add_row(f"{s.t_min:.1f}", *[
            f"{getattr(s, n):.2f}" if isinstance(getattr(s, n), float) else
            str(getattr(s, n)) for n in SERIES])
    console.print(table)


# --- the run ---------------------------------------------------------------------------
def stop(proc: subprocess.Popen, timeout_s: float) -> int:
    """SIGTERM (the job's clean stop between batches), SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    ap.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--warmup-s", type=float, default=300.0,
                    help="samples before this are not judged (default 300)")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="FLAT when |slope| x span < this fraction of the mean (0.10)")
    ap.add_argument("--rate", type=float, default=300.0, help="events/s (default 300)")
    ap.add_argument("--shift-s", type=float, default=180.0,
                    help=f"seconds between switches of the Zipf exponent ({LOW:g} <-> {HIGH:g})")
    ap.add_argument("--trigger-s", type=float, default=2.0, help="micro-batch trigger (2)")
    ap.add_argument("--window-s", type=float, default=10.0,
                    help="controller statistic window: DLB-H may rebalance once per window")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--groups", type=int, default=4096)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", dest="json_out", default=None,
                    help="also write the raw numbers here (always: <home>/soak.json)")
    args = ap.parse_args(argv)
    for name in ("duration", "sample_s", "rate", "shift_s", "trigger_s", "window_s",
                 "tolerance"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')}: must be > 0")
    if args.warmup_s < 0:
        ap.error("--warmup-s: must be >= 0")
    for name in ("engines", "groups"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: must be >= 1")
    if args.sample_s > args.duration:
        ap.error("--sample-s: longer than --duration, no sample would be taken")

    from rich.console import Console

    from keyshift.config import load_config
    from keyshift.streaming.broker import Broker, create_topic, free_port

    console = Console(width=200)
    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-soak-"))
    port = free_port()
    controller_port = free_port()
    while controller_port == port:
        controller_port = free_port()
    overrides = {
        "home": str(home),
        "groups": {"count": args.groups},
        "kafka": {"port": port, "controller_port": controller_port},
        "spark": {"master": args.master, "trigger_s": args.trigger_s},
        "controller": {"window_s": args.window_s},
    }
    cfg = load_config(env={}, **overrides)
    warehouse = cfg.warehouse_path
    env = config_env(overrides)
    topic = f"soak-{uuid.uuid4().hex[:6]}"
    run_id = f"soak-{uuid.uuid4().hex[:6]}"
    skew = shifting_skew(args.duration, args.shift_s)
    logs = home / "logs"
    logs.mkdir()
    broker = Broker.from_config(cfg)
    console.print(f"soak: broker {broker.start()}; home {home}")
    samples: list[Sample] = []
    producer = job = None
    summary: dict[str, Any] = {}
    failure = ""
    outs = {name: logs / name for name in ("run.out", "run.log", "produce.log")}
    with (open(outs["run.out"], "w") as run_out, open(outs["run.log"], "w") as run_log,
          open(outs["produce.log"], "w") as produce_log):
        try:
            create_topic(cfg.kafka.bootstrap, topic, PARTITIONS)
            # stdout to a file, not a pipe: a run of hours would fill a pipe nobody reads
            job = subprocess.Popen(
                [keyshift_exe(), "run", "--app", "wordcount", "--topic", topic,
                 "--policy", "dlb-h", "--engines", str(args.engines), "--run-id", run_id,
                 "--json"], stdout=run_out, stderr=run_log, env=env)
            producer = subprocess.Popen(
                [keyshift_exe(), "produce", "--app", "wordcount", "--topic", topic,
                 "--rate", f"{args.rate:g}", "--duration", f"{args.duration:g}",
                 "--skew", skew, "--seed", str(args.seed), "--no-progress"],
                stdout=produce_log, stderr=subprocess.STDOUT, env=env)
            console.print(f"soak: run {run_id} (dlb-h, {args.engines} engines, trigger "
                          f"{args.trigger_s:g}s) on {topic}, {args.rate:g} events/s for "
                          f"{args.duration:g}s, skew {LOW:g}<->{HIGH:g} every "
                          f"{args.shift_s:g}s; a sample every {args.sample_s:g}s")
            sampler = Sampler(job.pid, home, warehouse, run_id, args.rate)
            t0 = time.monotonic()
            next_at = args.sample_s
            while next_at <= args.duration + 1e-9:
                time.sleep(max(0.0, t0 + next_at - time.monotonic()))
                if job.poll() is not None:
                    failure = f"keyshift run exited {job.returncode} after {next_at / 60:.1f} min"
                    break
                samples.append(sampler.take((time.monotonic() - t0) / 60))
                console.print(row_text(samples[-1]), highlight=False)
                next_at += args.sample_s
        except KeyboardInterrupt:
            failure = "interrupted"
        finally:
            if job is not None and (code := stop(job, timeout_s=300)) != 0 and not failure:
                failure = f"keyshift run exited {code} at its stop"
            if producer is not None:
                stop(producer, timeout_s=30)
            broker.stop()
    if job is not None and job.returncode == 0:
        try:
            summary = parse_run_json(outs["run.out"].read_text())
        except ValueError as exc:
            failure = failure or str(exc)

    warmup_min = args.warmup_s / 60
    verdicts = judge(samples, warmup_min, args.tolerance)
    print_table(console, samples)
    for f in verdicts:
        console.print(flatness_line(f, args.tolerance), highlight=False)
    if summary:
        console.print(f"soak: the job read {summary.get('events_in', 0):,} events in "
                      f"{summary.get('batches', 0)} batches, {summary.get('migrations', 0)} "
                      f"migrations ({summary.get('moved_groups', 0)} groups), "
                      f"{summary.get('dead_letter', 0)} dead letters; batch p95 "
                      f"{summary.get('batch_p95_s', 0):.2f}s over the run")
    raw = {"args": vars(args), "run_id": run_id, "topic": topic, "skew": skew,
           "home": str(home), "samples": [asdict(s) for s in samples],
           "flatness": [{**asdict(f), "slope_pct_of_mean": f.slope_pct_of_mean}
                        for f in verdicts],
           "summary": summary, "failure": failure}
    text = json.dumps(raw, indent=1, default=str)
    (home / "soak.json").write_text(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    console.print(f"soak: raw numbers in {home / 'soak.json'}; logs in {logs}, "
                  f"run folder {cfg.run_dir(run_id)}; warehouse {warehouse}")
    if failure:
        console.print(f"[red]soak: {failure}[/]; see {logs / 'run.log'}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
