"""Elasticity evaluation (elastic-cep §IV, Fig. 14–17) on real periodic load series.

``keyshift simulate --scenario elastic [--series taxi|tweets|bikes|all] [--json]
[--report-dir D]`` replays a real series (NYC taxi passengers per 30 min, AAPL tweet volume
per 5 min, DC bike rentals per hour; see data/README.md), scaled to tuples per
window, through the planner and every baseline, and reports what the paper plots: engines
over time (Fig. 14), cost (Fig. 15), missed tuples (Fig. 16) and planner time against the
horizon (Fig. 17).

Protocol. The first ``--train-frac`` of the series is history: it is replayed under the
threshold scaler (so the monitor sees several engine counts) and the forecasters are fitted
on what the monitor recorded — input tuples per window against time, latency against the
engine count. The rest is the evaluation: every policy starts at the same engine count,
the planner's forecasters get each window's observation online (no refit), and each policy
is billed with Eq. 11 on what really happened. The engine model is
:class:`~keyshift.elastic.capacity.LatencyModel` (sub-linear capacity, noisy latency) in the
per-window replay of :mod:`keyshift.drivers.elastic_replay`.

The input-rate forecaster is the pure-numpy :class:`SeasonalProfile` by default;
``--forecaster gp`` uses the GPyTorch GP of ``models/`` (an entry-point plugin) when installed
(loaded by name at run time, so the pure core does not depend on it).
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from keyshift.datasets import DataMissingError, data_dir, data_file
from keyshift.drivers.elastic_replay import ExecutorModel, ReplayResult, replay
from keyshift.drivers.elastic_sim import run_in_simulator
from keyshift.elastic.baselines import (
    QueueingScaler,
    RateScaler,
    StaticMax,
    ThresholdScaler,
)
from keyshift.elastic.capacity import LatencyModel
from keyshift.elastic.cost import Costs, Forecast
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.forecast import (
    EngineLatency,
    make_series_model,
    one_step_forecasts,
    series_model_names,
)
from keyshift.elastic.path_scaler import PathScaler
from keyshift.elastic.reconfiguration import ReconfigurationCost
from keyshift.elastic.scaler import Scaler

# what `keyshift simulate --scenario NAME -h` shows: the docstring above is for developers
DESCRIPTION = (
    "The elastic-cep paper's section IV evaluation: real periodic load series (taxi, "
    "tweets, bikes) replayed through the engine planner and every scaling baseline. "
    "Reports engines over time, cost, missed tuples and planner time (Figures 14-17)."
)

SERIES = {
    "taxi": ("nab_nyc_taxi.csv", "NYC taxi passengers / 30 min (NAB)"),
    "tweets": ("nab_Twitter_volume_AAPL.csv", "AAPL tweet volume / 5 min (NAB)"),
    "bikes": ("bike_sharing_hour.csv", "DC bike rentals / hour (Fanaee-T & Gama 2013)"),
}
SIM_WINDOWS = 672
"""Default evaluation length inside the tick-level simulator (two weeks of the taxi series)."""
POLICIES = ("planner", "planner-expected", "planner-reserve", "planner-quantile", "static-max",
            "qt", "threshold", "ds2")
"""planner: the paper (Eq. 11 on the means); planner-expected: E[Eq. 11]; planner-reserve:
E[Eq. 11] plus the burst reserve at ``--reserve-quantile`` (keyshift.elastic.reserve);
planner-quantile: E[Eq. 11] plus the forecast's calibrated quantile at
``--forecast-quantile`` (reserve_source "forecast")."""


def _data_dir(arg: str | None) -> Path:
    """``--data-dir``, else ``$KEYSHIFT_DATA``, else the checkout's ``data/``
    (:mod:`keyshift.datasets`)."""
    try:
        return data_dir(arg)
    except DataMissingError as exc:
        raise ElasticInputError("data_dir", str(exc)) from None


def _epoch(text: str, fmt: str) -> float:
    return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.timezone.utc).timestamp()


def load_series(name: str, folder: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(epoch seconds, value) of a real load series of ``data/``, in time order; ``folder``
    overrides the data folder (default: :func:`keyshift.datasets.data_dir`)."""
    if name not in SERIES:
        raise ElasticInputError("series", f"unknown {name!r}; known: {', '.join(SERIES)}")
    try:
        path = data_file(SERIES[name][0], folder)
    except DataMissingError as exc:
        raise ElasticInputError("data_dir", str(exc)) from None
    t, v = [], []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if name == "bikes":
                t.append(_epoch(row["dteday"], "%Y-%m-%d") + 3600.0 * int(row["hr"]))
                v.append(float(row["cnt"]))
            else:
                t.append(_epoch(row["timestamp"], "%Y-%m-%d %H:%M:%S"))
                v.append(float(row["value"]))
    t_arr, v_arr = np.asarray(t), np.asarray(v)
    order = np.argsort(t_arr, kind="stable")
    return t_arr[order], v_arr[order]


