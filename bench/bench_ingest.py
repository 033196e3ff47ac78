"""Ingestion-only throughput (``keyshift stream``): Kafka → validate → route → count → Delta.

Ingestion is the speed layer's job in its ``ingest_only`` mode (``StreamJob``), so this
bench measures that one pipeline: a private broker (free port, temporary folder) gets a
topic pre-filled with N wordcount events (Zipf 1.0 keys); each run is one job with an
``availableNow`` trigger from the earliest offset under a fresh run id: it validates every
record, routes it by the controller's plan and counts per group in one task per engine,
then stops. Modes, alternating (off, on, op, off, ...) so machine noise hits all:

* ``off``: ``--no-routing``, one engine under KG (the baseline);
* ``on``: KG over ``engines.initial`` engines (the default of ``keyshift stream``);
* ``op`` (with ``--operator``): the same job running the wordcount operator with its
  durable state (``keyshift run --policy kg``), the price of the engines' work.

Throughput = N / wall time of the query, and N / busy time (sum of batch durations).

    .venv/bin/python bench/bench_ingest.py            # 40,000 events, 3 repeats per mode
    .venv/bin/python bench/bench_ingest.py --quick    # 10,000 events, 2 repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=20_000, help="max offsets per micro-batch")
    ap.add_argument("--groups", type=int, default=4096)
    ap.add_argument("--operator", action="store_true",
                    help="also run the wordcount operator (mode 'op', keyshift run --policy kg)")
    ap.add_argument("--quick", action="store_true", help="10,000 events, 2 repeats")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench_ingest.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.repeats = 10_000, 2

    import os

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from keyshift.config import load_config
    from keyshift.lakehouse.delta import read_table
    from keyshift.lakehouse.session import get_spark
    from keyshift.streaming.broker import Broker, free_port
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.job import JobOptions, StreamJob
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads import make_generator

    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    console = Console()
    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-"))
    cfg = load_config(env={}, home=str(home), groups={"count": args.groups},
                      kafka={"port": free_port(), "controller_port": free_port()},
                      spark={"shuffle_partitions": 2, "max_offsets_per_trigger": args.batch})
    modes = ("off", "on", "op") if args.operator else ("off", "on")
    broker = Broker.from_config(cfg)
    console.print(f"bench: broker {broker.start()}")
    wall: dict[str, list[float]] = {m: [] for m in modes}
    busy: dict[str, list[float]] = {m: [] for m in modes}
    lat: dict[str, list[float]] = {m: [] for m in modes}
    try:
        topic = "bench-ingest"
        create_topic(cfg.kafka.bootstrap, topic, 4)
        t0 = time.perf_counter()
        stats = produce(connect(cfg.kafka.bootstrap), topic,
                        make_generator("wordcount", skew="zipf:1.0", seed=1),
                        rate=1e9, count=args.events)
        console.print(f"bench: pre-filled {stats.sent:,} events in "
                      f"{time.perf_counter() - t0:.1f}s")
        spark = get_spark(cfg, app_name="keyshift-bench-ingest")

        def one_run(mode: str, run_id: str) -> tuple[float, dict]:
            opts = JobOptions(app="wordcount", policy="kg", run_id=run_id, topic=topic,
                              engines=1 if mode == "off" else None, available_now=True,
                              ingest_only=mode != "op")
            job = StreamJob(spark, cfg, opts)
            t = time.perf_counter()
            query = job.start()
            query.awaitTermination()
            elapsed = time.perf_counter() - t
            job.stop()
            if query.exception() is not None:
                raise RuntimeError(f"run {run_id} failed: {query.exception()}")
            return elapsed, job.summary()

        one_run("on", "warmup")  # JIT, codegen, Delta table creation: not measured
        with Progress(console=console) as bar:
            task = bar.add_task("runs", total=len(modes) * args.repeats)
            for r in range(args.repeats):
                for mode in modes:
                    run_id = f"bench-{mode}-{r}"
                    elapsed, summary = one_run(mode, run_id)
                    rows = (read_table(spark, cfg, "metrics").where(f"run_id = '{run_id}'")
                            .select("events_in", "latency_s").collect())
                    n = sum(x["events_in"] for x in rows)
                    if n != args.events:
                        raise RuntimeError(f"run {run_id} counted {n} events, not {args.events}")
                    wall[mode].append(args.events / elapsed)
                    busy[mode].append(summary["events_per_s"])
                    lat[mode].append(sum(x["latency_s"] * x["events_in"] for x in rows) / n)
                    bar.advance(task)
    finally:
        broker.stop()

    table = Table(title=f"ingestion Kafka → Spark → Delta (StreamJob ingest_only): "
                        f"{args.events:,} events, {args.repeats} runs per mode, "
                        f"p = {args.groups}")
    for col in ("mode", "median events/s (wall)", "min", "max", "ratio vs off",
                "median events/s (busy)", "ratio vs off", "latency_s µs/tuple"):
        table.add_column(col, justify="right")
    base, base_busy = statistics.median(wall["off"]), statistics.median(busy["off"])
    for mode in modes:
        med, med_busy = statistics.median(wall[mode]), statistics.median(busy[mode])
        table.add_row(mode, f"{med:,.0f}", f"{min(wall[mode]):,.0f}", f"{max(wall[mode]):,.0f}",
                      f"{med / base:.2f}", f"{med_busy:,.0f}", f"{med_busy / base_busy:.2f}",
                      f"{statistics.median(lat[mode]) * 1e6:,.1f}")
    console.print(table)
    console.print(f"routing overhead: on/off throughput ratio = "
                  f"{statistics.median(wall['on']) / base:.2f}")
    _plot(wall, Path(args.out))
    console.print(f"plot: {args.out}")
    return 0


LABELS = {"off": "one engine", "on": "KG engines", "op": "operator"}


def _plot(results: dict[str, list[float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    modes = list(results)
    ax.boxplot([results[m] for m in modes], tick_labels=[LABELS[m] for m in modes])
    ax.set_ylabel("events/s (Kafka → Spark → Delta)")
    ax.set_title("Ingestion throughput")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
