"""Hot-key splitting: imbalance (max/mean − 1 of tuples per engine over the run) of kg, pkg,
dc and wc on a Zipf trace, with PKG, run in the same process, as the baseline.

    .venv/bin/python bench/bench_split_keys.py            # issue 13's case, ~1 minute
    .venv/bin/python bench/bench_split_keys.py --quick    # 10⁵ tuples, one seed

Issue 13's case: 10⁶ tuples over 10⁴ keys (one key group per key), Zipf 1.5, 50 engines;
targets wc ≤ 0.01 and dc ≤ 0.1 where PKG stays at ~8.7. The simulator routes every tick
(0.1 s) for dc and wc through the policy's per-tuple router, each window for kg and pkg
through the plan and PKG's split; engines never saturate, so the totals are the routing
alone. Each policy runs once per seed (``--repeats`` seeds: the trace's key ranks and the
Poisson arrivals); the table has the median. ``choices`` is D-Choices' d of the last window.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from keyshift.policies import make_policy
from keyshift.sim import Schedule, SimConfig, Simulator, SyntheticWorkload, ZipfKeys

POLICIES = ("kg", "pkg", "dc", "wc")
TARGETS = {"dc": 0.1, "wc": 0.01}
DURATION_S = 100.0


def one_run(policy: str, engines: int, keys: int, tuples: float, zipf: float,
            seed: int) -> tuple[float, float, object]:
    """(imbalance, wall seconds, D-Choices' last d or None) of one simulated trace."""
    workload = SyntheticWorkload(ZipfKeys(keys, keys, None, seed=seed), Schedule.constant(zipf),
                                 Schedule.constant(tuples / DURATION_S))
    cfg = SimConfig(engines=engines, tick_s=0.1, window_s=1.0, service_rate=1e12)
    sim = Simulator(workload, make_policy(policy, **({"seed": seed} if policy != "kg" else {})),
                    cfg, seed=seed)
    t0 = time.perf_counter()
    result = sim.run(DURATION_S)
    wall = time.perf_counter() - t0
    last = result.decisions[-1]["info"].get("choices") if result.decisions else None
    return result.imbalance(), wall, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10⁵ tuples, one seed")
    ap.add_argument("--repeats", type=int, default=3, help="seeds (median reported)")
    ap.add_argument("--engines", type=int, default=50)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--tuples", type=float, default=1e6)
    ap.add_argument("--zipf", type=float, default=1.5)
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    tuples = 1e5 if args.quick else args.tuples
    runs = {p: [one_run(p, args.engines, args.keys, tuples, args.zipf, seed)
                for seed in range(repeats)] for p in POLICIES}
    imb = {p: statistics.median(r[0] for r in runs[p]) for p in POLICIES}
    wall = {p: statistics.median(r[1] for r in runs[p]) for p in POLICIES}
    table = Table(title=f"imbalance max/mean − 1 over the run: {tuples:,.0f} tuples, "
                        f"{args.keys:,} keys, Zipf {args.zipf}, {args.engines} engines "
                        f"(median of {repeats} seeds)")
    for col in ("policy", "imbalance", "seeds' range", "÷ pkg", "target", "meets", "choices",
                "wall s", "wall ÷ pkg"):
        table.add_column(col, justify="right")
    for p in POLICIES:
        target = TARGETS.get(p)
        d = [r[2] for r in runs[p] if r[2] is not None]
        table.add_row(
            p, f"{imb[p]:.5f}",
            f"{min(r[0] for r in runs[p]):.5f}–{max(r[0] for r in runs[p]):.5f}",
            f"{imb[p] / imb['pkg']:.2e}" if imb["pkg"] > 0 else "—",
            "—" if target is None else f"≤ {target}",
            "—" if target is None else ("yes" if imb[p] <= target else "NO"),
            str(statistics.median(d)) if d else "—",
            f"{wall[p]:.2f}", f"{wall[p] / wall['pkg']:.2f}",
        )
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
