"""The staged bookkeeping's checksum per file: column by column against value by value.

Every engine task stages its key loads (one row per key group it ran) as a Parquet file with
a checksum of its rows in every batch, and every commit of the staged rows checks each file
again (``streaming/staging.py``). This bench writes one ``key_loads`` file as an engine task
stages it (1,024 rows: 4,096 groups over 4 engines), reads it back as a commit does (which
checks its checksum), and times both digests on those rows, interleaved, in one process; it
prints the medians and the ratio.

    .venv/bin/python -m bench staged_checksum                 # 1,024 rows, 200 repeats
    .venv/bin/python -m bench staged_checksum --rows 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def key_loads(rows: int) -> list[dict]:
    now = datetime.now(UTC)
    return [{"run_id": "bench", "batch_id": 7, "window_start": now, "group": g, "engine": 1,
             "load": 3 * g + 1, "state_bytes": None if g % 3 else 64 * g, "plan_version": 2}
            for g in range(rows)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1024, help="rows a file (default 1,024)")
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args(argv)
    if args.rows < 1 or args.repeats < 1:
        ap.error("--rows and --repeats must be >= 1")

    from keyshift.streaming import staging

    rows = key_loads(args.rows)
    with tempfile.TemporaryDirectory() as tmp:  # the file as an engine task stages it
        uri = staging.stage_uri(tmp, "key_loads", 7, "e1")
        staging.write_staged(uri, "key_loads", rows)
        tab = staging.read_staged(uri)  # raises if the written checksum does not verify
    times: dict[str, list[float]] = {"value by value": [], "column by column": []}
    for _ in range(args.repeats):
        for name, digest in (("value by value", staging.values_digest),
                             ("column by column", staging.rows_digest)):
            t0 = time.perf_counter()
            digest(tab)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"# key_loads, {args.rows:,} rows a file, medians of {args.repeats}")
    for name, ms in med.items():
        print(f"{name:<17} {ms:8.3f} ms a file")
    print(f"RATIO column by column / value by value: "
          f"{med['column by column'] / med['value by value']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
