"""Ingestion throughput Kafka → Spark → Delta metrics, with routing on versus off.

A private broker (free port, temporary folder) gets a topic pre-filled with N wordcount
events (Zipf 1.0 keys). Each run is one ingestion query with an ``availableNow`` trigger
from the earliest offset with a fresh checkpoint: it validates every record, routes (or
not) and writes metrics and key loads per micro-batch, then stops. Throughput = N / wall
time of the query. Modes alternate (off, on, off, on, ...) so machine noise hits both.

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
    from keyshift.workloads import make_generator
    from streaming.broker import Broker, create_topic, free_port
    from streaming.ingest import IngestSpec, start_ingest
    from streaming.producer import connect, produce
    from streaming.session import get_spark, read_table

    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    console = Console()
    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-"))
    cfg = load_config(env={}, home=str(home), groups={"count": args.groups},
                      kafka={"port": free_port(), "controller_port": free_port()},
                      spark={"shuffle_partitions": 2, "max_offsets_per_trigger": args.batch})
    broker = Broker.from_config(cfg)
    console.print(f"bench: broker {broker.start()}")
    results: dict[str, list[float]] = {"off": [], "on": []}
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
        # Warm-up (JIT, codegen, Delta table creation), not measured.
        warm = IngestSpec.from_config(cfg, "warmup", topic=topic, app="wordcount",
                                      available_now=True,
                                      checkpoint=home / "ck" / "warmup")
        start_ingest(spark, cfg, warm).awaitTermination()
        with Progress(console=console) as bar:
            task = bar.add_task("runs", total=2 * args.repeats)
            for r in range(args.repeats):
                for mode in ("off", "on"):
                    run_id = f"bench-{mode}-{r}"
                    spec = IngestSpec.from_config(
                        cfg, run_id, topic=topic, app="wordcount", available_now=True,
                        routing=mode == "on", checkpoint=home / "ck" / run_id)
                    t = time.perf_counter()
                    q = start_ingest(spark, cfg, spec)
                    q.awaitTermination()
                    elapsed = time.perf_counter() - t
                    if q.exception() is not None:
                        raise RuntimeError(f"run {run_id} failed: {q.exception()}")
                    n = (read_table(spark, cfg, "metrics").where(f"run_id = '{run_id}'")
                         .agg({"events_in": "sum"}).first()[0])
                    if n != args.events:
                        raise RuntimeError(f"run {run_id} counted {n} events, not {args.events}")
                    results[mode].append(args.events / elapsed)
                    bar.advance(task)
    finally:
        broker.stop()

    table = Table(title=f"ingestion Kafka → Spark → Delta metrics: {args.events:,} events, "
                        f"{args.repeats} runs per mode, p = {args.groups}")
    for col in ("routing", "median events/s", "min", "max", "ratio vs off"):
        table.add_column(col, justify="right")
    base = statistics.median(results["off"])
    for mode in ("off", "on"):
        med = statistics.median(results[mode])
        table.add_row(mode, f"{med:,.0f}", f"{min(results[mode]):,.0f}",
                      f"{max(results[mode]):,.0f}", f"{med / base:.2f}")
    console.print(table)
    console.print(f"routing overhead: on/off throughput ratio = "
                  f"{statistics.median(results['on']) / base:.2f}")
    _plot(results, Path(args.out))
    console.print(f"plot: {args.out}")
    return 0


def _plot(results: dict[str, list[float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    modes = list(results)
    ax.boxplot([results[m] for m in modes], tick_labels=[f"routing {m}" for m in modes])
    ax.set_ylabel("events/s (Kafka → Spark → Delta)")
    ax.set_title("Ingestion throughput")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
