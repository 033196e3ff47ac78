"""Planner time against the horizon and the number of engine states (elastic-cep Fig. 17).

Times one full plan — Eq. 9–13 over all (window, engines) vertices plus the shortest path —
for H = 10…100 windows and K = 16, 32, 64 states, and, as the baseline measured in the same
process, the paper's way: build the explicit layered graph (H·K² arcs) and run Dijkstra
(scipy.sparse.csgraph). Both must find the same cost; the table shows medians of several
repeats and the speed-up ratio. The paper reports up to 12 s; the target here is < 10 ms at
H = 100, 64 states. "DP + floor" is the same plan with a per-window capacity floor (the
burst reserve, keyshift.elastic.reserve), which adds one (H, K) penalty array.

    .venv/bin/python bench/bench_planner.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra
from timing import median_ms  # bench/timing.py (bench/ is on sys.path when run)

from keyshift.elastic.cost import Costs, Forecast, vertex_costs
from keyshift.elastic.planner import GraphPlanner


def forecast(h: int, k: int, rng: np.random.Generator) -> Forecast:
    lat = 0.002 * (1 + 0.02 * np.arange(k))
    cap = 60.0 * np.arange(1, k + 1) / lat
    ins = cap[-1] * (0.2 + 0.6 * rng.random(h))
    return Forecast(ins, 0.1 * ins, np.tile(lat, (h, 1)), np.tile(0.05 * lat, (h, 1)))


def dijkstra_plan(fc: Forecast, start: int, costs: Costs, window_s: float) -> float:
    """The paper's graph search: explicit DAG, source → H layers of K vertices → sink."""
    vc = vertex_costs(fc, costs, window_s).mean
    h, k = vc.shape
    n = h * k + 2
    src, sink = h * k, h * k + 1
    change = np.where(np.eye(k, dtype=bool), 0.0, costs.rc)
    rows, cols, w = [np.full(k, src)], [np.arange(k)], [change[start] + vc[0]]
    ii, jj = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    for j in range(1, h):
        rows.append(((j - 1) * k + ii).ravel())
        cols.append((j * k + jj).ravel())
        w.append((change + vc[j][None, :]).ravel())
    rows.append((h - 1) * k + np.arange(k))
    cols.append(np.full(k, sink))
    w.append(np.zeros(k))
    # Zero-weight arcs vanish in a sparse matrix; a tiny epsilon keeps them (and is removed).
    eps = 1e-12
    graph = csr_matrix((np.concatenate(w) + eps, (np.concatenate(rows), np.concatenate(cols))),
                       shape=(n, n))
    dist = dijkstra(graph, directed=True, indices=src)
    return float(dist[sink] - eps * (h + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    horizons = (10, 50, 100) if args.quick else (10, 25, 50, 75, 100)
    states = (16, 64) if args.quick else (16, 32, 64)
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    costs = Costs(mc=1.0, ec=1.0, rc=300.0)
    window_s = 60.0
    table = Table(title="Planner time per plan (median ms) — DP vs explicit graph + Dijkstra")
    for col in ("H", "states", "DP planner ms", "DP + floor ms", "Dijkstra ms", "ratio Dijkstra/DP",
                "same cost"):
        table.add_column(col, justify="right")
    for k in states:
        for h in horizons:
            fc = forecast(h, k, rng)
            planner = GraphPlanner(window_s=window_s, mc=costs.mc, ec=costs.ec, rc=costs.rc)
            start = k // 2
            plan = planner.plan(fc, start + 1)
            dp_cost = float(vertex_costs(fc, costs, window_s).mean[np.arange(h), plan.path - 1].sum()
                            + costs.rc * np.count_nonzero(np.diff(np.concatenate([[start + 1], plan.path]))))
            dj_cost = dijkstra_plan(fc, start, costs, window_s)
            dp = median_ms(lambda: planner.plan(fc, start + 1), repeats)
            floor = fc.in_mean * 1.5
            dpf = median_ms(lambda: planner.plan(fc, start + 1, in_floor=floor), repeats)  # noqa: B023
            dj = median_ms(lambda: dijkstra_plan(fc, start, costs, window_s), repeats)
            same = abs(dp_cost - dj_cost) <= 1e-6 * max(1.0, abs(dj_cost))
            table.add_row(str(h), str(k), f"{dp:.3f}", f"{dpf:.3f}", f"{dj:.2f}", f"{dj / dp:.1f}×", "yes" if same else "NO")
    Console().print(table)


if __name__ == "__main__":
    main()
