"""Elasticity that a user pays for, head to head on one rate ramp (issue 41, item 5).

A standalone cluster on this machine (``--workers`` workers of 1 core each, the master's own
API as the judge of what an application holds) and a private Kafka broker. Every system reads
its own topic, filled live by one producer following the same rate schedule (``--rate``,
default low -> high -> low) with the same pre-generated events of the CPU-heavy ``heavy``
operator (``--work-us`` of hash chain per event: one executor carries the trough, not the
peak, and two carry the peak: on this machine one 1-core executor takes ~57 events/s of
``heavy`` at 10 ms and two take ~80/s, beside the broker, driver and producer, so the default
peak is 70/s). Systems, each a ``keyshift run`` on the cluster but the last:

* **keyshift-planner**: the engine scaler on, engines on executors (``planner.resources =
  "executors"``): the plan's N decides the executors held (requested and released);
* **keyshift-planner-fixed-reads**: the same with ``spark.admission = "off"``: every batch
  may read ``max_offsets_per_trigger`` (issue 56's "before": with the shipped 20,000 a
  backlog becomes one batch of minutes);
* **static-max** / **static-min**: KG on the most / fewest engines, executors held to match;
* **spark-da**: KG on the most engines with the planner off and Spark's own dynamic
  allocation (shuffle tracking), its default idle timeout (60 s) and, as
  **spark-da-idle5**, one tuned setting (5 s).
* **spark-apws-da** (issue 41's system e): plain Spark, ``applyInPandasWithState`` per key
  running the same ``heavy`` rule (``bench_floor.py peer --system apws``), under the same
  dynamic allocation (default idle timeout); its outputs must equal keyshift's.

Measured by the bench itself, not taken from a system's report: the cores the master says
the application holds, sampled every second and integrated into core-seconds from the first
event sent until the run has taken every event; the Kafka lag as events sent minus events the
run's batches took (``batches.jsonl``), its maximum and its seconds above one window of
input; the run's batch p95 and scale actions (changes of the cores held). Every run's
complex events are compared with static-max's (the same events, so the same outputs:
nothing lost, nothing doubled). The targets and ratios are printed, never asserted.

    .venv/bin/python bench/bench_elastic_cluster.py                 # 5.5-min ramp, 1 repeat
    .venv/bin/python bench/bench_elastic_cluster.py --repeats 3 --json out.json
    .venv/bin/python bench/bench_elastic_cluster.py --quick         # a 3-min ramp
    .venv/bin/python bench/bench_elastic_cluster.py --defaults      # the shipped settings

``--defaults`` keeps the shipped trigger (2 s), window (10 s), ``max_offsets_per_trigger``
(20,000) and admission instead of the bench's tuned 5-s trigger and 800-record batches: what
a user gets before tuning anything (issue 56).

"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))

from bench.bench_stream import config_env, keyshift_exe, parse_run_json  # noqa: E402

PLANNER, RUN_ON, FIXED_READS, STATIC_MAX, STATIC_MIN, SPARK_DA, SPARK_DA5, APWS_DA = (
    "keyshift-planner", "keyshift-planner-run-on", "keyshift-planner-fixed-reads",
    "static-max", "static-min", "spark-da", "spark-da-idle5", "spark-apws-da")
SYSTEMS = (PLANNER, RUN_ON, FIXED_READS, STATIC_MAX, STATIC_MIN, SPARK_DA, SPARK_DA5, APWS_DA)
PLANNERS = (PLANNER, RUN_ON, FIXED_READS)
PARTITIONS = 4
WINDOW_S = 10.0  # two micro-batches: the loop decides every 10 s of input
TRIGGER_S = 5.0
MAX_OFFSETS = 800  # a backlog is taken in batches of ~8 engine-seconds, not in one long one
WARM_UP = 20  # events sent (and taken) before the ramp starts: the run's cold first batch


# --- what each system runs with ------------------------------------------------------------
def system_settings(system: str, workers: int) -> tuple[str, int, dict[str, Any]]:
    """(policy, starting engines, config overrides) of one system on ``workers`` 1-core
    executors at most."""
    lo, hi = 1, workers
    engines = {"min": lo, "initial": lo, "max": hi}
    if system in PLANNERS:
        # run-on: a scale-out's first batch runs at once on the old core, not after the wait
        settings: dict[str, Any] = {"engines": engines, "planner": {
            "enabled": True, "resources": "executors", "min_engines": lo, "max_engines": hi,
            "overrule_windows": 2, "target_utilisation": 0.8,
            "wait_for_executors": system != RUN_ON}}
        if system == FIXED_READS:
            settings["spark"] = {"admission": "off"}
        return "kg", lo, settings
    if system in (STATIC_MAX, STATIC_MIN):
        n = hi if system == STATIC_MAX else lo
        return "kg", n, {"engines": {"min": 1, "initial": n, "max": hi},
                         "planner": {"resources": "executors"}}
    if system in (SPARK_DA, SPARK_DA5, APWS_DA):
        idle = 5.0 if system == SPARK_DA5 else 60.0
        return "kg", hi, {"engines": {"min": 1, "initial": hi, "max": hi},
                          "planner": {"resources": "fixed"},
                          "spark": {"dynamic_allocation": True,
                                    "dynamic_allocation_idle_s": idle}}
    raise ValueError(f"unknown system {system!r}")


# --- the measurements ----------------------------------------------------------------------
@dataclass
class Samples:
    """One run's time series, one row a second: (t, cores held, events sent, events taken)."""

    t: list[float] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)


