"""Simulator speed: simulated seconds per wall second at 5, 64 and 1,000 engines, and the
scale run of the brief (1,000 engines, 10⁶ keys, one simulated hour at 1-second windows).

    .venv/bin/python bench/bench_sim.py            # speed table, ~1-2 minutes
    .venv/bin/python bench/bench_sim.py --quick    # fewer repeats, shorter runs
    .venv/bin/python bench/bench_sim.py --scale    # also the one-hour 10⁶-key run

Each configuration runs ``--repeats`` times (median reported). The RATIO column compares
each row's simulated-seconds-per-wall-second with the 5-engine KG baseline measured in the
same process, so the table says how much slower a bigger cluster or a real policy makes the
simulator on this machine, independent of the machine's absolute speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from keyshift.policies import make_policy
from keyshift.sim import Schedule, SimConfig, Simulator, SyntheticWorkload, ZipfKeys

CASES = [  # (engines, keys, groups, policy, rate tuples/s)
    (5, 4096, 4096, "kg", 5_000.0),
    (5, 4096, 4096, "dlb-h", 5_000.0),
    (64, 100_000, 4096, "kg", 64_000.0),
    (64, 100_000, 4096, "dlb-h", 64_000.0),
    (1000, 1_000_000, 65536, "kg", 500_000.0),
    (1000, 1_000_000, 65536, "dlb-h", 500_000.0),
]


def one_run(engines: int, keys: ZipfKeys, policy: str, rate: float, duration: float,
            seed: int) -> float:
    wl = SyntheticWorkload(keys, Schedule.constant(0.6), Schedule.constant(rate))
    cfg = SimConfig(engines=engines, tick_s=1.0, window_s=1.0,
                    service_rate=1.25 * rate / engines, queue_limit=5 * rate / engines)
    sim = Simulator(wl, make_policy(policy), cfg, seed=seed)
    t0 = time.perf_counter()
    sim.run(duration)
    return duration / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", action="store_true", help="run the one-hour 10⁶-key case too")
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    duration = 20.0 if args.quick else 60.0
    console = Console()
    table = Table(title=f"simulated s per wall s (median of {repeats}, {duration:.0f} s runs, "
                        "1 s windows and ticks)")
    for col in ("engines", "keys", "groups", "policy", "sim s / wall s", "RATIO vs 5-engine KG"):
        table.add_column(col, justify="right")
    distributions: dict[tuple[int, int], ZipfKeys] = {}
    baseline = None
    for engines, nkeys, groups, policy, rate in CASES:
        keys = distributions.setdefault((nkeys, groups), ZipfKeys(nkeys, groups, None, seed=1))
        keys.group_pmf(0.6)  # hash the keys and fold them into groups outside the timing
        speeds = [one_run(engines, keys, policy, rate, duration, seed) for seed in range(repeats)]
        speed = statistics.median(speeds)
        baseline = baseline or speed
        table.add_row(str(engines), f"{nkeys:,}", f"{groups:,}", policy, f"{speed:,.1f}",
                      f"{speed / baseline:.3f}")
        console.print(f"  done: {engines} engines {policy}: {speed:,.1f} sim s / wall s")
    console.print(table)
    if args.scale:
        t0 = time.perf_counter()
        keys = ZipfKeys(1_000_000, 65536, None, seed=1)
        keys.group_pmf(0.6)
        setup = time.perf_counter() - t0
        speed = one_run(1000, keys, "kg", 500_000.0, 3600.0, 0)
        console.print(
            f"scale run: 1,000 engines, 10⁶ keys in 65,536 groups, 3,600 one-second windows, "
            f"KG: {3600.0 / speed:,.1f} s wall (+ {setup:.1f} s to hash the keys once)"
        )


if __name__ == "__main__":
    main()