def make_scaler(name: str, args: argparse.Namespace, window_s: float) -> Scaler:
    limits = {"max_engines": args.max_engines, "min_engines": 1}
    if name.startswith("planner"):
        ctl = PathScaler(
            **limits, horizon=args.horizon, window_s=window_s, mc=args.mc, ec=args.ec,
            rc=args.rc, theta1=args.theta1, theta2=args.theta2,
            objective="mean" if name == "planner" else "expected",
            reserve_quantile={"planner-reserve": args.reserve_quantile,
                              "planner-quantile": args.forecast_quantile}.get(name, 0.0),
            reserve_history=args.reserve_history,
            reserve_source="forecast" if name == "planner-quantile" else "rise",
        )
        ctl.name = name
        return ctl
    cls = {"static-max": StaticMax, "qt": QueueingScaler, "threshold": ThresholdScaler,
           "ds2": RateScaler}.get(name)
    if cls is None:
        raise ElasticInputError("policy", f"unknown {name!r}; known: {', '.join(POLICIES)}")
    return cls(**limits)


def executor_model(args: argparse.Namespace) -> ExecutorModel | None:
    """Whole executors of ``--engines-per-executor`` engines (None: 0, engines only)."""
    per = int(getattr(args, "engines_per_executor", 0) or 0)
    if per <= 0:
        return None
    return ExecutorModel(per, float(args.executor_startup_s), float(args.executor_release_s))