def integrate(t: Sequence[float], values: Sequence[float]) -> float:
    """∫ values dt with each value held until the next sample (left Riemann sum)."""
    return float(sum(v * (b - a) for a, b, v in zip(t, t[1:], values, strict=False)))


def lag_stats(s: Samples, rate_at, window_s: float) -> tuple[float, float]:
    """(max lag in events, seconds the lag was above one window of the input at the time)."""
    lags = [max(a - b, 0) for a, b in zip(s.sent, s.taken, strict=True)]
    if not lags:
        return 0.0, 0.0
    above = [1.0 if lag > rate_at(t - s.t[0]) * window_s else 0.0
             for t, lag in zip(s.t, lags, strict=True)]
    return float(max(lags)), integrate(s.t, above)


def reaction(s: Samples, steps: Sequence[tuple[float, float]]) -> dict[str, float] | None:
    """What a scale-out that follows the rise can do at best, measured on one run: the
    seconds from the ramp's rise to the first core added (``reaction_s``), the backlog then
    (``backlog``), what the run took per second from 30 s after that to the fall
    (``capacity``) against the ``peak`` rate, and so the seconds that backlog needs to drain
    (``drain_s``; inf when the capacity does not exceed the peak). None without a rise or
    without a scale-out after it."""
    rise = next(((t, r) for (t0, r0), (t, r) in zip(steps, steps[1:]) if r > r0), None)
    if rise is None or not s.t:
        return None
    t_rise, peak = rise
    t_fall = next((t for t, r in steps if t > t_rise and r < peak), float("inf"))
    rel = [t - s.t[0] for t in s.t]
    base = next((c for t, c in zip(rel, s.cores) if t >= t_rise), None)
    out = next((i for i, (t, c) in enumerate(zip(rel, s.cores)) if t >= t_rise
                and base is not None and c > base), None)
    if out is None:
        return None
    span = [i for i, t in enumerate(rel) if rel[out] + 30 <= t <= t_fall]
    if len(span) < 2:
        return None
    a, b = span[0], span[-1]
    capacity = (s.taken[b] - s.taken[a]) / (rel[b] - rel[a])
    backlog = max(s.sent[out] - s.taken[out], 0)
    drain = backlog / (capacity - peak) if capacity > peak else float("inf")
    return {"reaction_s": rel[out] - t_rise, "backlog": float(backlog), "capacity": capacity,
            "peak": peak, "drain_s": drain}


def scale_actions(cores: Sequence[int]) -> int:
    """Changes of the cores held (each request or release the master carried out)."""
    return sum(1 for a, b in zip(cores, cores[1:], strict=False) if a != b)


@dataclass
class RunResult:
    system: str
    repeat: int
    core_seconds: float
    seconds: float
    cores_min: int
    cores_max: int
    events_sent: int
    events_in: int
    complex_events: int
    outputs_digest: str
    lag_max: float
    lag_seconds: float
    batch_p95_s: float
    scale_actions: int
    keyshift_core_seconds: float | None
    source_restarts: int = 0  # the read bound's restarts of the query in place
    read_limit: int | None = None  # the bound at the end
    startup: dict[str, float] | None = None  # the run's time to its first batch, by phase
    check: str = ""
    reaction: dict[str, float] | None = None

    def row(self) -> dict[str, Any]:
        return asdict(self)


