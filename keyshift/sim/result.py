"""What a simulation produced: per-window statistics, decisions, migrations and the summary.

The summary is the ``keyshift simulate --json`` contract (see docs/simulator.md). Latency
percentiles come from the run's histogram of queueing ages (one bin per tick), interpolated
inside the bin, so they are exact to the model's FIFO accounting, not a sampled estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from keyshift.policies.base import Decision


@dataclass(frozen=True)
class WindowOutcome:
    """One statistic window as the simulator saw it (what the streaming job writes to `metrics`)."""

    index: int
    start_s: float
    generated: float
    processed: float
    missed: float
    queued: float
    engines: int
    rstd: float
    var: float
    engine_loads: np.ndarray
    engine_live: np.ndarray
    latency: np.ndarray
    throughput: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.index,
            "start_s": self.start_s,
            "generated": self.generated,
            "processed": self.processed,
            "missed": self.missed,
            "queued": self.queued,
            "engines": self.engines,
            "rstd": self.rstd,
            "var": self.var,
            "throughput": self.throughput,
        }


def latency_percentile(hist: np.ndarray, tick_s: float, q: float) -> float:
    """q-quantile (0..1) of the latency whose histogram has one bin per tick of age."""
    hist = np.asarray(hist, dtype=np.float64)
    total = hist.sum()
    if total <= 0:
        return 0.0
    target = q * total
    cum = np.cumsum(hist)
    a = int(np.searchsorted(cum, target, side="left"))
    a = min(a, hist.size - 1)
    before = cum[a] - hist[a]
    frac = 0.0 if hist[a] <= 0 else (target - before) / hist[a]
    return float((a + min(max(frac, 0.0), 1.0)) * tick_s)


def peak_imbalance(engine_loads: np.ndarray) -> float:
    """max/mean − 1 (0 for a perfect balance, and for no load at all)."""
    loads = np.asarray(engine_loads, dtype=np.float64)
    mean = float(loads.mean()) if loads.size else 0.0
    return float(loads.max() / mean - 1.0) if mean > 0 else 0.0


@dataclass
class SimResult:
    tick_s: float
    window_s: float
    windows: list[WindowOutcome] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    scales: list[dict[str, Any]] = field(default_factory=list)
    rebalances: int = 0
    moved_groups: int = 0
    moved_state: float = 0.0
    migration_pause_s: float = 0.0
    queued_end: float = 0.0
    wall_s: float = 0.0
    latency_hist: np.ndarray = field(default_factory=lambda: np.zeros(1))

    def add_window(self, stats: WindowOutcome) -> None:
        self.windows.append(stats)

    def add_decision(
        self, t: float, decision: Decision, engines_before: int, state_total: float = 0.0,
        action: str = "rebalance", applied: bool = True,
    ) -> None:
        """The balancer's decision of one window and the control loop's ``action`` on it.
        Not ``applied`` (declined by a veto, or only recommended): nothing moved, the
        balance after is the balance before, and ``proposed_groups`` is what the policy
        wanted to move."""
        info = {
            k: v for k, v in decision.info.as_dict().items()
            if isinstance(v, int | float | str | bool)
        }
        after = decision.after if applied else decision.before
        self.decisions.append(
            {
                "t": t,
                "action": action,
                "applied": applied,
                "moved_groups": len(decision.moves) if applied else 0,
                "moved_state": decision.moves.total_state if applied else 0.0,
                "proposed_groups": len(decision.moves),
                "state_total": state_total,
                "rstd_before": decision.before.rstd,
                "rstd_after": after.rstd,
                "var_before": decision.before.var,
                "var_after": after.var,
                "engines_before": engines_before,
                "engines_after": decision.plan.parallelism if applied else engines_before,
                "elapsed_ms": decision.elapsed_ms,
                "info": info,
            }
        )

    def add_migration(self, groups: int, state: float, pause_s: float) -> None:
        self.rebalances += 1
        self.moved_groups += groups
        self.moved_state += state
        self.migration_pause_s += pause_s

    def add_scale(self, t: float, before: int, after: int, reason: str) -> None:
        self.scales.append({"t": t, "from": before, "to": after, "reason": reason})

    # ---- series for tables and plots ---------------------------------------------------
    def series(self, name: str) -> np.ndarray:
        return np.array([getattr(w, name) for w in self.windows], dtype=np.float64)

    def engine_load_matrix(self) -> np.ndarray:
        """Windows × engine slots (slots added later are zero before they exist)."""
        width = max((w.engine_loads.size for w in self.windows), default=0)
        out = np.zeros((len(self.windows), width))
        for i, w in enumerate(self.windows):
            out[i, : w.engine_loads.size] = w.engine_loads
        return out

    def engine_totals(self) -> np.ndarray:
        """Tuples each engine slot received over the run (queued, served or missed)."""
        return self.engine_load_matrix().sum(axis=0)

    def imbalance(self) -> float:
        """max/mean − 1 of :meth:`engine_totals` over the slots live in any window: the
        imbalance other simulators report (PKG, D-Choices, W-Choices papers)."""
        totals = self.engine_totals()
        width = totals.size
        live = np.zeros(width, dtype=bool)
        for w in self.windows:
            live[: w.engine_live.size] |= w.engine_live
        return peak_imbalance(totals[live])

    @property
    def generated(self) -> float:
        return float(self.series("generated").sum())

    @property
    def processed(self) -> float:
        return float(self.series("processed").sum())

    @property
    def missed(self) -> float:
        return float(self.series("missed").sum())

    def summary(self) -> dict[str, Any]:
        """The JSON contract of ``keyshift simulate --json``."""
        rstds = self.series("rstd")
        engines = self.series("engines")
        return {
            "windows": len(self.windows),
            "simulated_s": len(self.windows) * self.window_s,
            "generated": self.generated,
            "processed": self.processed,
            "missed": self.missed,
            "queued_end": self.queued_end,
            "throughput_mean": self.processed / max(len(self.windows) * self.window_s, 1e-9),
            "rstd_mean": float(rstds.mean()) if rstds.size else 0.0,
            "rstd_p95": float(np.percentile(rstds, 95)) if rstds.size else 0.0,
            "var_mean": float(self.series("var").mean()) if self.windows else 0.0,
            "var_std": float(self.series("var").std()) if self.windows else 0.0,
            "rebalances": self.rebalances,
            "moved_groups": self.moved_groups,
            "moved_state": self.moved_state,
            "migration_pause_s": self.migration_pause_s,
            "latency_p50_s": latency_percentile(self.latency_hist, self.tick_s, 0.50),
            "latency_p95_s": latency_percentile(self.latency_hist, self.tick_s, 0.95),
            "engine_seconds": float(engines.sum() * self.window_s),
            "engines_mean": float(engines.mean()) if engines.size else 0.0,
            "scale_events": len(self.scales),
            "wall_s": self.wall_s,
            "engine_totals": self.engine_totals().tolist(),
            "imbalance": self.imbalance(),
        }
