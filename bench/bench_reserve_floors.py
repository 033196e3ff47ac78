"""Offline comparison of burst-reserve rules (bench/results/elastic_evaluation.md,
"Mechanisms evaluated and not kept"): how much each rule would miss and what it would cost
on the three real series, without running the planner.

For every evaluation window the rule sets a floor (tuples the capacity must cover) from
what is known before the window: the last observed input In_now, the one-step forecast
mean În and σ of the evaluation's SeasonalProfile (updated online), and statistics of the
history (the first 60 %). The engine count is the smallest whose capacity, derated by 5 %
and by the 5-s pause, covers the floor; the bill takes the larger of that and the count
the window really needed. Misses are the input above the undiluted capacity. Same scaling
as ``keyshift simulate --scenario elastic`` (history peak at 75 % of 16 engines).

    .venv/bin/python bench/bench_reserve_floors.py

Rules: the empirical quantile of standardised one-step errors (În + z_q·σ), the growth
ratio (max(In_now, În)·g_q), and the additive rise kept in keyshift.elastic.reserve
(max(In_now, În) + R_q). These are estimates; the replay numbers of the kept rule are in
the evaluation table.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from keyshift.elastic.capacity import LatencyModel
from keyshift.elastic.forecast import SeasonalProfile
from keyshift.experiments.elastic import _data_dir, load_series

K = 16
PAUSE_S = 5.0


def one_step(t: np.ndarray, y: np.ndarray, fit_to: int, lo: int, hi: int):
    """One-step forecasts (mean, σ) of windows lo..hi-1, the profile fitted on [:fit_to]
    and updated with each window after its forecast."""
    f = SeasonalProfile().fit(t[:fit_to], y[:fit_to])
    mean, std = np.empty(hi - lo), np.empty(hi - lo)
    for i, j in enumerate(range(lo, hi)):
        m, s = f.predict(t[j:j + 1])
        mean[i], std[i] = m[0], s[0]
        f.update(t[j:j + 1], y[j:j + 1])
    return mean, std


def scaled_series(name: str) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """(t, tuples per window, history length, capacity of 1..K engines, usable capacity):
    the evaluation's scaling, and the capacity derated by 5 % and the pause."""
    truth = LatencyModel(base_s=0.002, overhead=0.02, cv=0.05)
    t, v = load_series(name, _data_dir(None))
    n = int(len(t) * 0.6)
    ws = float(np.median(np.diff(t)))
    cap = np.array([float(truth.rate(i)) * ws for i in range(1, K + 1)])
    usable = cap * (1 - PAUSE_S / ws) * 0.95
    return t, v / v[:n].max() * 0.75 * cap[-1], n, cap, usable


def estimate(floor: np.ndarray, test: np.ndarray, cap: np.ndarray, usable: np.ndarray) -> str:
    """"missed % / engine-h × static" of the smallest engine counts that cover ``floor``,
    billed at least the count each window needed."""
    need = np.minimum(np.searchsorted(usable, test) + 1, K)
    eng = np.minimum(np.searchsorted(usable, floor) + 1, K)
    missed = np.maximum(test - cap[eng - 1], 0).sum() / test.sum() * 100
    return f"{missed:.3g} / {np.maximum(eng, need).mean() / K:.2f}"


def main() -> None:
    table = Table(title="Reserve rules, offline estimate: missed % / engine-h × static")
    table.add_column("rule")
    names = ("taxi", "tweets", "bikes")
    for name in names:
        table.add_column(name, justify="right")
    cells: dict[str, dict[str, str]] = {}
    for name in names:
        t, y, n, cap, usable = scaled_series(name)
        # History statistics: one-step errors on the history's second half (the profile
        # fitted on the first half), rises and growth ratios on all of it.
        hm, hs = one_step(t, y, n // 2, n // 2, n)
        z = (y[n // 2:n] - hm) / hs
        hist = y[:n]
        rises = np.diff(hist)
        growth = hist[1:] / np.maximum(hist[:-1], cap[0] * 1e-3)
        mean, std = one_step(t, y, n, n, len(t))
        test, prev = y[n:], y[n - 1:-1]

        def cell(floor: np.ndarray, usable=usable, cap=cap, test=test) -> str:
            return estimate(floor, test, cap, usable)

        level = np.maximum(prev, mean)
        for q in (0.999, 1.0):
            cells.setdefault(f"În + z_q·σ (empirical z), q={q:g}", {})[name] = cell(
                mean + std * np.quantile(z, q))
            cells.setdefault(f"max(In_now, În)·g_q (growth ratio), q={q:g}", {})[name] = cell(
                level * np.quantile(growth, q))
            cells.setdefault(f"max(In_now, În) + R_q (additive rise, kept), q={q:g}", {})[name] = cell(
                level + max(np.quantile(rises, q), 0.0))
    for rule, row in cells.items():
        table.add_row(rule, *(row[n] for n in names))
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