def master_cores(ui_url: str) -> int:
    """Cores every running keyshift application holds, as the master's ``/json/`` says."""
    import urllib.request

    with urllib.request.urlopen(f"{ui_url}/json/", timeout=3) as r:
        state = json.load(r)
    return sum(int(a.get("cores", 0)) for a in state.get("activeapps", [])
               if str(a.get("name", "")).startswith("keyshift"))


def taken_events(run_dir: Path) -> int:
    peer = run_dir / "taken"  # a plain Spark peer's count (bench_floor.py peer)
    if peer.is_file():
        text = peer.read_text().strip()
        return int(text) if text.isdigit() else 0
    path = run_dir / "batches.jsonl"
    if not path.is_file():
        return 0
    total = 0
    for line in path.read_text().splitlines():
        if line.strip():
            b = json.loads(line)
            total += sum(int(t.get("events", 0)) for t in b.get("tasks", [])
                         if not t.get("restore"))
    return total


def outputs_digest(home: Path, run_id: str, table: Path | None = None) -> tuple[int, str]:
    """The run's complex events (count, digest of the sorted set) from its Delta table
    (a peer's own ``table``)."""
    cols = ["key", "kind", "detail", "event_id"]
    if table is not None:
        from deltalake import DeltaTable

        rows = DeltaTable(str(table)).to_pyarrow_table(columns=cols)
    else:
        from keyshift.config import load_config
        from keyshift.lakehouse.delta_arrow import read_arrow

        cfg = load_config(env={}, home=str(home))
        rows = read_arrow(cfg, "events_out", run_id, cols)
    got = sorted(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True))
    return len(got), hashlib.sha256(json.dumps(got).encode()).hexdigest()[:16]