def evaluate_series(name: str, args: argparse.Namespace, progress=None) -> dict[str, Any]:
    """Train on the head of one series, replay every policy on its tail; results and series."""
    t, value = load_series(name, _data_dir(args.data_dir))
    window_s = float(np.median(np.diff(t)))
    in_sim = args.engine_model == "sim"
    # The simulator's engines serve at one fixed rate: no per-engine overhead, no noise.
    truth = (LatencyModel(base_s=args.base_latency, overhead=0.0, cv=0.0) if in_sim else
             LatencyModel(base_s=args.base_latency, overhead=args.overhead, cv=args.latency_cv))
    k = args.max_engines
    n_train = int(len(t) * args.train_frac)
    if n_train < 48 or len(t) - n_train < args.horizon:
        raise ElasticInputError("train_frac", f"leaves too little history or test for {name}")
    # Peak of the history at --peak-util of the maximum cluster's capacity.
    rate = value / value[:n_train].max() * args.peak_util * float(truth.rate(k))
    tuples = rate * window_s
    costs = Costs(args.mc, args.ec, args.rc)
    windows = args.windows or (SIM_WINDOWS if in_sim else 0)
    stop = len(t) if not windows else min(len(t), n_train + windows)

    history = replay(tuples[:n_train], ThresholdScaler(max_engines=k), truth, window_s, costs,
                     initial_engines=args.initial, seed=args.seed)
    lat_model = EngineLatency().fit(history.engines, history.latency)
    k_range = np.arange(1, k + 1)
    lat_mean, lat_std = lat_model.predict(k_range)
    fitted = make_series_model(args.forecaster).fit(t[:n_train], tuples[:n_train])
    history_fc = None
    predictive = bool(getattr(fitted, "predictive_std", False))
    if "planner-quantile" in args.policies and predictive:
        # σ's calibration before the run: one-step forecasts of the history's second half
        # by the same kind of forecaster, fitted on its first half.
        history_fc = one_step_forecasts(make_series_model(args.forecaster), t[:n_train],
                                        tuples[:n_train], n_train // 2)

    t_test, y_test = t[n_train:stop], tuples[n_train:stop]
    results: dict[str, ReplayResult] = {}
    learned_rc: dict[str, dict[str, Any]] = {}
    runs = []  # (label, policy, learned RC or None)
    for policy in args.policies:
        learned = policy.startswith("planner") and args.rc_source in ("learned", "both")
        if not learned or args.rc_source == "both":
            runs.append((policy, policy, None))
        if learned:
            label = f"{policy} (learned rc)" if args.rc_source == "both" else policy
            runs.append((label, policy, ReconfigurationCost(args.rc, args.mc, 0.0,
                                                             args.rc_prior_changes)))
    for label, policy, reconfiguration in runs:
        rate_fc = copy.deepcopy(fitted)

        def forecast(j: int, horizon: int, rate_fc=rate_fc) -> Forecast:
            ts = t_test[j] + window_s * np.arange(horizon)
            mean, std = rate_fc.predict(ts)
            return Forecast(mean, std, np.tile(lat_mean, (horizon, 1)), np.tile(lat_std, (horizon, 1)),
                            in_predictive=predictive)

        def observe(j: int, obs, rate_fc=rate_fc) -> None:
            rate_fc.update(t_test[j:j + 1], np.array([obs.in_tuples]))

        scaler = make_scaler(policy, args, window_s)
        is_planner = policy.startswith("planner")
        if is_planner and scaler.reserve_quantile > 0:
            # The rises the history showed (what the monitor recorded, like the forecasters).
            scaler.fit_reserve(history.in_tuples, *(history_fc or ()))
        if in_sim:
            results[label] = run_in_simulator(
                y_test, scaler, window_s, args.base_latency, costs, args.initial,
                forecast=forecast if is_planner else None,
                observe=observe if is_planner else None,
                policy=args.sim_policy, seed=args.seed + 1,
                pause_s=args.pause_s if args.sim_pauses else 0.0,
            )
        else:
            results[label] = replay(
                y_test, scaler, truth, window_s, costs, initial_engines=args.initial,
                forecast=forecast if is_planner else None,
                observe=observe if is_planner else None,
                pause_s=args.pause_s, seed=args.seed + 1, reconfiguration=reconfiguration,
                executors=executor_model(args),
            )
            results[label].policy = label
            if reconfiguration is not None:
                learned_rc[label] = reconfiguration.summary(
                    float(np.mean(y_test)) / window_s, window_s)
        if progress is not None:
            progress(name, label)
    return {"series": name, "window_s": window_s, "t": t_test, "in": y_test,
            "capacity_k": float(truth.rate(k)) * window_s, "results": results,
            "lat_fit": lat_model.coef_, "train_windows": n_train, "learned_rc": learned_rc}


def summarise(ev: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    static = ev["results"].get("static-max")
    ref = static.summary() if static is not None else None
    for policy, res in ev["results"].items():
        row = res.summary()
        row["series"] = ev["series"]
        if ref:
            # None: the static maximum missed nothing, so the ratio is undefined.
            row["missed_vs_static"] = (
                row["missed_tuples"] / ref["missed_tuples"] if ref["missed_tuples"] > 0
                else (1.0 if row["missed_tuples"] == 0 else None)
            )
            row["engine_hours_vs_static"] = row["engine_hours"] / ref["engine_hours"]
            if "executor_hours" in row and ref.get("executor_hours"):
                row["executor_hours_vs_static"] = row["executor_hours"] / ref["executor_hours"]
            row["cost_vs_static"] = row["total_cost"] / ref["total_cost"]
        rows.append(row)
    return rows


def planner_timing(horizons=(10, 25, 50, 75, 100), states=(16, 32, 64), repeats=5,
                   seed=0) -> list[dict[str, float]]:
    """Fig. 17: median wall time of one plan (cost model + DP) per (H, K)."""
    from keyshift.elastic.planner import GraphPlanner

    rng = np.random.default_rng(seed)
    rows = []
    for k in states:
        for h in horizons:
            fc = Forecast(rng.random(h) * 1e4 * k, rng.random(h) * 1e3,
                          0.002 * (1 + 0.02 * np.arange(k))[None, :].repeat(h, 0),
                          np.full((h, k), 1e-4))
            planner = GraphPlanner(window_s=60.0)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                planner.plan(fc, engines_now=1)
                times.append((time.perf_counter() - t0) * 1e3)
            rows.append({"horizon": h, "states": k, "median_ms": float(np.median(times))})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if any("executor_hours" in r for r in rows):
        return _executor_table(rows)
    head = ("| series | policy | missed tuples | missed % | × static | engine-h | × static "
            "| total cost | × static | scale actions | plan ms (median) |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['series']} | {r['policy']} | {r['missed_tuples']:.4g} | {r['missed_pct']:.3g} "
            f"| {_missed_ratio(r)} | {r['engine_hours']:.1f} "
            f"| {r.get('engine_hours_vs_static', float('nan')):.2f} | {r['total_cost']:.4g} "
            f"| {r.get('cost_vs_static', float('nan')):.2f} | {r['scale_actions']} "
            f"| {r['planner_ms_median']:.2f} |"
        )
    return "\n".join(lines)


def _executor_table(rows: list[dict[str, Any]]) -> str:
    """With whole executors (``--engines-per-executor``): what a user pays for first."""
    head = ("| series | policy | executor-h | × static | engine-h | × static | missed % "
            "| × static | scale actions |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['series']} | {r['policy']} | {r['executor_hours']:.1f} "
            f"| {r.get('executor_hours_vs_static', float('nan')):.2f} "
            f"| {r['engine_hours']:.1f} | {r.get('engine_hours_vs_static', float('nan')):.2f} "
            f"| {r['missed_pct']:.3g} | {_missed_ratio(r)} | {r['scale_actions']} |")
    return "\n".join(lines)


def _missed_ratio(row: dict[str, Any]) -> str:
    """Missed tuples against the static maximum's (None there: the static missed none)."""
    ratio = row.get("missed_vs_static", float("nan"))
    return "n/a (static 0)" if ratio is None else f"{ratio:.3g}"


def plot_series(ev: dict[str, Any], out: Path, zoom_days: float = 7.0) -> Path:
    """Load and engines over the first ``zoom_days`` (Fig. 14), cumulative cost (Fig. 15) and
    missed tuples (Fig. 16) over the whole evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = (ev["t"] - ev["t"][0]) / 86_400.0
    zoom = days <= zoom_days
    fig, axes = plt.subplots(4, 1, figsize=(11, 12))
    axes[0].plot(days[zoom], ev["in"][zoom], color="black", lw=0.9, label="tuples in")
    axes[0].axhline(ev["capacity_k"], color="grey", ls="--", lw=0.8, label="capacity at max engines")
    axes[0].set_ylabel("tuples / window")
    axes[0].legend(loc="upper right", fontsize=8)
    for policy, res in ev["results"].items():
        axes[1].step(days[zoom], res.engines[zoom], where="post", lw=1.0, label=policy)
        axes[2].plot(days, np.cumsum(res.cost), lw=0.9, label=policy)
        axes[3].plot(days, np.cumsum(res.missed), lw=0.9, label=policy)
    axes[0].set_title(f"first {zoom_days:g} days of the evaluation", fontsize=9)
    axes[1].set_ylabel("engines (Fig. 14)")
    axes[1].set_xlabel("days")
    axes[2].set_ylabel("cumulative cost (Fig. 15)")
    axes[3].set_ylabel("cumulative missed tuples (Fig. 16)")
    axes[3].set_yscale("symlog", linthresh=1.0)
    axes[3].set_xlabel("days into the evaluation")
    axes[1].legend(loc="upper right", fontsize=8, ncol=3)
    axes[2].legend(loc="upper left", fontsize=8, ncol=3)
    fig.suptitle(f"{SERIES[ev['series']][1]}: planner vs baselines")
    fig.tight_layout()
    path = out / f"elastic_{ev['series']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timing(rows: list[dict[str, float]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in sorted({r["states"] for r in rows}):
        sel = [r for r in rows if r["states"] == k]
        ax.plot([r["horizon"] for r in sel], [r["median_ms"] for r in sel], marker="o", label=f"{k} states")
    ax.set_xlabel("horizon H (windows)")
    ax.set_ylabel("planner time (ms, median)")
    ax.set_title("Planner time vs horizon (cf. elastic-cep Fig. 17)")
    ax.legend()
    fig.tight_layout()
    path = out / "elastic_planner_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of this scenario (the generic --scenario/--json/--seed/--report-dir are the
    simulate command's)."""
    g = parser
    g.add_argument("--series", default="all", choices=[*SERIES, "all"])
    g.add_argument("--forecaster", default="seasonal", choices=series_model_names(),
                   help="seasonal: weekly cycle (daily if under two weeks of history); "
                        "seasonal-daily: daily cycle; gp: keyshift.models.gp InputRateGP")
    g.add_argument("--policies", default=",".join(POLICIES),
                   help=f"comma-separated subset of {', '.join(POLICIES)}")
    g.add_argument("--max-engines", type=int, default=16, help="K, the static maximum")
    g.add_argument("--initial", type=int, default=4, help="engines at the start of each part")
    g.add_argument("--horizon", type=int, default=10, help="H windows")
    g.add_argument("--mc", type=float, default=10.0, help="cost per missed tuple")
    g.add_argument("--ec", type=float, default=1.0, help="cost per engine-second")
    g.add_argument("--rc", type=float, default=300.0, help="cost per engine-count change")
    g.add_argument("--rc-source", default="fixed", choices=["fixed", "learned", "both"],
                   help="the planners' RC: fixed (--rc), learned from the measured migrations "
                        "(pause x events/s missed x --mc, --rc as the prior; "
                        "keyshift.elastic.reconfiguration), or both side by side")
    g.add_argument("--rc-prior-changes", type=float, default=3.0,
                   help="learned RC: the prior --rc weighs as this many measured changes")
    g.add_argument("--theta1", type=float, default=0.0, help="arc cost σ bound (0 off)")
    g.add_argument("--theta2", type=float, default=0.25, help="relative prediction error bound (0 off)")
    g.add_argument("--reserve-quantile", type=float, default=1.0,
                   help="planner-reserve: capacity >= max(In_now, forecast) + this quantile of the "
                        "input's one-window rises (1 = the largest seen; 0 = no reserve)")
    g.add_argument("--forecast-quantile", type=float, default=0.9999,
                   help="planner-quantile: capacity >= max(In_now, forecast) + c·σ, c this "
                        "quantile of the surprises in units of the forecast's σ")
    g.add_argument("--reserve-history", type=int, default=0,
                   help="rises the reserve remembers (0 = all)")
    g.add_argument("--train-frac", type=float, default=0.6)
    g.add_argument("--windows", type=int, default=0, help="evaluate at most this many windows (0 all)")
    g.add_argument("--peak-util", type=float, default=0.75,
                   help="history's peak load as a fraction of the maximum capacity")
    g.add_argument("--base-latency", type=float, default=0.002, help="s per tuple, one engine")
    g.add_argument("--overhead", type=float, default=0.02, help="latency growth per added engine")
    g.add_argument("--latency-cv", type=float, default=0.05)
    g.add_argument("--pause-s", type=float, default=5.0, help="processing pause per change")
    g.add_argument("--engines-per-executor", type=int, default=0,
                   help="engines on one whole executor: bill executor-hours (0 = engines only)")
    g.add_argument("--executor-startup-s", type=float, default=3.5,
                   help="request -> registered (measured 2.7-3.5 s, docs/elasticity.md)")
    g.add_argument("--executor-release-s", type=float, default=5.2,
                   help="release -> gone (measured 5.1-5.2 s)")
    g.add_argument("--data-dir", default=None, help="folder of the real data sets (default: $KEYSHIFT_DATA, else the "
                        "checkout's data/)")
    g.add_argument("--engine-model", default="replay", choices=["replay", "sim"],
                   help="replay: per-window model (keyshift.drivers.elastic_replay); sim: the tick-level "
                        f"cluster simulator with key groups and queues (first {SIM_WINDOWS} "
                        "evaluation windows unless --windows)")
    g.add_argument("--sim-policy", default="dlb-h",
                   help="balancing policy inside the simulator (--engine-model sim)")
    g.add_argument("--sim-pauses", action=argparse.BooleanOptionalAction, default=True,
                   help="--engine-model sim: moved key groups pause --pause-s per migration")
    g.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the planner for H = 10..100, 16..64 states (Fig. 17)")


_DEFAULTS: dict[str, Any] = {}


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill options the caller's parser did not define (e.g. a bare Namespace in tests)."""
    if not _DEFAULTS:
        p = argparse.ArgumentParser()
        add_arguments(p)
        _DEFAULTS.update(vars(p.parse_args([])))
        _DEFAULTS.update({"json": False, "seed": 0, "report_dir": None, "engines": None,
                          "policy": None})
    merged = dict(_DEFAULTS)
    merged.update({k: v for k, v in vars(args).items() if v is not None or k not in merged})
    return argparse.Namespace(**merged)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the scenario: print the markdown tables (unless --json), write PNGs, return JSON."""
    args = _with_defaults(args)
    policies = args.policies if isinstance(args.policies, list) else [
        p.strip() for p in str(args.policies).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ElasticInputError("policies", f"unknown {unknown or policies}; known: {', '.join(POLICIES)}")
    if getattr(args, "policy", None):  # the simulate command's generic --policy: just that one
        if args.policy not in POLICIES:
            raise ElasticInputError("policy", f"unknown {args.policy!r}; known: {', '.join(POLICIES)}")
        policies = [args.policy] if args.policy == "static-max" else ["static-max", args.policy]
    args.policies = policies
    if getattr(args, "engines", None):  # generic --engines: the maximum K
        args.max_engines = args.engines
    if args.max_engines < 1 or not 1 <= args.initial <= args.max_engines:
        raise ElasticInputError("initial", f"need 1 <= initial <= max_engines, got {args.initial}, {args.max_engines}")
    if not 0 < args.train_frac < 1:
        raise ElasticInputError("train_frac", f"must be in (0, 1), got {args.train_frac}")
    if args.rc_source != "fixed" and args.engine_model == "sim":
        raise ElasticInputError("rc_source", "a learned RC needs --engine-model replay (the "
                                "simulator's migrations are not measured yet)")
    if not 0 < args.peak_util:
        raise ElasticInputError("peak_util", f"must be > 0, got {args.peak_util}")
    names = list(SERIES) if args.series == "all" else [args.series]
    from keyshift.experiments.report import report_dir

    report = report_dir(args.report_dir, "elastic")

    from rich.progress import Progress

    rows: list[dict[str, Any]] = []
    plots: list[str] = []
    fits: dict[str, Any] = {}
    with Progress(transient=True, disable=bool(args.json)) as bar:
        task = bar.add_task("elastic", total=len(names) * len(policies))

        def progress(series: str, policy: str) -> None:
            bar.update(task, advance=1, description=f"{series}: {policy}")

        for name in names:
            ev = evaluate_series(name, args, progress)
            rows.extend(summarise(ev))
            fits[name] = {"window_s": ev["window_s"], "train_windows": ev["train_windows"],
                          "learned_rc": ev["learned_rc"],
                          "test_windows": int(ev["in"].size),
                          "latency_fit_s": {"a": ev["lat_fit"][0], "b_per_engine": ev["lat_fit"][1]}}
            plots.append(str(plot_series(ev, report)))
    timing = planner_timing() if args.timing else []
    if timing:
        plots.append(str(plot_timing(timing, report)))
    out = {"scenario": "elastic", "forecaster": args.forecaster,
           "engine_model": args.engine_model, "rows": rows, "series": fits,
           "planner_timing": timing, "plots": plots,
           "params": {k: getattr(args, k) for k in ("max_engines", "horizon", "mc", "ec", "rc",
                                                   "rc_source", "rc_prior_changes",
                                                   "theta1", "theta2", "peak_util", "pause_s",
                                                   "reserve_quantile", "forecast_quantile",
                                                   "reserve_history")}}
    if not args.json:
        print(markdown_table(rows))
        if timing:
            print()
            print("| H | states | planner ms (median) |\n|---|---|---|")
            for r in timing:
                print(f"| {r['horizon']} | {r['states']} | {r['median_ms']:.3f} |")
        for p in plots:
            print(f"plot: {p}")
    (report / "elastic.json").write_text(json.dumps(out, indent=2, default=float))
    return out

