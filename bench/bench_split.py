"""Fox's greedy for the weighted split: time to solve R = 1,000 units over N connections.

The issue's target: N = 64, R = 1,000 under 1 ms (median). Measured beside it, in the same
process and on the same functions:

- the naive greedy the paper describes before the heap (scan every column for the smallest
  next value at each of the R steps, numpy-vectorised: O(N·R)), as the baseline; both must
  reach the same objective;
- the clustered solve of §5.3 (Distance matrix + agglomerative clustering + Fox over clusters)
  and one full controller interval (observe, decay, monotone regression and interpolation of
  every function, Fox), to show where an interval's time goes.

    .venv/bin/python bench/bench_split.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.console import Console
from rich.table import Table
from timing import median_ms  # bench/timing.py (bench/ is on sys.path when run)

from keyshift.split import WeightedSplit, fox_minimax, objective

TARGET_MS = 1.0


def functions(n: int, units: int, rng: np.random.Generator) -> np.ndarray:
    """Knee-shaped blocking functions like Fig. 7: zero up to a knee, then a slope."""
    knee = rng.integers(units // (4 * n) + 1, 4 * units // n + 2, size=n)
    slope = 10.0 ** rng.uniform(-3, 0, size=n)
    grid = np.arange(units + 1)
    return np.maximum(0.0, grid[None, :] - knee[:, None]) * slope[:, None] + 1e-6 * grid


def naive_greedy(F: np.ndarray, total: int) -> np.ndarray:
    """Fox without the heap: look at every column's next value at every step."""
    n, width = F.shape
    w = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    for _ in range(total):
        nxt = np.where(w + 1 < width, F[rows, np.minimum(w + 1, width - 1)], np.inf)
        w[int(nxt.argmin())] += 1
    return w


def controller_interval(n: int, units: int, rng: np.random.Generator, cluster: bool):
    ctl = WeightedSplit(units=units, cluster_from=2 if cluster else 10**6)
    ctl.start(n)
    for _ in range(5):  # some history: samples at several weights
        ctl.update(rng.random(n) * (rng.random(n) < 0.2))
    rates = rng.random(n) * (rng.random(n) < 0.2)
    return lambda: ctl.update(rates)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per measurement")
    args = ap.parse_args()
    repeats = args.repeats or (15 if args.quick else 41)
    units = 1000
    sizes = [16, 64] if args.quick else [4, 16, 64, 256]
    rng = np.random.default_rng(42)
    table = Table(title=f"Fox's greedy, R = {units} (median of {repeats}; target {TARGET_MS} ms at N = 64)")
    for col in ("N", "Fox ms", "÷ target", "naive greedy ms", "naive ÷ Fox", "same optimum",
                "clustered solve ms", "controller interval ms"):
        table.add_column(col, justify="right")
    verdict = None
    for n in sizes:
        F = functions(n, units, rng)
        fox = median_ms(lambda: fox_minimax(F, units), repeats)
        naive = median_ms(lambda: naive_greedy(F, units), max(3, repeats // 5))
        same = np.isclose(objective(F, fox_minimax(F, units)), objective(F, naive_greedy(F, units)))
        clustered = median_ms(controller_interval(n, units, rng, cluster=True), max(3, repeats // 5))
        interval = median_ms(controller_interval(n, units, rng, cluster=False), max(3, repeats // 5))
        table.add_row(str(n), f"{fox:.3f}", f"{fox / TARGET_MS:.2f}", f"{naive:.2f}",
                      f"{naive / fox:.1f}×", "yes" if same else "NO", f"{clustered:.2f}", f"{interval:.2f}")
        if n == 64:
            verdict = fox
    Console(width=140).print(table)
    if verdict is not None:
        status = "meets" if verdict < TARGET_MS else "misses"
        print(f"N = 64: Fox {verdict:.3f} ms = {verdict / TARGET_MS:.2f} × the {TARGET_MS} ms target ({status} it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
