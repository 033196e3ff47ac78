"""The engine task's cost per event beside the operator's own, in one process, without Spark.

An engine task (``streaming.engines.arrow_engine``) reads the Arrow batches the JVM hands it,
makes each typed event a dict, sorts the events into processing order, restores and saves the
touched groups' state, runs the operator and writes its records back as Arrow. Only the
operator is the user's work; everything else is the engine's per-event overhead, which a cheap
operator (word count, ``heavy`` with ``work_us`` 0) pays in full. This bench measures both on
the same events in the same process:

* **task**: ``arrow_engine``'s function over Arrow batches of the engine input, built as
  Spark delivers them (typed ``event`` STRUCT, ``kafka_ts``, ...), with its state store on a
  temporary folder, a batch after a warm-up batch (so the groups have state to restore);
* **operator** (the baseline): ``process_many`` of a fresh operator on the same events,
  already dicts and in order: what no engine can avoid.

It prints µs per event of each, the overhead (task − operator) and task / operator, medians
of ``--repeats``. Issue 43 item 3's target, halving the overhead, is a before/after of this
table across commits (bench/results/engine_task.md).

    .venv/bin/python -m bench engine_task                    # 20,000 events, 5 repeats
    .venv/bin/python -m bench engine_task --events 100000 --apps wordcount
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APPS = {"wordcount": {}, "heavy": {"work_us": 0}}
T0_MS = 1_700_000_000_000


def events_of(app: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` events of the shipped generator (Zipf 1.0 keys), 1 ms apart."""
    from keyshift.workloads import make_generator

    gen = make_generator("wordcount" if app == "heavy" else app, skew="zipf:1.0", seed=seed)
    return gen.batch(n, 0.0, T0_MS)


def engine_input(app: str, events: list[dict[str, Any]], groups: int, start: int) -> Any:
    """The events as the engine task's Arrow input, as the job's parse and routing give
    them (:func:`keyshift.streaming.engines.input_batch`): no rejections."""
    from keyshift.groups import group_of
    from keyshift.streaming.engines import input_batch

    return input_batch(app, ((group_of(str(e["key"]), groups), i % 4, start + i, e, None,
                              None, T0_MS / 1e3 + i / 1e3, None)
                             for i, e in enumerate(events)))


def task_seconds(app: str, params: dict, batches: list[Any], root: Path) -> float:
    """Seconds of the last of ``batches`` through the engine task (the ones before warm the
    state store)."""
    import pyarrow as pa

    from keyshift.streaming.engine_state import cache_root
    from keyshift.streaming.engines import BatchSpec, arrow_engine

    run_key, took = f"bench-{uuid.uuid4().hex}", 0.0
    try:
        for b, batch in enumerate(batches):
            spec = BatchSpec(b, app, params, run_key, str(root / "state"), compact_every=0)
            t = time.perf_counter()
            chunks = pa.Table.from_batches([batch]).to_batches(max_chunksize=10_000)
            for _ in arrow_engine(spec)(iter(chunks)):  # Spark's Arrow batches: 10,000 rows
                pass
            took = time.perf_counter() - t
    finally:
        shutil.rmtree(cache_root(run_key), ignore_errors=True)
    return took


def operator_seconds(app: str, params: dict, events: list[dict[str, Any]], groups: int) -> float:
    """Seconds of the operator alone on the events, in processing order."""
    from keyshift.apps import make_operator, order_key
    from keyshift.groups import group_of

    ordered = sorted(({**e, "partition": 0, "offset": i} for i, e in enumerate(events)),
                     key=order_key)
    gs = [group_of(str(e["key"]), groups) for e in ordered]
    op = make_operator(app, **params)
    t = time.perf_counter()
    op.process_many(ordered, gs)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000, help="events in the measured batch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--groups", type=int, default=4096)
    ap.add_argument("--apps", default=",".join(APPS), help=f"subset of {','.join(APPS)}")
    args = ap.parse_args(argv)
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    if unknown := [a for a in apps if a not in APPS]:
        ap.error(f"--apps: unknown {', '.join(unknown)}; choose from {', '.join(APPS)}")
    if args.events < 1 or args.repeats < 1:
        ap.error("--events and --repeats must be positive")

    table = Table(title=f"engine task per event, {args.events:,} events, "
                        f"medians of {args.repeats}")
    for col in ("app", "task µs/event", "operator µs/event", "overhead µs/event",
                "task / operator"):
        table.add_column(col, justify="right" if col != "app" else "left")
    for app in apps:
        params = APPS[app]
        warm, measured = (events_of(app, args.events, seed) for seed in (1, 2))
        for e in measured:  # the measured batch follows the warm-up in time
            e["ts"] = int(e["ts"]) + 60_000
        batches = [engine_input(app, warm, args.groups, 0),
                   engine_input(app, measured, args.groups, len(warm))]
        task, oper = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="bench-engine-task-") as tmp:
                task.append(task_seconds(app, params, batches, Path(tmp)))
            oper.append(operator_seconds(app, params, measured, args.groups))
        t_us = statistics.median(task) / args.events * 1e6
        o_us = statistics.median(oper) / args.events * 1e6
        table.add_row(app, f"{t_us:.2f}", f"{o_us:.2f}", f"{t_us - o_us:.2f}",
                      f"{t_us / o_us:.2f}x")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
