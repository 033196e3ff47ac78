"""Offline comparison of reserve rules built on the GP's predictive σ
(bench/results/elastic_evaluation.md, "With the GP forecaster"): how much each rule would
miss and what it would cost on the three real series, without running the planner. The
companion of bench_reserve_floors.py (same engine-count and billing estimate), with the GP
forecaster instead of the seasonal profile.

For every evaluation window the rule sets a floor from what is known before it: the last
observed input In_now, the GP's one-step forecast (mean, σ), updated online, and the
surprises of a backtest of the history (the GP fitted on its first half forecasting the
second half) plus those of the evaluation windows already seen. c_q below is the
q-quantile of those surprises, recomputed before every window.

    .venv/bin/python bench/bench_forecast_reserve.py [--quantiles 0.999,0.9999]

Rules: "În + z_q·σ" with a Gaussian z_q; "În + c_q·σ", c_q of (In − În)/σ; the kept
"max(In_now, În) + c_q·σ", c_q of the scaled surprises (In − max(In_prev, În))/σ
(keyshift.elastic.reserve.ForecastQuantile); the additive "max(In_now, În) + S_q", S_q of
the unscaled surprises; and the rise reserve "max(In_now, În) + R_q" for reference.
"""

from __future__ import annotations

import argparse
import bisect

import numpy as np
from bench_reserve_floors import estimate, scaled_series
from rich.console import Console
from rich.table import Table
from scipy.stats import norm

from keyshift.elastic.forecast import make_series_model, one_step_forecasts


def running_quantile(history: np.ndarray, online: np.ndarray, q: float) -> np.ndarray:
    """Before each online value: the q-quantile (numpy's linear one, as the reserve takes
    it) of the history and the online values already seen."""
    seen = sorted(history.tolist())
    out = np.empty(online.size)
    for i, value in enumerate(online):
        pos = q * (len(seen) - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, len(seen) - 1)
        out[i] = seen[lo] + (pos - lo) * (seen[hi] - seen[lo])
        bisect.insort(seen, float(value))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantiles", default="0.999,0.9999")
    parser.add_argument("--forecaster", default="gp")
    args = parser.parse_args()
    quantiles = [float(q) for q in args.quantiles.split(",")]
    names = ("taxi", "tweets", "bikes")
    cells: dict[str, dict[str, str]] = {}
    for name in names:
        t, y, n, cap, usable = scaled_series(name)
        hist_mean, hist_std = one_step_forecasts(make_series_model(args.forecaster), t[:n], y[:n], n // 2)
        mean, std = one_step_forecasts(make_series_model(args.forecaster), t, y, n)
        mean, std, test, prev = mean[n:], std[n:], y[n:], y[n - 1:-1]
        hm, hs, hy, hprev = hist_mean[n // 2:], hist_std[n // 2:], y[n // 2:n], y[n // 2 - 1:n - 1]

        def cell(floor: np.ndarray, usable=usable, cap=cap, test=test) -> str:
            return estimate(floor, test, cap, usable)

        level, hlevel = np.maximum(prev, mean), np.maximum(hprev, hm)
        for q in quantiles:
            rules = {
                f"În + z_q·σ, Gaussian z_q, q={q:g}": mean + norm.ppf(q) * std,
                f"În + c_q·σ, c_q of (In − În)/σ, q={q:g}": mean + std * running_quantile(
                    (hy - hm) / hs, (test - mean) / std, q),
                f"max(In_now, În) + c_q·σ, scaled surprises (kept), q={q:g}": level + std * np.maximum(
                    running_quantile((hy - hlevel) / hs, (test - level) / std, q), 0),
                f"max(In_now, În) + S_q, unscaled surprises, q={q:g}": level + np.maximum(
                    running_quantile(hy - hlevel, test - level, q), 0),
                f"max(In_now, În) + R_q, rises, q={q:g}": level + np.maximum(
                    running_quantile(np.diff(y[:n]), test - prev, q), 0),
            }
            for rule, floor in rules.items():
                cells.setdefault(rule, {})[name] = cell(floor)
    table = Table(title=f"Reserve rules on the {args.forecaster} forecast, offline estimate: "
                        "missed % / engine-h × static")
    table.add_column("rule")
    for name in names:
        table.add_column(name, justify="right")
    for rule, row in cells.items():
        table.add_row(rule, *(row[n] for n in names))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