# --- the input -----------------------------------------------------------------------------
class Pregenerated:
    """The same events for every system (ids and words fixed by the seed), stamped with the
    time they are sent; the producer's generator protocol."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.i = 0

    def batch(self, n: int, t_s: float, now_ms: int) -> list[dict[str, Any]]:
        out = [dict(e, ts=now_ms) for e in self.events[self.i:self.i + n]]
        self.i += len(out)
        return out


def make_events(total: int, seed: int, keys: int) -> list[dict[str, Any]]:
    from keyshift.workloads import make_generator

    gen = make_generator("heavy", keys=keys, skew="uniform", seed=seed, producer_id="ramp")
    return gen.batch(total, 0.0, 0)


# --- one run -------------------------------------------------------------------------------
def run_system(system: str, repeat: int, *, cluster, overrides: dict[str, Any], cfg,
               rate, duration_s: float, events: list[dict[str, Any]], work_us: float,
               workers: int, drain_s: float, say) -> RunResult:
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.producer import connect, produce

    deadline = time.monotonic() + 60
    while master_cores(cluster.ui_url) and time.monotonic() < deadline:
        time.sleep(0.5)  # the run before has left the master's list of applications
    policy, engines, settings = system_settings(system, workers)
    topic = f"ramp-{system}-{uuid.uuid4().hex[:6]}"
    create_topic(cfg.kafka.bootstrap, topic, PARTITIONS)
    run_id = f"{system}-{repeat}-{uuid.uuid4().hex[:4]}"
    home = Path(overrides["home"])
    run_dir = home / "runs" / run_id
    conf = json.loads(json.dumps(overrides))
    for section, values in settings.items():
        conf.setdefault(section, {}).update(values)
    conf["spark"]["master_ui"] = cluster.ui_url
    cmd = [keyshift_exe(), "run", "--app", "heavy", "--params",
           json.dumps({"work_us": work_us}), "--topic", topic, "--policy", policy,
           "--engines", str(engines), "--run-id", run_id, "--json"]
    if system == APWS_DA:  # plain Spark: applyInPandasWithState with the same rule
        run_dir = home / "peers" / run_id
        run_dir.mkdir(parents=True)
        cmd = [sys.executable, str(ROOT / "bench" / "bench_floor.py"), "peer", "--system",
               "apws", "--topic", topic, "--workdir", str(run_dir), "--overrides",
               json.dumps(conf), "--trigger", str(cfg.spark.trigger_s), "--max-offsets",
               str(cfg.spark.max_offsets_per_trigger), "--work-us", str(work_us)]
    log = home / f"{run_id}.log"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                            env=config_env(conf), start_new_session=True)
    s = Samples()
    sent = [WARM_UP]
    try:
        # the run is up when its first batch (of no input yet) could run: wait for the app
        deadline = time.monotonic() + 240
        while master_cores(cluster.ui_url) == 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{system}: the run did not start; {log}")
            time.sleep(0.5)
        # a few events first, taken before the ramp: every run pays its cold first batch
        # (10-17 s here) outside the measured ramp, as a long-running job has
        warm = Pregenerated(events[:WARM_UP])
        produce(connect(cfg.kafka.bootstrap), topic, warm, rate=1e6, count=WARM_UP)
        producer = connect(cfg.kafka.bootstrap)  # produce() closes the one it is given
        while taken_events(run_dir) < WARM_UP:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{system}: the warm-up batch did not run; {log}")
            time.sleep(0.5)
        ramp = Pregenerated(events[WARM_UP:])

        def send() -> None:
            def progress(stats) -> None:
                sent[0] = WARM_UP + stats.sent
            produce(producer, topic, ramp, rate=rate, duration_s=duration_s,
                    progress=progress)

        failed: list[BaseException] = []

        def guarded() -> None:
            try:
                send()
            except BaseException as exc:  # noqa: BLE001 -- the run is void, said below
                failed.append(exc)

        sender = threading.Thread(target=guarded, daemon=True)
        t0 = time.monotonic()
        sender.start()
        end = None
        while True:
            now = time.monotonic()
            s.t.append(now)
            s.cores.append(master_cores(cluster.ui_url))
            s.sent.append(sent[0])
            s.taken.append(taken_events(run_dir))
            if proc.poll() is not None:
                raise RuntimeError(f"{system}: the run ended early; {log}")
            if failed:
                raise RuntimeError(f"{system}: the producer failed: {failed[0]!r}")
            if not sender.is_alive() and s.taken[-1] >= sent[0]:
                break
            if not sender.is_alive():
                end = end or now
                if now - end > drain_s:
                    say(f"  {system}: {sent[0] - s.taken[-1]:,} events not taken "
                        f"{drain_s:.0f} s after the ramp; stopping")
                    break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
        seconds = time.monotonic() - t0
        if system == APWS_DA:
            (run_dir / "stop").touch()
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if system == APWS_DA:
        out = peer_summary(stdout)
        n_out, digest = outputs_digest(home, run_id, run_dir / "out")
    else:
        out = parse_run_json(stdout)
        n_out, digest = outputs_digest(home, run_id)
    lag_max, lag_s = lag_stats(s, rate.at, WINDOW_S)
    return RunResult(
        system=system, repeat=repeat, core_seconds=integrate(s.t, s.cores), seconds=seconds,
        cores_min=min(s.cores), cores_max=max(s.cores), events_sent=sent[0],
        events_in=int(out["events_in"]), complex_events=n_out, outputs_digest=digest,
        lag_max=lag_max, lag_seconds=lag_s, batch_p95_s=float(out["batch_p95_s"]),
        scale_actions=scale_actions(s.cores),
        keyshift_core_seconds=out.get("core_seconds"),
        source_restarts=len(out.get("source_restarts") or []),
        read_limit=out.get("read_limit"), startup=out.get("startup"),
        reaction=reaction(s, rate.steps) if system in PLANNERS else None)


def peer_summary(stdout: str) -> dict[str, Any]:
    """A plain Spark peer's run as ``keyshift run --json`` would say it: events in and the
    batch p95 (Spark's triggerExecution of the batches with input)."""
    progress = json.loads(stdout.strip().splitlines()[-1])
    data = [p for p in progress if p.get("numInputRows", 0) > 0]
    d = sorted(p["durationMs"]["triggerExecution"] / 1000 for p in data)
    p95 = d[min(len(d) - 1, int(round(0.95 * (len(d) - 1))))] if d else 0.0
    return {"events_in": sum(int(p["numInputRows"]) for p in data), "batch_p95_s": p95,
            "core_seconds": None}


# --- the report ----------------------------------------------------------------------------
def medians(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    keys = ("core_seconds", "seconds", "lag_max", "lag_seconds", "batch_p95_s",
            "scale_actions", "cores_min", "cores_max")
    out: dict[str, dict[str, float]] = {}
    for system in dict.fromkeys(r.system for r in results):
        rs = [r for r in results if r.system == system]
        out[system] = {k: float(statistics.median(getattr(r, k) for r in rs)) for k in keys}
        out[system]["runs"] = len(rs)
    return out


def bound_line(results: Sequence[RunResult]) -> list[str]:
    """Each planner's lag as its reaction bounds it (medians of its runs), in words."""
    lines = []
    for system in PLANNERS:
        rs = [r.reaction for r in results if r.system == system and r.reaction]
        if not rs:
            continue
        m = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        drain = ("never during the peak" if m["drain_s"] == float("inf")
                 else f"in ~{m['drain_s']:.0f} s")
        lines.append(
            f"bound: {system} added its core {m['reaction_s']:.0f} s after the rise, "
            f"{m['backlog']:,.0f} events behind; the scaled-out job then took "
            f"{m['capacity']:.0f} events/s against a peak of {m['peak']:g}/s, so that backlog "
            f"drains {drain}: a scale-out that reacts to the rise cannot lag less than a "
            "static maximum unless the maximum has headroom over the peak or the scale-out "
            "comes before the rise (a forecast of it)")
    return lines


def _core_ratio(a: dict[str, float], b: dict[str, float]) -> float:
    return a["core_seconds"] / b["core_seconds"] if b["core_seconds"] else float("nan")


def target_lines(med: dict[str, dict[str, float]]) -> list[str]:
    """The issue's targets against the medians, in words, for each planner that ran."""
    lines = []
    mx = med.get(STATIC_MAX)
    for name in PLANNERS:
        p = med.get(name)
        if p and mx:
            ratio = _core_ratio(p, mx)
            lag_ok = p["lag_seconds"] <= mx["lag_seconds"] + WINDOW_S
            lines.append(f"{name} / static-max core-seconds {ratio:.2f}x (target <= 0.75x: "
                         f"{'met' if ratio <= 0.75 else 'missed'}); lag seconds "
                         f"{p['lag_seconds']:.0f} vs {mx['lag_seconds']:.0f} + {WINDOW_S:g} "
                         f"({'met' if lag_ok else 'missed'})")
        for da in (SPARK_DA, SPARK_DA5, APWS_DA):
            d = med.get(da)
            if p and d:
                ratio = _core_ratio(p, d)
                lag_ok = p["lag_seconds"] <= d["lag_seconds"]
                lines.append(
                    f"{name} / {da} core-seconds {ratio:.2f}x (target <= 1.0x at no more lag "
                    f"seconds: {'met' if ratio <= 1.0 and lag_ok else 'missed'}; lag seconds "
                    f"{p['lag_seconds']:.0f} vs {d['lag_seconds']:.0f})")
    return lines


def table_text(med: dict[str, dict[str, float]]) -> str:
    head = ("| system | runs | core-seconds | cores min-max | lag max (events) | lag seconds "
            "| batch p95 (s) | scale actions | seconds |")
    rows = [head, "|---|---|---|---|---|---|---|---|---|"]
    for system, m in med.items():
        rows.append(f"| {system} | {m['runs']:.0f} | {m['core_seconds']:,.0f} | "
                    f"{m['cores_min']:.0f}-{m['cores_max']:.0f} | {m['lag_max']:,.0f} | "
                    f"{m['lag_seconds']:.0f} | {m['batch_p95_s']:.2f} | "
                    f"{m['scale_actions']:.0f} | {m['seconds']:.0f} |")
    return "\n".join(rows)


def check_outputs(results: Sequence[RunResult]) -> None:
    """Every run's complex events against static-max's of the same repeat (else the first)."""
    for r in results:
        ref = next((x for x in results if x.repeat == r.repeat and x.system == STATIC_MAX),
                   results[0])
        if r.events_in != r.events_sent:
            r.check = f"MISMATCH: {r.events_in:,} events in of {r.events_sent:,} sent"
        elif r.outputs_digest != ref.outputs_digest:
            r.check = (f"MISMATCH: {r.complex_events:,} complex events, digest "
                       f"{r.outputs_digest} vs {ref.system}'s {ref.outputs_digest}")
        else:
            r.check = "ok"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default=None,
                    help="the ramp, events/s from second T (default 20@0,70@60,20@180: one "
                    "1-core executor carries ~57/s of heavy at 10 ms, two ~80/s)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of input (default 330)")
    ap.add_argument("--work-us", type=float, default=10_000.0,
                    help="heavy's work per event, µs (one executor carries the trough only)")
    ap.add_argument("--window", type=float, default=WINDOW_S,
                    help="the control loop's statistic window (s); the lag seconds are "
                    f"always counted above {WINDOW_S:g} s of input, so runs compare")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drain", type=float, default=120.0,
                    help="seconds a run may take after the ramp to take every event")
    ap.add_argument("--quick", action="store_true", help="a 180-s ramp")
    ap.add_argument("--defaults", action="store_true",
                    help="the shipped trigger, window, max_offsets_per_trigger and admission "
                    "instead of the bench's tuned 5-s trigger and 800-record batches")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)
    from keyshift.workloads.rate import RateSchedule

    rate = RateSchedule.parse(args.rate or ("20@0,70@40,20@100" if args.quick
                                            else "20@0,70@60,20@180"))
    duration = args.duration or (180.0 if args.quick else 330.0)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        ap.error(f"--systems: unknown {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")

    from keyshift.config import load_config
    from keyshift.streaming.broker import Broker, free_port
    from keyshift.streaming.cluster import LocalCluster

    def say(line: str) -> None:
        print(line, flush=True)

    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-elastic-"))
    port, cport = free_port(), free_port()
    while cport == port:
        cport = free_port()
    events = make_events(rate.events(duration) + WARM_UP + 100, args.seed, args.keys)
    results: list[RunResult] = []
    failures: list[str] = []
    with LocalCluster(home / "cluster", workers=args.workers, cores=1, memory="1g") as cluster:
        overrides = {
            "home": str(home), "groups": {"count": 1024},
            "kafka": {"port": port, "controller_port": cport},
            "spark": {"master": cluster.master_url, "cores_max": args.workers,
                      "executor_cores": 1, "executor_memory": "768m", "driver_memory": "1g",
                      "driver_host": "127.0.0.1", "shuffle_partitions": args.workers},
            "metrics": {"port": 0},
        }
        if not args.defaults:
            overrides["spark"].update({"trigger_s": TRIGGER_S,
                                       "max_offsets_per_trigger": MAX_OFFSETS})
            overrides["controller"] = {"window_s": args.window}
        cfg = load_config(env={}, **overrides)
        broker = Broker.from_config(cfg)
        say(f"bench: broker {broker.start()}; cluster {cluster.master_url} "
            f"({args.workers} x 1 core, UI {cluster.ui_url}); home {home}")
        say(f"bench: ramp {rate.text()} for {duration:g} s ({rate.events(duration):,} events), "
            f"heavy work_us {args.work_us:g}, window {cfg.controller.window_s:g} s, trigger "
            f"{cfg.spark.trigger_s:g} s, max_offsets_per_trigger "
            f"{cfg.spark.max_offsets_per_trigger:,}, admission {cfg.spark.admission}"
            + (" (the shipped settings)" if args.defaults else " (the bench's tuned settings)"))
        try:
            for rep in range(args.repeats):
                order = systems[rep % len(systems):] + systems[:rep % len(systems)]
                for system in order:
                    say(f"run {rep + 1}/{args.repeats} {system} ...")
                    try:
                        r = run_system(system, rep, cluster=cluster, overrides=overrides,
                                       cfg=cfg, rate=rate, duration_s=duration, events=events,
                                       work_us=args.work_us, workers=args.workers,
                                       drain_s=args.drain, say=say)
                    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                        failures.append(f"{system} run {rep + 1}: {str(exc)[:300]}")
                        say(f"  FAILED: {failures[-1]}")
                        continue
                    results.append(r)
                    say(f"  {r.core_seconds:,.0f} core-s over {r.seconds:.0f} s (cores "
                        f"{r.cores_min}-{r.cores_max}, {r.scale_actions} changes), lag max "
                        f"{r.lag_max:,.0f}, lag s {r.lag_seconds:.0f}, p95 {r.batch_p95_s:.2f} s,"
                        f" {r.events_in:,}/{r.events_sent:,} events, {r.complex_events:,} "
                        f"complex (keyshift's own core-s {r.keyshift_core_seconds}; read bound "
                        f"{r.read_limit}, {r.source_restarts} restarts; start-up {r.startup})")
        finally:
            broker.stop()
    check_outputs(results)
    med = medians(results)
    say(table_text(med))
    for line in target_lines(med):
        say(line)
    for line in bound_line(results):
        say(line)
    for r in results:
        if r.check != "ok":
            say(f"{r.system} run {r.repeat + 1}: {r.check}")
    for f in failures:
        say(f"FAILED run, not in the table: {f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"args": vars(args), "rate": rate.text(), "duration_s": duration,
             "results": [r.row() for r in results], "medians": med, "failures": failures},
            indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
