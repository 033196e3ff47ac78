"""End-to-end engines benchmark: DLB-H versus KG in the same process, same input.

For first story detection on balanced (Zipf 0.2) and skewed (Zipf 1.5) keys, each policy
consumes the same pre-produced topic; reported per (input, policy), medians over repeats:

* events/s end to end (records / wall time from the first to the last batch),
* micro-batch duration p50 / p95,
* migration batch p50 / p95 (the whole batch that releases, hands over and installs the
  moving groups' state in its one Spark job, per migrating batch) and bytes moved,
* the controller's share of batch time,

and the RATIO of DLB-H to KG measured in the same run. Targets from the brief: with skew,
DLB-H's p95 ≤ 0.8 × KG's; without skew, throughput ≥ 0.9 × KG's.

A second table splits the hot key (issue 13 item 4): word count (mergeable) on Zipf 1.5 under
KG, ``dc`` and ``wc`` on one topic, and the RATIO of each splitter's batch p95 to KG's
(target ≤ 0.8), medians over the same repeats; ``--only split`` runs just that part.

    .venv/bin/python bench/bench_engines.py            # default: 3 repeats, 30,000 events
    .venv/bin/python bench/bench_engines.py --quick    # 1 repeat, 12,000 events

Batches of 1,000 records give 30 (12 with --quick) batches per run, so a p95 is a statistic
of the run rather than its single slowest batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))

INPUTS = {"balanced (zipf 0.2)": "zipf:0.2", "skewed (zipf 1.5)": "zipf:1.5"}
POLICIES = ("kg", "dlb-h")
SPLIT_INPUT, SPLIT_POLICIES = "word count, zipf 1.5", ("kg", "dc", "wc")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stage_bound(skew: str, records: int, engines: int, groups: int, app: str = "fsd",
                split: bool = False) -> tuple[float, float]:
    """The best engine-stage ratio to KG a plan can reach: (any cores, this machine's).

    A plan that keeps each key on one engine (``split`` False) cannot make the stage shorter
    than max(hottest group, total / engines); one that splits hot keys (dc, wc) at best
    spreads everything evenly, total / engines. KG lasts as long as its most loaded engine.
    On C cores the tasks also share the CPUs: a stage lasts at least max(hottest engine,
    total/C), so with engines > C a plan gains nothing once KG's hottest engine holds less
    than 1/C of the work. Counts stand in for work (FSD's cost per event grows with its
    bucket, so the hot group's share of the work is, if anything, larger).
    """
    import numpy as np

    from keyshift.groups import group_of
    from keyshift.plan import Plan
    from keyshift.workloads.events import make_generator

    keys = [e["key"] for e in make_generator(app, skew=skew, seed=3, keys=500)
            .batch(records, 0.0, 0)]
    loads = np.bincount([group_of(k, groups) for k in keys], minlength=groups).astype(float)
    total = loads.sum()
    kg = np.bincount(Plan.hashed(groups, engines).assignment, weights=loads,
                     minlength=engines).max()
    best = total / engines if split else max(loads.max(), total / engines)
    cores = os.cpu_count() or 1
    return best / kg, max(best, total / cores) / max(kg, total / cores)


def one_run(spark, cfg, topic: str, policy: str, records: int, engines: int,
            batch: int, app: str = "fsd") -> dict:
    from keyshift.streaming.job import JobOptions, StreamJob

    job = StreamJob(spark, cfg, JobOptions(app=app, policy=policy, topic=topic,
                                           engines=engines, max_offsets_per_trigger=batch,
                                           run_id=f"bench-{policy}-{uuid.uuid4().hex[:6]}"))
    job.start()
    try:
        if not job.wait_for(records, 3600, poll_s=0.2):
            raise RuntimeError(f"{policy}: only {job.totals.records} of {records} records")
    finally:
        job.stop()
    lines = [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]
    durations = [b["duration_s"] for b in lines]
    # the engine stage's critical path: its slowest task (what key skew stretches), plus the
    # slowest input task's split work before it when a hot key is split
    slowest = [max(t["duration_s"] for t in b["tasks"] if not t.get("restore"))
               + max((t["duration_s"] for t in b.get("split_tasks", [])), default=0.0)
               for b in lines]
    pauses = [b["duration_s"] for b in lines if b["moved_groups"]]
    wall = sum(durations)
    return {
        "events_per_s": records / wall,
        "p50": pct(durations, 50), "p95": pct(durations, 95),
        "task_p95": pct(slowest, 95),
        "pause_p50": pct(pauses, 50), "pause_p95": pct(pauses, 95),
        "moved_bytes": sum(b["moved_bytes"] for b in lines),
        "moved_groups": sum(b["moved_groups"] for b in lines),
        "controller_share": sum(b["controller_s"] for b in lines) / wall,
        "engines_share": sum(b["engines_s"] for b in lines) / wall,
        "writes_share": sum(b.get("writes_s", 0.0) for b in lines) / wall,
        "batches": len(lines),
        "split_batches": sum(bool(b.get("split_groups")) for b in lines),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 repeat, 12,000 events")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--events", type=int, default=None)
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--batch", type=int, default=1000, help="max records per micro-batch")
    p.add_argument("--only", choices=("all", "fsd", "split"), default="all",
                   help="fsd: the KG / DLB-H table; split: the word-count KG / dc / wc table")
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    records = args.events or (12_000 if args.quick else 30_000)

    from rich.console import Console
    from rich.progress import Progress

    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark
    from keyshift.streaming.broker import Broker, free_port
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads.events import make_generator

    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-"))
    cfg = load_config(env={}, home=str(home), groups={"count": 4096},
                      kafka={"port": free_port(), "controller_port": free_port()},
                      spark={"trigger_s": 1.0, "shuffle_partitions": 2},
                      controller={"window_s": 1.0, "theta": 15.0})
    broker = Broker.from_config(cfg)
    console = Console(width=220)  # the table is wide; a log file must not truncate it
    console.print(f"broker: {broker.start()}")
    results: dict[tuple[str, str], list[dict]] = {}
    # (input, app, skew, policies) of each table, interleaved within a repeat
    runs = ([(name, "fsd", skew, POLICIES) for name, skew in INPUTS.items()]
            if args.only in ("all", "fsd") else [])
    if args.only in ("all", "split"):
        runs.append((SPLIT_INPUT, "wordcount", "zipf:1.5", SPLIT_POLICIES))
    try:
        topics = {}
        for name, app, skew, _ in runs:
            topics[name] = f"bench-{uuid.uuid4().hex[:6]}"
            create_topic(cfg.kafka.bootstrap, topics[name], 2)
            gen = make_generator(app, skew=skew, seed=3, keys=500)
            produce(connect(cfg.kafka.bootstrap), topics[name], gen, rate=1e9, count=records)
        spark = get_spark(cfg, app_name="keyshift-bench")
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("runs", total=repeats * sum(len(r[3]) for r in runs))
            for _ in range(repeats):
                for name, app, _, policies in runs:
                    for policy in policies:
                        r = one_run(spark, cfg, topics[name], policy, records, args.engines,
                                    args.batch, app)
                        results.setdefault((name, policy), []).append(r)
                        bar.advance(task)
    finally:
        broker.stop()

    def med(name: str, policy: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, policy)])

    if args.only in ("all", "fsd"):
        fsd_table(console, med, records, args, repeats, cfg)
    if args.only in ("all", "split"):
        split_table(console, med, records, args, repeats, cfg.groups.count)
    (home / "bench_engines.json").write_text(json.dumps(
        {f"{k[0]}|{k[1]}": v for k, v in results.items()}, indent=2))
    console.print(f"raw results: {home / 'bench_engines.json'}")
    return 0


def split_table(console, med, records: int, args, repeats: int, groups: int) -> None:
    """Word count on Zipf 1.5: KG against the hot-key splitters, and their p95 ratios."""
    from rich.table import Table

    table = Table(title=f"word count, zipf 1.5, end to end, {records} events, {args.engines} "
                        f"engines, batches of {args.batch}, median of {repeats}")
    for col in ("policy", "events/s", "batch p50 s", "batch p95 s", "slowest task(s) p95 s",
                "batches split", "engine stage share", "Delta writes share"):
        table.add_column(col, justify="right")
    for policy in SPLIT_POLICIES:
        table.add_row(policy, f"{med(SPLIT_INPUT, policy, 'events_per_s'):.0f}",
                      f"{med(SPLIT_INPUT, policy, 'p50'):.2f}",
                      f"{med(SPLIT_INPUT, policy, 'p95'):.2f}",
                      f"{med(SPLIT_INPUT, policy, 'task_p95'):.3f}",
                      f"{med(SPLIT_INPUT, policy, 'split_batches'):.0f}"
                      f" of {med(SPLIT_INPUT, policy, 'batches'):.0f}",
                      f"{100 * med(SPLIT_INPUT, policy, 'engines_share'):.1f}%",
                      f"{100 * med(SPLIT_INPUT, policy, 'writes_share'):.1f}%")
    console.print(table)
    # Amdahl: only the engine stage's critical path (KG's slowest task) can shrink
    best, cores = stage_bound("zipf:1.5", records, args.engines, groups, "wordcount", split=True)
    share = min(med(SPLIT_INPUT, "kg", "task_p95") / med(SPLIT_INPUT, "kg", "p95"), 1.0)
    console.print(f"bound: a perfect split makes the engine stage {best:.2f}x KG's "
                  f"({args.engines} engines), {cores:.2f}x on this machine's {os.cpu_count()} "
                  f"cores; KG's slowest task is {100 * share:.0f}% of its batch p95, so no "
                  f"split can bring the batch p95 under {1 - share * (1 - best):.2f}x KG's "
                  f"({1 - share * (1 - cores):.2f}x here)")
    for policy in SPLIT_POLICIES[1:]:
        p95 = med(SPLIT_INPUT, policy, "p95") / med(SPLIT_INPUT, "kg", "p95")
        p50 = med(SPLIT_INPUT, policy, "p50") / med(SPLIT_INPUT, "kg", "p50")
        task = med(SPLIT_INPUT, policy, "task_p95") / med(SPLIT_INPUT, "kg", "task_p95")
        console.print(f"RATIO word count zipf 1.5 batch p95 {policy}/KG = {p95:.2f} "
                      f"(target <= 0.8); p50 {p50:.2f}; slowest task(s) p95 {task:.2f}")


def fsd_table(console, med, records: int, args, repeats: int, cfg) -> None:
    """FSD on balanced and skewed keys: KG against DLB-H, the ratios and the bound."""
    from rich.table import Table

    table = Table(title=f"FSD end to end, {records} events, {args.engines} engines, "
                        f"batches of {args.batch}, median of {repeats}")
    for col in ("input", "policy", "events/s", "batch p50 s", "batch p95 s",
                "slowest task p95 s", "migration batch p50 s",
                "migration batch p95 s", "moved groups", "bytes moved", "controller share",
                "engine stage share", "Delta writes share"):
        table.add_column(col, justify="right")
    for name in INPUTS:
        for policy in POLICIES:
            table.add_row(name, policy, f"{med(name, policy, 'events_per_s'):.0f}",
                          f"{med(name, policy, 'p50'):.2f}", f"{med(name, policy, 'p95'):.2f}",
                          f"{med(name, policy, 'task_p95'):.2f}",
                          f"{med(name, policy, 'pause_p50'):.2f}",
                          f"{med(name, policy, 'pause_p95'):.2f}",
                          f"{med(name, policy, 'moved_groups'):.0f}",
                          f"{med(name, policy, 'moved_bytes'):.0f}",
                          f"{100 * med(name, policy, 'controller_share'):.1f}%",
                          f"{100 * med(name, policy, 'engines_share'):.1f}%",
                          f"{100 * med(name, policy, 'writes_share'):.1f}%")
    console.print(table)
    bal, skw = list(INPUTS)
    thr = med(bal, "dlb-h", "events_per_s") / med(bal, "kg", "events_per_s")
    p95 = med(skw, "dlb-h", "p95") / med(skw, "kg", "p95")
    console.print(f"RATIO balanced throughput DLB-H/KG = {thr:.2f} (target >= 0.9)")
    console.print(f"RATIO skewed batch p95 DLB-H/KG = {p95:.2f} (target <= 0.8)")
    task = med(skw, "dlb-h", "task_p95") / med(skw, "kg", "task_p95")
    console.print(f"RATIO skewed slowest-engine-task p95 DLB-H/KG = {task:.2f}")
    best, cores = stage_bound(INPUTS[skw], records, args.engines, cfg.groups.count)
    console.print(f"bound: no key-granular plan can make the skewed engine stage shorter than "
                  f"{best:.2f}x KG's (event counts, {args.engines} engines), "
                  f"{cores:.2f}x on this machine's {os.cpu_count()} cores")


if __name__ == "__main__":
    raise SystemExit(main())
