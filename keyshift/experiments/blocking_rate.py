"""blocking-rate §6: the weighted split of an ordered region against round-robin and an oracle.

Four policies drive the same ordered-region model (:mod:`keyshift.split.region`):
RR (even weights), LB-static (our controller without the exploration decay), LB-adaptive
(with it) and Oracle* (the best weights for the true capacities, computed by Fox on
load/capacity, switched the moment a slowdown is removed). The figures:

- Fig. 9: base tuple cost 1,000 multiplies, half the PEs 10× slower; static, and removed at
  one eighth of the tuples; 2–16 PEs.
- Fig. 10: base cost 10,000, half the PEs 100× slower; static and removed; 2–16 PEs.
- Fig. 13: base cost 60,000, half 100× slower and removed at one eighth; 32 and 64 PEs, with
  clustering.
- Fig. 12: 64 PEs, cost 60,000: 20 PEs 100×, 20 PEs 5×, 24 at base cost; weights over time
  and the clustering heat map.

The model's scale comes from the paper: one PE at cost 1,000 does 1,000 tuples/s and the
splitter saturates at 8 such PEs (§6.3: "8 PEs is the point at which additional parallelism
does not improve performance"); buffers hold 20 ms of base-cost work; the controller runs every
second. Each run processes the tuples the Oracle* needs ``--duration`` seconds for.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keyshift.split import (
    OrderedRegion,
    SplitInputError,
    WeightedSplit,
    even_weights,
    fox_minimax,
)

# what `keyshift simulate --scenario NAME -h` shows: the docstring above is for developers
DESCRIPTION = (
    "The blocking-rate paper's section 6 experiment: the weighted split of an ordered "
    "region, against round-robin and an oracle, while some processing elements slow down "
    "and recover. Prints the data of the paper's Figures 9, 10, 12 and 13."
)

POLICIES = ("RR", "LB-static", "LB-adaptive", "Oracle*")
PE_RATE_AT_1000 = 1000.0  # tuples/s of one PE at a tuple cost of 1,000 multiplies
SPLITTER_RATE = 8 * PE_RATE_AT_1000  # saturates at 8 PEs of cost 1,000 (§6.3)
BUFFER_S = 0.02  # send and merge buffers: 20 ms of base-cost work each
STEP_S = 0.1  # model step
ROUND_S = 1.0  # collection interval of the controller (§3: every second)
FIGURES = ("9", "10", "12", "13")

# What the paper states, per figure, in its own words and numbers (§6.3–6.6).
PAPER: dict[str, str] = {
    "9-static": "LB is 1.5–4× better than RR (2–16 PEs); LB-static ≈ LB-adaptive",
    "9-dynamic": "LB-adaptive ≤ Oracle* at 2–4 PEs; no gain beyond 8 PEs (splitter-bound)",
    "10-static": "LB 1.3–1.8× Oracle*; RR 45× Oracle*; LB-adaptive up to ~30% behind LB-static",
    "10-dynamic": "LB-adaptive final throughput ≈ 2× LB-static; RR final ≈ Oracle* but ≥10× as long",
    "13-dynamic": "LB-static ≈ LB-adaptive total time, both ~9× better than RR; adaptive ends faster",
    "12": "100× PEs at the minimum weight; 5× PEs ≤ 2 %; unloaded PEs ≈ 4 %",
}


@dataclass(frozen=True)
class Case:
    """One configuration of the region: who is slow, by how much, and whether it lasts."""

    figure: str
    connections: int
    slowdown: np.ndarray
    base_cost: int
    removed_at: float | None  # fraction of the tuples after which the slowdown ends
    label: str = ""

    @property
    def scenario(self) -> str:
        return "static" if self.removed_at is None else "dynamic"

    @property
    def rate(self) -> float:
        return PE_RATE_AT_1000 * 1000.0 / self.base_cost


@dataclass
class Run:
    """One policy on one case: totals and the per-interval series."""

    case: Case
    policy: str
    total_time: float = 0.0
    finished: bool = False
    released: float = 0.0
    tuples: float = 0.0
    times: list[float] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)

    def final_throughput(self, share: float = 0.2) -> float:
        """Tuples/s over the last ``share`` of the tuples: the same work for every policy, and
        well after a slowdown that ends at one eighth (the paper's "final throughput")."""
        if not self.times:
            return 0.0
        t = np.concatenate(([0.0], self.times))
        done = np.concatenate(([0.0], self.progress))
        mark = (1.0 - share) * self.tuples
        if done[-1] <= mark:
            return float(self.throughput[-1])
        t_mark = float(np.interp(mark, done, t))
        return float((done[-1] - mark) / max(t[-1] - t_mark, 1e-12))


def _add(p: Any, *flags: str, **kw: Any) -> None:
    """Add an option unless the generic parser already has it (``--duration``, ``--quick``)."""
    known = getattr(p, "_option_string_actions", {})
    if not any(f in known for f in flags):
        p.add_argument(*flags, **kw)


def add_arguments(p: Any) -> None:
    _add(p, "--figures", default=",".join(FIGURES),
         help="comma list among 9, 10, 12, 13 (default all)")
    _add(p, "--connections",
         help="comma list of PE counts for figures 9, 10 and 13 (default 2,4,8,16 and 32,64)")
    _add(p, "--decay", type=float, default=0.1, help="LB-adaptive exploration decay per interval")
    _add(p, "--max-step", type=int, default=50, help="most weight units a PE may move per interval")
    _add(p, "--zero-weight", type=float, default=None,
         help="smoothing weight of a non-blocking interval (default: 0.5 below 32 PEs, else 0)")
    _add(p, "--units", type=int, default=1000, help="weight resolution R (1000 = 0.1 %%)")
    _add(p, "--max-slowdown", type=float, default=60.0,
         help="stop a run at this multiple of the Oracle*'s duration")


def _parse_list(text: str | None, name: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise SplitInputError(f"--{name}", f"expected a comma list of integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise SplitInputError(f"--{name}", "values must be positive integers")
    return values


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    figures = [f.strip() for f in str(getattr(args, "figures", ",".join(FIGURES))).split(",") if f.strip()]
    bad = [f for f in figures if f not in FIGURES]
    if bad or not figures:
        raise SplitInputError("--figures", f"unknown figure {bad[0] if bad else ''!r}; choose among {', '.join(FIGURES)}")
    connections = _parse_list(getattr(args, "connections", None), "connections")
    if connections is not None and any(c < 2 for c in connections):
        raise SplitInputError("--connections", "an ordered region needs ≥ 2 PEs")
    duration = getattr(args, "duration", None) or (25.0 if quick else 60.0)
    if not duration > 0:
        raise SplitInputError("--duration", "must be > 0")
    units = int(getattr(args, "units", 1000))
    if units < 10:
        raise SplitInputError("--units", "must be ≥ 10")
    decay = float(getattr(args, "decay", 0.1))
    if not 0 < decay < 1:
        raise SplitInputError("--decay", "must be in (0, 1)")
    max_step = int(getattr(args, "max_step", 50))
    if max_step < 1:
        raise SplitInputError("--max-step", "must be ≥ 1")
    zero_weight = getattr(args, "zero_weight", None)
    if zero_weight is not None and not 0 <= zero_weight <= 1:
        raise SplitInputError("--zero-weight", "must be in [0, 1]")
    cap = float(getattr(args, "max_slowdown", 60.0))
    if not cap > 1:
        raise SplitInputError("--max-slowdown", "must be > 1")
    return {
        "figures": figures, "connections": connections, "duration": float(duration),
        "units": units, "decay": decay, "max_step": max_step, "cap": cap, "quick": quick,
        "zero_weight": zero_weight,
        "seed": int(getattr(args, "seed", 0) or 0),
    }


def _half_slow(n: int, factor: float) -> np.ndarray:
    s = np.ones(n)
    s[: n // 2] = factor
    return s


def cases(settings: dict[str, Any]) -> list[Case]:
    """The paper's configurations selected by ``--figures`` and ``--connections``."""
    small = settings["connections"] or ([2, 4] if settings["quick"] else [2, 4, 8, 16])
    large = settings["connections"] or ([32] if settings["quick"] else [32, 64])
    out: list[Case] = []
    for fig, factor, cost in (("9", 10.0, 1000), ("10", 100.0, 10000)):
        if fig in settings["figures"]:
            for removed in (None, 0.125):
                out += [Case(fig, n, _half_slow(n, factor), cost, removed) for n in small]
    if "13" in settings["figures"]:
        out += [Case("13", n, _half_slow(n, 100.0), 60000, 0.125) for n in large]
    if "12" in settings["figures"]:
        slow = np.concatenate([np.full(20, 100.0), np.full(20, 5.0), np.ones(24)])
        out.append(Case("12", 64, slow, 60000, None, label="20×100×, 20×5×, 24×1×"))
    return out


def oracle_weights(rates: np.ndarray, units: int) -> np.ndarray:
    """The weights that minimise the largest load/capacity ratio: Fox on F_c(i) = i / rate_c."""
    grid = np.arange(units + 1, dtype=np.float64)
    return fox_minimax(grid[None, :] / rates[:, None], units)


def oracle_throughput(rates: np.ndarray, units: int) -> float:
    w = oracle_weights(rates, units) / units
    used = w > 0
    return float(min(SPLITTER_RATE, (rates[used] / w[used]).min()))


def tuples_for(case: Case, duration: float, units: int) -> float:
    """Tuples the Oracle* processes in ``duration`` seconds (both phases when dynamic)."""
    slow = oracle_throughput(case.rate / case.slowdown, units)
    if case.removed_at is None:
        return duration * slow
    fast = oracle_throughput(np.full(case.connections, case.rate), units)
    return duration / (case.removed_at / slow + (1 - case.removed_at) / fast)


def run_policy(case: Case, policy: str, tuples: float, settings: dict[str, Any], limit_s: float) -> Run:
    """Simulate one policy until all tuples left the merger or ``limit_s`` passed."""
    n, units = case.connections, settings["units"]
    region = OrderedRegion(
        np.full(n, case.rate), SPLITTER_RATE, BUFFER_S * case.rate, BUFFER_S * case.rate,
        dt=STEP_S, seed=settings["seed"],
    )
    region.set_slowdown(case.slowdown)
    controller = None
    if policy == "RR":
        weights = even_weights(n, units)
    elif policy == "Oracle*":
        weights = oracle_weights(case.rate / case.slowdown, units)
    else:
        controller = WeightedSplit(
            units=units, decay=settings["decay"] if policy == "LB-adaptive" else 0.0,
            max_step=settings["max_step"], zero_weight=settings.get("zero_weight"),
        )
        weights = controller.start(n)
    region.set_weights(weights)
    run = Run(case, policy, tuples=tuples)
    slowed = case.removed_at is not None
    while region.clock < limit_s:
        iv = region.run(ROUND_S, stop_at=tuples)
        run.times.append(region.clock)
        run.throughput.append(iv.throughput)
        run.progress.append(region.released)
        if iv.finished:
            run.finished = True
            break
        if slowed and region.released >= case.removed_at * tuples:
            region.set_slowdown(np.ones(n))
            slowed = False
            if policy == "Oracle*":
                weights = oracle_weights(np.full(n, case.rate), units)
        if controller is not None:
            weights = controller.update(iv.blocking_rates)
            run.labels.append(controller.labels_.copy())
        run.weights.append(np.asarray(weights).copy())
        region.set_weights(weights)
    run.total_time = region.clock
    run.released = region.released
    return run


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from rich.progress import Progress

    bar = Progress(transient=True)
    bar.start()
    bar.add_task("blocking-rate runs", total=total)
    return bar


def _table_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per (figure, scenario, PEs): times relative to Oracle*, final throughputs."""
    rows: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        key = (r.case.figure, r.case.scenario, r.case.connections)
        rows.setdefault(key, {"figure": key[0], "scenario": key[1], "connections": key[2], "runs": {}})
        rows[key]["runs"][r.policy] = r
    out = []
    for row in rows.values():
        oracle = row["runs"]["Oracle*"]
        entry = {k: row[k] for k in ("figure", "scenario", "connections")}
        for p, r in row["runs"].items():
            entry[f"time_{p}"] = r.total_time / oracle.total_time if r.finished else None
            entry[f"time_s_{p}"] = r.total_time
            entry[f"finished_{p}"] = r.finished
            entry[f"final_tps_{p}"] = r.final_throughput()
        out.append(entry)
    return out


def _claims(rows: list[dict[str, Any]], fig12: dict[str, Any] | None) -> list[dict[str, str]]:
    """Our numbers for each statement the paper makes (ranges over the PE counts)."""

    def rng(values: list[float | None], digits: int = 2) -> str:
        vals = [v for v in values if v is not None and np.isfinite(v)]
        if not vals:
            return "—"
        lo, hi = min(vals), max(vals)
        return f"{lo:.{digits}f}" if abs(hi - lo) < 10 ** -digits else f"{lo:.{digits}f}–{hi:.{digits}f}"

    def pick(fig: str, scen: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["figure"] == fig and r["scenario"] == scen]

    out = []
    for fig, scen in (("9", "static"), ("9", "dynamic"), ("10", "static"), ("10", "dynamic"), ("13", "dynamic")):
        sel = pick(fig, scen)
        if not sel:
            continue
        rr_vs_lb = [
            r["time_s_RR"] / r["time_s_LB-adaptive"] if r["finished_RR"] and r["finished_LB-adaptive"] else None
            for r in sel
        ]
        ours = (
            f"RR/LB-adaptive time {rng(rr_vs_lb)}×; vs Oracle*: LB-static {rng([r['time_LB-static'] for r in sel])}, "
            f"LB-adaptive {rng([r['time_LB-adaptive'] for r in sel])}, RR {rng([r['time_RR'] for r in sel], 1)}"
        )
        if scen == "dynamic":
            ratio = [r["final_tps_LB-adaptive"] / r["final_tps_LB-static"] for r in sel if r["final_tps_LB-static"] > 0]
            rr = [r["final_tps_RR"] / r["final_tps_Oracle*"] for r in sel if r["final_tps_Oracle*"] > 0]
            ours += f"; final tput LB-adaptive/LB-static {rng(ratio)}, RR/Oracle* {rng(rr)}"
        out.append({"figure": f"{fig}-{scen}", "paper": PAPER[f"{fig}-{scen}"], "ours": ours})
    if fig12:
        cls = fig12["final_weight_pct"]
        out.append({
            "figure": "12",
            "paper": PAPER["12"],
            "ours": f"LB-adaptive final mean weight: 100× {cls['100x']:.2f} %, 5× {cls['5x']:.2f} %, "
                    f"1× {cls['1x']:.2f} % (Oracle*: {fig12['oracle_pct']['100x']:.2f} / "
                    f"{fig12['oracle_pct']['5x']:.2f} / {fig12['oracle_pct']['1x']:.2f} %); "
                    f"{fig12['clusters_final']} clusters at the end, pure by class: {fig12['pure']}",
        })
    return out


def _fig12_summary(runs: list[Run], units: int) -> dict[str, Any] | None:
    lb = next((r for r in runs if r.case.figure == "12" and r.policy == "LB-adaptive"), None)
    if lb is None or not lb.weights:
        return None
    classes = {"100x": slice(0, 20), "5x": slice(20, 40), "1x": slice(40, 64)}
    tail = np.mean(lb.weights[-max(1, len(lb.weights) // 10):], axis=0) * 100.0 / units
    oracle = oracle_weights(lb.case.rate / lb.case.slowdown, units) * 100.0 / units
    labels = lb.labels[-1]
    pure = all(
        len({c for c in np.unique(labels[s])} & {c for k, t in classes.items() if t != s for c in np.unique(labels[t])}) == 0
        for s in classes.values()
    )
    return {
        "final_weight_pct": {k: float(tail[s].mean()) for k, s in classes.items()},
        "oracle_pct": {k: float(oracle[s].mean()) for k, s in classes.items()},
        "clusters_final": int(labels.max()) + 1,
        "pure": bool(pure),
    }


def _plots(out: Path, runs: list[Run], units: int) -> list[str]:
    from keyshift.experiments.report import plot_series

    paths: list[Path] = []
    by_key: dict[tuple, dict[str, Run]] = {}
    for r in runs:
        by_key.setdefault((r.case.figure, r.case.scenario, r.case.connections), {})[r.policy] = r
    for (fig, scen, n), group in by_key.items():
        if fig == "12":
            continue
        stem = f"fig{fig}_{scen}_{n}pe"
        # the balanced runs set the time axis; a much longer RR run is cut at its end
        longest = max((r for p, r in group.items() if p != "RR"), key=lambda r: len(r.times))
        x = np.asarray(longest.times)
        rr = group.get("RR")
        note = f"; RR runs to {rr.total_time:,.0f} s" if rr is not None and len(rr.times) > len(x) else ""
        paths.append(plot_series(
            out / f"{stem}_throughput.png", x,
            {p: np.asarray(r.throughput[: len(x)]) for p, r in group.items()},
            f"Fig. {fig} ({scen}, {n} PEs): tuples/s leaving the merger{note}", "tuples/s", logy=True,
        ))
        lb = group.get("LB-adaptive")
        if lb is not None and lb.weights:
            W = np.asarray(lb.weights) * 100.0 / units
            series = {f"PE {j}" + (" (slow)" if lb.case.slowdown[j] > 1 else ""): W[:, j] for j in range(min(n, 8))}
            paths.append(plot_series(
                out / f"{stem}_weights.png", np.asarray(lb.times[: len(W)]), series,
                f"Fig. {fig} ({scen}, {n} PEs): LB-adaptive allocation weights", "weight (%)",
            ))
    lb12 = next((r for r in runs if r.case.figure == "12" and r.policy == "LB-adaptive"), None)
    if lb12 is not None and lb12.weights:
        paths += _fig12_plots(out, lb12, units)
    return [str(p) for p in paths]


def _fig12_plots(out: Path, run: Run, units: int) -> list[Path]:
    from keyshift.experiments.report import _pyplot

    plt = _pyplot()
    W = np.asarray(run.weights) * 100.0 / units
    L = np.asarray(run.labels)
    t = np.asarray(run.times[: len(W)])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = np.where(run.case.slowdown >= 100, "tab:red", np.where(run.case.slowdown > 1, "tab:orange", "tab:blue"))
    for j in range(W.shape[1]):
        ax1.plot(t, W[:, j], color=colours[j], linewidth=0.6, alpha=0.7)
    ax1.set_title("Fig. 12: weights per PE (red 100×, orange 5×, blue 1×)")
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("weight (%)")
    ax1.grid(alpha=0.3)
    ax2.imshow(L, aspect="auto", interpolation="nearest", cmap="tab20",
               extent=(0, L.shape[1], t[-1] if t.size else 1, 0))
    ax2.set_title("clusters per interval (row = time, column = PE)")
    ax2.set_xlabel("PE")
    ax2.set_ylabel("time (s)")
    fig.tight_layout()
    path = out / "fig12_64pe_weights_clusters.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _markdown(rows: list[dict[str, Any]], claims: list[dict[str, str]], settings: dict[str, Any]) -> str:
    from keyshift.experiments.report import markdown_table

    parts = [
        "## blocking-rate §6: weighted split of an ordered region (execution time ÷ Oracle*, "
        "final throughput in tuples/s)",
        f"model: 1 PE = {PE_RATE_AT_1000:.0f} tuples/s at cost 1,000; splitter {SPLITTER_RATE:.0f} "
        f"tuples/s; buffers {BUFFER_S * 1000:.0f} ms of base work; Oracle* run ≈ {settings['duration']:.0f} s; "
        f"decay {settings['decay']}, max step {settings['max_step']} units of {settings['units']}, "
        f"zero weight {'auto' if settings.get('zero_weight') is None else settings['zero_weight']}",
    ]
    headers = ["fig", "load", "PEs"] + [f"time {p}" for p in POLICIES] + [f"final tps {p}" for p in POLICIES]
    table = []
    for r in rows:
        cells = [r["figure"], r["scenario"], r["connections"]]
        for p in POLICIES:
            v = r.get(f"time_{p}")
            cells.append(v if v is not None else f">{r[f'time_s_{p}'] / r['time_s_Oracle*']:.0f} (cut)")
        cells += [r.get(f"final_tps_{p}") for p in POLICIES]
        table.append(cells)
    parts.append(markdown_table(headers, table))
    if claims:
        parts.append("### the paper's statements beside ours")
        parts.append(markdown_table(["fig", "paper", "ours"], [[c["figure"], c["paper"], c["ours"]] for c in claims]))
    return "\n\n".join(parts)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    settings = _settings(args)
    todo = cases(settings)
    from keyshift.experiments.report import show_progress

    bar = _progress(len(todo) * len(POLICIES), show_progress(args))
    runs: list[Run] = []
    try:
        for case in todo:
            tuples = tuples_for(case, settings["duration"], settings["units"])
            limit = settings["cap"] * settings["duration"]
            for policy in POLICIES:
                runs.append(run_policy(case, policy, tuples, settings, limit))
                if bar is not None:
                    bar.advance(bar.task_ids[0])
    finally:
        if bar is not None:
            bar.stop()
    rows = _table_rows(runs)
    fig12 = _fig12_summary(runs, settings["units"])
    claims = _claims(rows, fig12)
    plots: list[str] = []
    report = getattr(args, "report_dir", None)
    from keyshift.experiments.report import report_dir

    out = report_dir(report, "blocking-rate")
    plots = _plots(out, runs, settings["units"])
    text = _markdown(rows, claims, settings)
    (out / "blocking_rate.md").write_text(text + "\n", encoding="utf-8")
    if not getattr(args, "json", False):
        print(text)
        print(f"\nplots and table in {out}")
    return {
        "scenario": "blocking-rate",
        "processed": float(sum(r.released for r in runs)),
        "wall_s": round(time.perf_counter() - started, 3),
        "settings": {k: v for k, v in settings.items()},
        "rows": rows,
        "claims": claims,
        "fig12": fig12,
        "report_dir": str(out),
        "plots": plots,
    }
