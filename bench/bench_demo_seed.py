"""First change of N in `keyshift demo`: --seed-history (champion GPs) against --planner alone
(the pure-core fallback), each run in a fresh home.

A fresh home is a new clone's state: no Delta history, no MLflow registry. Each run is
``keyshift demo --duration D --rate R --json`` with ``--seed-history`` or ``--planner``, its own
broker ports, the defaults otherwise (10 s windows, 2 s trigger, 4096 groups); the two kinds
alternate so that a drift of the machine's load hits both. Per run it prints the summary's
``first_scale_s`` (seconds from the first batch's start to the first change of N), the
seeding's seconds, and the source the report's first scale decision names; then the medians
and their ratio (seeded / fallback). A run without any change of N counts as the demo's whole
wall time (the fallback needs three measured windows; a loaded host may not give it
three before the input ends).

    python -m bench demo_seed --runs 3 --duration 90
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(kind: str, duration: float, rate: float, folder: Path) -> dict:
    from keyshift.streaming.broker import free_port

    env = {**os.environ, "KEYSHIFT_HOME": str(folder / "ks"),
           "KEYSHIFT_CACHE": os.environ.get("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache")),
           "KEYSHIFT_KAFKA__PORT": str(free_port()),
           "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(free_port()),
           "KEYSHIFT_METRICS__PORT": "0", "PYSPARK_PYTHON": sys.executable}
    flag = "--seed-history" if kind == "seeded" else "--planner"
    proc = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "demo", "--duration", f"{duration:g}",
         "--rate", f"{rate:g}", flag, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench demo_seed: the {kind} demo failed: {proc.stderr[-500:]}")
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    page = Path(s["report"]).read_text()
    first = re.search(r"<td>scale_(?:in|out)</td>.*?forecast: ([^;(]+)", page)
    return {"kind": kind, "first_scale_s": s["first_scale_s"],
            "scaled": s["first_scale_s"] is not None,
            # the demo's wall time, from the producer's start until all was processed
            "until_end_s": s["processed"] / s["events_per_s"] if s["events_per_s"] else 0.0,
            "seed_s": (s.get("seeded") or {}).get("seconds"),
            "source": first.group(1).strip() if first else "no change of N",
            "batches": s["batches"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench demo_seed", description=__doc__)
    p.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    p.add_argument("--duration", type=float, default=90.0, help="seconds of input per run")
    p.add_argument("--rate", type=float, default=300.0, help="events per second")
    args = p.parse_args(argv)
    if args.runs < 1 or not args.duration > 0 or not args.rate > 0:
        print("bench demo_seed: --runs >= 1, --duration and --rate > 0", file=sys.stderr)
        return 2
    got: dict[str, list[float]] = {"seeded": [], "fallback": []}
    with tempfile.TemporaryDirectory(prefix="bench-demo-seed-") as tmp:
        for i in range(args.runs):
            for kind in ("seeded", "fallback"):
                r = one_run(kind, args.duration, args.rate, Path(tmp) / f"{kind}-{i}")
                first = r["first_scale_s"] if r["scaled"] else r["until_end_s"]
                got[kind].append(first)
                seed = f", seeding {r['seed_s']:.0f} s" if r["seed_s"] is not None else ""
                print(f"{kind:>8} run {i + 1}: first change of N at "
                      f"{first:.1f} s{'' if r['scaled'] else ' (none: whole run)'}{seed}, "
                      f"{r['batches']} batches, by {r['source']}", flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"median first change of N: seeded {med['seeded']:.1f} s, fallback "
          f"{med['fallback']:.1f} s, ratio {med['seeded'] / med['fallback']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
