"""A commit of a run's staged bookkeeping: delta-rs against Spark's append of the same rows.

A running job stages its ``key_loads`` (one file per engine task and batch), ``metrics`` and
``decisions`` rows and commits them every ``warehouse.commit_interval_s``, one append per table
at once, on a thread beside the stream and at stop (``streaming/staging.py``). This bench
stages what a ``bench stream`` KG run stages in one interval (8 batches of 4 engines over
4,096 key groups: 32 ``key_loads`` files of 1,024 rows, 8 ``metrics`` and 8 ``decisions``
files), commits it with ``StagedAppends.commit`` both ways, interleaved, in one Spark session
(``local[2]``, the job's settings): through delta-rs (the job's path,
``lakehouse/delta_arrow.append_arrow``) and through Spark (delta-rs declined: Spark reads the
checked files again and appends them with Delta). Each round's wall seconds and the CPU
seconds of this process and the JVM together (the cores the stream shares with a commit)
are timed; it prints the medians and the ratios.

    .venv/bin/python -m bench staged_commit                  # 9 rounds each way
    .venv/bin/python -m bench staged_commit --rounds 15 --batches 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))

TABLES = ("key_loads", "metrics", "decisions")
PATHS = ("spark", "delta-rs")


def contract_row(name: str, batch: int, at: int) -> dict[str, Any]:
    """A row of table ``name`` with a value in every column (``at`` varies the key)."""
    import pyarrow as pa

    from keyshift.lakehouse.delta_arrow import arrow_schema

    now = datetime.now(UTC)

    def value(field: pa.Field) -> Any:
        kind = field.type
        if field.name == "run_id":
            return "bench"
        if field.name == "batch_id":
            return batch
        if pa.types.is_list(kind):
            return [at % 7, at % 5, at % 3, 1]
        if pa.types.is_integer(kind):
            return at
        return {pa.string(): "kg", pa.float64(): at / 3, pa.bool_(): True,
                pa.binary(): b"\x00"}.get(kind, now)

    return {f.name: value(f) for f in arrow_schema(name)}


def stage_round(root: str, start: int, batches: int, engines: int, groups: int) -> None:
    """What one commit interval of a KG run stages: each engine task's key loads, the
    driver's metrics and decisions, batch by batch."""
    from keyshift.streaming.staging import stage_rows

    for b in range(start, start + batches):
        for e in range(engines):
            stage_rows(root, "key_loads", b, f"e{e}",
                       [contract_row("key_loads", b, g) for g in range(e, groups, engines)])
        stage_rows(root, "metrics", b, "driver", [contract_row("metrics", b, 0)])
        stage_rows(root, "decisions", b, "driver",
                   [contract_row("decisions", b, c) for c in range(3)])


def cpu_seconds() -> float:
    """CPU seconds of this process and its children (the JVM Spark's driver runs in)."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def commit_rounds(spark: Any, cfg: Any, rounds: int, batches: int, engines: int,
                  groups: int, say: Any = print) -> dict[str, dict[str, list[float]]]:
    """``rounds`` commits each way after one unmeasured round (both paths warmed up), paths
    interleaved; each round's wall and CPU seconds by path. Checks every row landed once."""
    from keyshift.lakehouse import delta_arrow
    from keyshift.lakehouse.delta import RunAppends, ensure_tables
    from keyshift.streaming.staging import StagedAppends

    ensure_tables(spark, cfg, list(TABLES))
    appends = RunAppends(spark, cfg, "bench")
    appends.fresh = True  # a run's own commits: blind appends, as in a running job
    root = f"{cfg.warehouse_uri}/_runs/bench/staged"
    staging = StagedAppends(spark, root, appends, interval_s=0)
    real = delta_arrow.append_arrow

    def declined(cfg: Any, name: str, rows: Any) -> None:
        raise delta_arrow.FastWriteUnavailable("declined by the bench: Spark's append")

    got: dict[str, dict[str, list[float]]] = {p: {"wall": [], "cpu": []} for p in PATHS}
    batch = 0
    try:
        for r in range(rounds + 1):
            for path in PATHS:
                stage_round(root, batch, batches, engines, groups)
                batch += batches
                appends.begin(batch)
                delta_arrow.append_arrow = real if path == "delta-rs" else declined
                c0, t0 = cpu_seconds(), time.perf_counter()
                committed = staging.commit()
                t1, c1 = time.perf_counter(), cpu_seconds()
                if committed != len(TABLES) * batches:
                    raise SystemExit(f"bench: {committed} (table, batch) pairs committed, "
                                     f"expected {len(TABLES) * batches}")
                if r:
                    got[path]["wall"].append(t1 - t0)
                    got[path]["cpu"].append(c1 - c0)
                    say(f"round {r}: {path:<8} {t1 - t0:6.3f} s wall {c1 - c0:6.3f} CPU s")
    finally:
        delta_arrow.append_arrow = real
    rows = spark.read.format("delta").load(cfg.table_path("key_loads")).count()
    if rows != batch * groups:
        raise SystemExit(f"bench: key_loads holds {rows:,} rows, expected {batch * groups:,}")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9, help="commits each way (default 9)")
    ap.add_argument("--batches", type=int, default=8, help="batches a round (default 8)")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--groups", type=int, default=4096)
    args = ap.parse_args(argv)
    if min(args.rounds, args.batches, args.engines, args.groups) < 1:
        ap.error("--rounds, --batches, --engines and --groups must be >= 1")

    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark

    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-staged-commit-"))
    cfg = load_config(env={}, home=str(home), spark={"master": "local[2]",
                                                     "shuffle_partitions": 2})
    spark = get_spark(cfg, app_name="bench-staged-commit")
    spark.sparkContext.setLogLevel("ERROR")
    got = commit_rounds(spark, cfg, args.rounds, args.batches, args.engines, args.groups,
                        say=lambda line: print(line, flush=True))
    med = {p: (statistics.median(v["wall"]), statistics.median(v["cpu"]))
           for p, v in got.items()}
    print(f"\n# {args.batches} batches x {args.engines} engines a round, {args.groups:,} "
          f"groups; medians of {args.rounds}; every row landed once")
    print(f"{'path':<9} {'wall s':>8} {'CPU s':>8}")
    for p, (w, c) in med.items():
        print(f"{p:<9} {w:8.3f} {c:8.3f}")
    print(f"RATIO delta-rs / spark: wall {med['delta-rs'][0] / med['spark'][0]:.3f}, "
          f"CPU {med['delta-rs'][1] / med['spark'][1]:.3f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
