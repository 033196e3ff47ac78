"""What one small idempotent Delta append costs, by setting: the unit of a micro-batch's
bookkeeping (each batch appends to events_out, key_loads, metrics, and sometimes more).

Every append carries ``txnAppId``/``txnVersion`` (idempotent per batch), so Delta must know
the table's latest version per app id before it commits. Without a checksum file it learns
that from state reconstruction (Spark jobs over the log); with the checksum computed
incrementally (Delta's default) it reads it from the previous commit's ``.crc``. This bench
appends the same small frames to fresh tables under each setting, in one Spark session,
and prints the median seconds per append and the ratio to the first setting.

    .venv/bin/python bench/bench_delta_commit.py --appends 30 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))

SETTINGS = {
    "no checksum (before)": {"spark.databricks.delta.writeChecksumFile.enabled": "false"},
    "incremental checksum": {"spark.databricks.delta.writeChecksumFile.enabled": "true",
                             "spark.databricks.delta.incremental.commit.enabled": "true"},
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", type=int, default=20)
    args = p.parse_args(argv)

    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark

    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-delta-"))
    cfg = load_config(env={}, home=str(home), spark={"master": "local[2]",
                                                     "shuffle_partitions": 2})
    spark = get_spark(cfg, app_name="bench-delta-commit")
    spark.sparkContext.setLogLevel("ERROR")
    rows = [(i, f"k{i}", float(i)) for i in range(args.rows)]
    medians: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for r in range(args.repeats):
        for name, conf in SETTINGS.items():
            for k, v in conf.items():
                spark.conf.set(k, v)
            path = str(home / f"t-{r}-{abs(hash(name))}")
            times = []
            for b in range(args.appends):
                t = time.perf_counter()
                (spark.createDataFrame(rows, "id INT, key STRING, x DOUBLE").write
                 .format("delta").mode("append").option("txnAppId", "bench")
                 .option("txnVersion", b).save(path))
                times.append(time.perf_counter() - t)
            medians[name].append(statistics.median(times[1:]))  # the first creates the table
            print(f"repeat {r}: {name}: median {medians[name][-1]:.3f} s per append",
                  flush=True)
    base = statistics.median(next(iter(medians.values())))
    print(f"\n{'setting':<24} {'s/append':>9} {'ratio':>6}")
    for name, ms in medians.items():
        m = statistics.median(ms)
        print(f"{name:<24} {m:9.3f} {m / base:6.2f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
