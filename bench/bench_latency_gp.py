"""The paper's Table II (elastic-cep §IV) on latency that keyshift's own Spark job measured.

The paper trained its latency GP on the first 1,400 of 2,000 windows of its Dublin-bus CEP
job and tested on the last 600: GP CC 0.94, MAE 0.58, RMSE 0.86, 11.56 s to train; NN 0.86,
0.83, 1.27, 3.1 s; SVM 0.85, 0.88, 1.33, 3.0 s. This bench asks the same of
:class:`keyshift.models.gp.LatencyGP` on windows of the real job.

``--collect`` (about 35 minutes, opt-in) makes the history: a private broker (free ports,
temporary home) gets one topic, ``keyshift run --app traffic --policy elb`` reads it (a
subprocess, as a user starts it), and this process sends the Dublin SIRI bus reports of
``data/dublin_siri_20130131_first10k.csv`` to it, cycled (10,000 real reports,
628 real areas and their real skew; each re-sent report gets a new id and the send time),
at a rate that follows the shape of a real series: consecutive half-hours of the NYC taxi
demand (``nab_nyc_taxi.csv``), one per ``--segment-s`` seconds, scaled to
[``--rate-low``, ``--rate-high``] events/s; by default four days of it (192 half-hours, 10 s
each), so that the chronological test tail (the last 30 %) holds more than a whole day of the
cycle, nights with one or two engines included, as a test of a model of N must (a first
collection of two days at 15 s each left only busy hours in its tail). The Dublin file alone is 10,000 reports over six
hours, one burst at 6 am: too few and too flat to load a job for hundreds of windows.
N changes inside the run through ELB's absolute band (``controller.band_low/band_high``
events per engine per window, elb-clb Algorithm 1: π = ⌈2w/(u+v)⌉ when an engine leaves
the band), so the history holds several engine counts in both halves of the chronological
split, and a wide band keeps N still while the window's size moves inside it. Afterwards the
job's ``metrics`` Delta table is read as the nightly retrain reads it
(:func:`keyshift.jobs.history.read_metrics`) and turned into the latency GP's rows by
:func:`keyshift.models.features.build_features` with the job's ``controller.window_s``; the
rows go to ``bench/data/latency_windows.csv``, the run's ``metrics`` rows themselves (one per
micro-batch) to ``latency_metrics.csv``, how they were made to the ``.json`` beside them.

Evaluate (default, seconds, no Spark): the CSV split chronologically, the first 70 % to train
and the last 30 % to test (the paper's 1400/600); LatencyGP with Eq. 8 alone, with the
local term, with the load term (its default) and ``auto``, SVM and NN (:mod:`keyshift.models.baselines`) on the same features,
all fitted once on the head and forecasting the whole tail, as the paper did; then the GP as
the job uses it (conditioned on each test window after forecasting it, no refit) and the
persistence forecast (the previous window's latency), the one-step-ahead pair. Scores by
:func:`keyshift.models.evaluation.score`; ``mase`` is MAE over the persistence forecast's MAE
on the same windows; ``coverage_90`` of a GP is that of its own 90 % interval
(:meth:`~keyshift.models.gp.GPForecaster.interval`, log-normal, so not mean ± 1.645 std),
of SVM/NN their constant residual band's; train s the median of ``--repeats`` fits.

    .venv/bin/python bench/bench_latency_gp.py                      # the table, seconds
    .venv/bin/python bench/bench_latency_gp.py --json out.json
    .venv/bin/python bench/bench_latency_gp.py --window-s 10        # the same run, 10 s windows
    .venv/bin/python bench/bench_latency_gp.py --collect            # ~35 min of Spark, once
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_stream's helpers, also when imported by a test

from bench_stream import config_env, keyshift_exe, parse_run_json

from keyshift.datasets import data_file
from keyshift.models.evaluation import score, split_tail
from keyshift.models.features import LATENCY_FEATURES, METRICS_COLUMNS, build_features

DATA = HERE / "data" / "latency_windows.csv"
METRICS = HERE / "data" / "latency_metrics.csv"
"""The same run's ``metrics`` rows (one per micro-batch, the columns the features are built
from): ``--window-s`` sums them into other statistic windows, as the retrain would."""
DUBLIN = "dublin_siri_20130131_first10k.csv"  # in data/ (keyshift.datasets)
SHAPE = "nab_nyc_taxi.csv"
TARGET = "latency_s"
COLUMNS = (*LATENCY_FEATURES, TARGET)
TEST_FRACTION = 0.3  # the paper's 600 of 2,000
RANDOM_SPLITS = 5  # draws of the random-split diagnostic
PARTITIONS = 4
PAPER = {  # elastic-cep Table II: latency forecast, 1,400 windows to train, 600 to test
    "gp": {"cc": 0.94, "mae": 0.58, "rmse": 0.86, "train_s": 11.56},
    "nn": {"cc": 0.86, "mae": 0.83, "rmse": 1.27, "train_s": 3.1},
    "svm": {"cc": 0.85, "mae": 0.88, "rmse": 1.33, "train_s": 3.0},
}


class InputError(ValueError):
    """A CSV or an argument the evaluation cannot use; the message names it (exit 2)."""


# --- evaluate ------------------------------------------------------------------------------
def read_windows(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Features (the latency GP's columns, in order) and latency of the saved windows,
    oldest first; a missing column or a bad cell is an :class:`InputError` naming it."""
    if not path.is_file():
        raise InputError(f"{path}: no such file (make it with --collect)")
    frame = pd.read_csv(path, comment="#")
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; has {list(frame.columns)}")
    values = frame.loc[:, list(COLUMNS)].apply(pd.to_numeric, errors="coerce").to_numpy()
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise InputError(f"{path}: row {row + 1}, column {COLUMNS[col]}: not a finite number")
    if (values[:, -1] <= 0).any():
        raise InputError(f"{path}: column {TARGET}: every latency must be > 0")
    values = values[np.argsort(values[:, 0], kind="stable")]
    return values[:, :-1], values[:, -1]


def read_metrics_windows(path: Path, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Features and latency of the windows of ``window_s`` seconds that
    :func:`~keyshift.models.features.build_features` makes of saved ``metrics`` rows (the
    nightly retrain's path); a missing column or an unusable window is an
    :class:`InputError`."""
    if not path.is_file():
        raise InputError(f"{path}: no such file (--collect writes it beside the windows)")
    frame = pd.read_csv(path)
    missing = [c for c in METRICS_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; has {list(frame.columns)}")
    try:
        _, _, X, y = build_features(frame, window_s)
    except ValueError as exc:  # a FeatureError names the column
        raise InputError(f"{path}: {exc}") from exc
    return X, y


ONLINE = {"gp (ard, Eq. 8)": "gp (ard), online", "gp (ard+load)": "gp (ard+load), online"}
"""The GPs also run as the job runs them (forecast a window, condition on it), and the rows
they report under."""


def _models(seed: int, iters: int) -> dict[str, Any]:
    from keyshift.models.baselines import NNForecaster, SVMForecaster
    from keyshift.models.gp import LatencyGP

    return {
        "gp (ard, Eq. 8)": lambda: LatencyGP(kernel="ard", iters=iters, seed=seed),
        "gp (ard+local)": lambda: LatencyGP(kernel="ard+local", iters=iters, seed=seed),
        "gp (ard+load)": lambda: LatencyGP(kernel="ard+load", iters=iters, seed=seed),
        "gp (auto)": lambda: LatencyGP(kernel="auto", iters=iters, seed=seed),
        "svm": lambda: SVMForecaster(),
        "nn": lambda: NNForecaster(seed=seed),
    }


def _fit(factory, X: np.ndarray, y: np.ndarray, repeats: int) -> tuple[Any, float]:
    times, model = [], None
    for _ in range(repeats):
        model = factory()
        started = time.perf_counter()
        model.fit(X, y)
        times.append(time.perf_counter() - started)
    return model, statistics.median(times)


def _gp_coverage(gp, X: np.ndarray, y: np.ndarray) -> float:
    lo, hi = gp.interval(X, 0.9)
    return float(((y >= lo) & (y <= hi)).mean())


def evaluate(X: np.ndarray, y: np.ndarray, test_fraction: float = TEST_FRACTION,
             repeats: int = 3, iters: int = 60, seed: int = 0) -> dict[str, Any]:
    """Table II on (X, y): every model's scores on the chronological tail (see the module
    doc), plus what the GP learnt about the features (ARD length scales) and how strongly
    each feature alone correlates with log latency."""
    if repeats < 1:
        raise InputError(f"--repeats: must be >= 1, got {repeats}")
    cut = split_tail(len(y), test_fraction, min_train=10, min_test=3)
    X_tr, y_tr, X_te, y_te = X[:cut], y[:cut], X[cut:], y[cut:]
    persistence = y[cut - 1:-1]  # each test window forecast by the window before it
    naive_mae = float(np.abs(persistence - y_te).mean())
    rows: dict[str, dict[str, float]] = {}
    relevance: dict[str, dict[str, float]] = {}
    online: dict[str, Any] = {}
    for name, factory in _models(seed, iters).items():
        model, train_s = _fit(factory, X_tr, y_tr, repeats)
        mean, std = model.predict(X_te)
        rows[name] = {**score(y_te, mean, std, naive_mae), "train_s": train_s}
        if name.startswith("gp"):
            rows[name]["coverage_90"] = _gp_coverage(model, X_te, y_te)
            relevance[name] = model.hyperparameters()
        if name in ONLINE:
            online[name] = model
    # the GP as the job runs it: forecast a window, then condition on it (no refit)
    for name, label in ONLINE.items():
        gp = online[name]
        means, covered = np.empty(len(y_te)), np.empty(len(y_te), dtype=bool)
        for i in range(len(y_te)):
            x = X_te[i:i + 1]
            means[i] = gp.predict(x)[0][0]
            lo, hi = gp.interval(x, 0.9)
            covered[i] = lo[0] <= y_te[i] <= hi[0]
            gp.add_observations(x, y_te[i:i + 1])
        rows[label] = {**score(y_te, means, None, naive_mae),
                       "coverage_90": float(covered.mean()),
                       "train_s": rows[name]["train_s"]}
    rows["persistence"] = {**score(y_te, persistence, None, naive_mae), "train_s": 0.0}
    log_y = np.log(y)
    diagnostics = _diagnostics(X, y, cut, iters, seed)
    alone = {f: (float(np.corrcoef(X[:, j], log_y)[0, 1]) if X[:, j].std() > 0 else 0.0)
             for j, f in enumerate(LATENCY_FEATURES)}
    engines = X[:, LATENCY_FEATURES.index("engines")]
    return {
        "n_train": int(cut), "n_test": len(y_te),
        "engines_train": sorted({int(e) for e in engines[:cut]}),
        "engines_test": sorted({int(e) for e in engines[cut:]}),
        "latency_s": {"min": float(y.min()), "median": float(np.median(y)),
                      "max": float(y.max())},
        "models": rows, "paper": PAPER, "gp_hyperparameters": relevance,
        "cc_log_latency_vs_feature": alone, "diagnostics": diagnostics,
    }


def _diagnostics(X: np.ndarray, y: np.ndarray, cut: int, iters: int, seed: int
                 ) -> dict[str, float]:
    """What limits the Eq. 8 GP's CC, in two refits that are not forecasts: the same split
    with the calendar columns (timestamp, time of day, day of week) held constant, so only
    engines and window size explain latency (over a history of minutes the calendar columns
    are one clock, extrapolated past the training window on the tail); and a random split
    of the same size, whose test windows come from the whole history: how much of the
    latency's variance the features explain when the test holds every regime (the median
    CC of ``RANDOM_SPLITS`` draws)."""
    from keyshift.models.gp import LatencyGP

    calendar = [LATENCY_FEATURES.index(f) for f in ("timestamp", "time_of_day", "day_of_week")]
    flat = X.copy()
    flat[:, calendar] = 0.0
    gp = LatencyGP(kernel="ard", iters=iters, seed=seed).fit(flat[:cut], y[:cut])
    no_calendar = score(y[cut:], gp.predict(flat[cut:])[0])["cc"]
    random_split = []
    for draw in range(RANDOM_SPLITS):
        test = np.zeros(len(y), dtype=bool)
        test[np.random.default_rng(seed + draw).choice(len(y), len(y) - cut,
                                                       replace=False)] = True
        gp = LatencyGP(kernel="ard", iters=iters, seed=seed).fit(X[~test], y[~test])
        random_split.append(score(y[test], gp.predict(X[test])[0])["cc"])
    return {"cc_chronological_without_calendar": no_calendar,
            "cc_random_split": float(np.median(random_split)),
            "test_latency_std_over_train_std": float(y[cut:].std() / y[:cut].std())}


def print_table(result: dict[str, Any], source: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    table = Table(title=f"latency forecast, Table II: {result['n_train']} windows to train, "
                        f"{result['n_test']} to test ({source})")
    for col in ("model", "CC", "MAE ms", "RMSE ms", "MASE vs persistence", "coverage 90 %",
                "train s", "paper CC / MAE / RMSE / train s"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, r in result["models"].items():
        key = "gp" if name.startswith("gp (ard, Eq") else name
        p = result["paper"].get(key)
        paper = (f"{p['cc']:.2f} / {p['mae']:.2f} / {p['rmse']:.2f} / {p['train_s']:.2f}"
                 if p else "")
        cov = r.get("coverage_90")
        table.add_row(name, f"{r['cc']:.3f}", f"{1000 * r['mae']:.3f}",
                      f"{1000 * r['rmse']:.3f}", f"{r['mase']:.3f}",
                      "" if cov is None else f"{100 * cov:.1f}", f"{r['train_s']:.2f}", paper)
    console.print(table)
    lat = result["latency_s"]
    console.print(f"latency per tuple: min {1000 * lat['min']:.3f} ms, median "
                  f"{1000 * lat['median']:.3f} ms, max {1000 * lat['max']:.3f} ms; engines in "
                  f"the training windows {result['engines_train']}, in the test windows "
                  f"{result['engines_test']}. The paper's MAE/RMSE are in its own latency "
                  "units (not stated in ms): compare CC and the ratios, not the magnitudes.",
                  highlight=False)
    console.print("CC of log latency with each feature alone: " + ", ".join(
        f"{k} {v:+.2f}" for k, v in result["cc_log_latency_vs_feature"].items()),
        highlight=False)
    d = result["diagnostics"]
    console.print(f"diagnostics (refits, not forecasts), gp (ard): CC on the same tail with the "
                  f"calendar columns held constant {d['cc_chronological_without_calendar']:.3f}; "
                  f"median CC on {RANDOM_SPLITS} random splits of the same size {d['cc_random_split']:.3f}; "
                  f"latency std of the test windows / of the training windows "
                  f"{d['test_latency_std_over_train_std']:.2f}", highlight=False)
    for name, hp in result["gp_hyperparameters"].items():
        console.print(f"{name} hyper-parameters: " + ", ".join(
            f"{k} {v:.3g}" for k, v in hp.items()), highlight=False)


# --- collect -------------------------------------------------------------------------------
def rate_schedule(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Rates (events/s) with the shape of ``values``, min-max scaled to [low, high]."""
    values = np.asarray(values, dtype=np.float64)
    if not 0 < low < high:
        raise InputError(f"--rate-low/--rate-high: need 0 < low < high, got {low}, {high}")
    span = values.max() - values.min()
    if values.size == 0 or span <= 0:
        raise InputError("rate shape: needs at least two different values")
    return low + (high - low) * (values - values.min()) / span


class DublinCycle:
    """The real Dublin bus reports as an event generator for the producer's rate control:
    ``batch`` hands out the next ``count`` reports of the file (from the start again at its
    end), each with a new id and the send time, so the job sees real areas and delays at
    the rate the bench chooses."""

    def __init__(self, path: Path) -> None:
        from keyshift.workloads.replay import dublin_bus

        self.events = list(dublin_bus(path))
        if not self.events:
            raise InputError(f"{path}: no Dublin SIRI rows")
        self.next = 0
        self.sent = 0
        self.run = uuid.uuid4().hex[:6]

    def batch(self, count: int, t_s: float, now_ms: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            e = self.events[self.next]
            self.next = (self.next + 1) % len(self.events)
            out.append({**e, "id": f"{e['id']}-{self.run}-{self.sent}", "ts": now_ms})
            self.sent += 1
        return out


def _produce_schedule(cfg, topic: str, rates: np.ndarray, segment_s: float,
                      say) -> Iterator[dict[str, Any]]:
    from keyshift.streaming.kafka_client import client_options
    from keyshift.streaming.producer import connect, produce

    gen = DublinCycle(data_file(DUBLIN))
    for i, rate in enumerate(rates):
        producer = connect(cfg.kafka.bootstrap, security=client_options(cfg.kafka))
        stats = produce(producer, topic, gen, rate=float(rate), duration_s=segment_s)
        say(f"segment {i + 1}/{len(rates)}: {float(rate):6.0f} events/s asked, "
            f"{stats.rate:6.0f} sent")
        yield {"segment": i, "rate_asked": float(rate), "rate_sent": stats.rate,
               "sent": stats.good}


def _read_history(cfg, start: datetime) -> pd.DataFrame:
    """The run's ``metrics`` rows as the nightly retrain reads them (a Spark session here)."""
    from keyshift.jobs.history import DayRange, read_metrics
    from keyshift.lakehouse.session import get_spark

    spark = get_spark(cfg, app_name="bench-latency-gp-read")
    try:
        today = datetime.now(UTC).date()
        metrics, _ = read_metrics(spark, cfg, DayRange(start.date(), today))
    finally:
        spark.stop()
    return metrics


def _wait_running(job: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until the job says it runs (its session and query are up): events sent before would
    reach it as one backlog batch, not at the schedule's rate."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"keyshift run exited {job.returncode} at start; see {log}")
        if log.is_file() and "running " in log.read_text(errors="replace"):
            return
        time.sleep(1.0)
    raise RuntimeError(f"keyshift run did not start within {timeout_s:g} s; see {log}")


def collect(args: argparse.Namespace, say=print) -> int:
    from keyshift.config import load_config
    from keyshift.streaming import broker as brokers
    from keyshift.streaming import kafka_client as clients

    taxi = pd.read_csv(data_file(SHAPE))["value"].to_numpy(np.float64)
    shape = taxi[args.shape_start:args.shape_start + args.points]
    rates = rate_schedule(shape, args.rate_low, args.rate_high)
    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-latency-"))
    port, controller_port = brokers.free_port(), brokers.free_port()
    while controller_port == port:
        controller_port = brokers.free_port()
    overrides = {
        "home": str(home),
        "kafka": {"port": port, "controller_port": controller_port, "partitions": PARTITIONS},
        "spark": {"master": args.master, "trigger_s": args.trigger_s},
        "controller": {"window_s": args.window_s, "band_low": args.band_low,
                       "band_high": args.band_high},
        "engines": {"initial": args.engines_min, "min": args.engines_min,
                    "max": args.engines_max},
        "metrics": {"port": 0},
    }
    cfg = load_config(env={}, **overrides)
    topic, run_id = f"latency-{uuid.uuid4().hex[:6]}", f"latency-{uuid.uuid4().hex[:6]}"
    logs = home / "logs"
    logs.mkdir()
    started, load_before = datetime.now(UTC), os.getloadavg()
    t0 = time.monotonic()
    broker = brokers.Broker.from_config(cfg)
    say(f"collect: broker {broker.start()}; home {home}")
    segments: list[dict[str, Any]] = []
    job = None
    summary: dict[str, Any] = {}
    try:
        clients.create_topic(cfg.kafka.bootstrap, topic, PARTITIONS)
        with open(logs / "run.out", "w") as out, open(logs / "run.log", "w") as err:
            job = subprocess.Popen(
                [keyshift_exe(), "run", "--app", "traffic", "--topic", topic, "--policy", "elb",
                 "--engines", str(args.engines_min), "--run-id", run_id, "--json"],
                stdout=out, stderr=err, env=config_env(overrides))
            say(f"collect: run {run_id} (traffic, elb band [{args.band_low:g}, "
                f"{args.band_high:g}] events/engine/window, window {args.window_s:g} s, "
                f"engines {args.engines_min}..{args.engines_max}); {len(rates)} segments of "
                f"{args.segment_s:g} s at {rates.min():.0f}..{rates.max():.0f} events/s")
            _wait_running(job, logs / "run.log", args.start_timeout_s)
            for seg in _produce_schedule(cfg, topic, rates, args.segment_s, say):
                segments.append(seg)
                if job.poll() is not None:
                    raise RuntimeError(f"keyshift run exited {job.returncode}; see {logs}")
            time.sleep(args.drain_s)  # the job reads what is still in the topic
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=600)
        if job.returncode != 0:
            raise RuntimeError(f"keyshift run exited {job.returncode}; see {logs / 'run.log'}")
        summary = parse_run_json((logs / "run.out").read_text())
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        broker.stop()
    metrics = _read_history(cfg, started)
    metrics = metrics[metrics["run_id"] == run_id]
    _, _, X_lat, y_lat = build_features(metrics, cfg.controller.window_s)
    frame = pd.DataFrame(X_lat, columns=list(LATENCY_FEATURES)).assign(**{TARGET: y_lat})
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out_path, index=False, float_format="%.15g")
    rows = metrics.loc[:, [*METRICS_COLUMNS, "run_id"]].sort_values("window_start")
    rows = rows.assign(window_start=pd.to_datetime(rows["window_start"], utc=True))
    rows.to_csv(out_path.with_name(METRICS.name), index=False, float_format="%.15g")
    engines = frame["engines"].astype(int)
    meta = {
        "made_by": "bench/bench_latency_gp.py " + " ".join(sys.argv[1:]),
        "args": {k: v for k, v in vars(args).items() if k not in ("json_out",)},
        "started_utc": started.isoformat(timespec="seconds"),
        "collection_s": round(time.monotonic() - t0, 1),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "workload": "traffic operator (keyshift/apps/traffic.py) on the Dublin SIRI reports "
                    f"of {DUBLIN}, cycled; rate: {SHAPE} values "
                    f"{args.shape_start}..{args.shape_start + args.points - 1} scaled to "
                    f"[{args.rate_low:g}, {args.rate_high:g}] events/s, "
                    f"{args.segment_s:g} s each",
        "scaling": f"ELB absolute band [{args.band_low:g}, {args.band_high:g}] events per "
                   f"engine per window, engines {args.engines_min}..{args.engines_max}",
        "window_s": cfg.controller.window_s,
        "metrics_rows": len(metrics), "windows": len(frame),
        "windows_per_engine_count": {str(k): int(v) for k, v in
                                     engines.value_counts().sort_index().items()},
        "job_summary": {k: summary.get(k) for k in ("batches", "events_in", "migrations",
                                                    "moved_groups", "batch_p50_s",
                                                    "batch_p95_s", "dead_letter")},
        "segments": segments,
    }
    out_path.with_suffix(".json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    say(f"collect: {len(frame)} windows from {len(metrics)} metrics rows in "
        f"{meta['collection_s'] / 60:.1f} min, engines {meta['windows_per_engine_count']}; "
        f"wrote {out_path}, {METRICS.name} and {out_path.with_suffix('.json').name}; "
        f"home {home}")
    return 0


# --- the command ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(DATA), help=f"the windows (default {DATA.name})")
    ap.add_argument("--repeats", type=int, default=3, help="fits per model; train s is their "
                    "median (default 3)")
    ap.add_argument("--iters", type=int, default=60, help="Adam steps of each GP fit (60)")
    ap.add_argument("--limit", type=int, default=None, help="evaluate the first N windows only")
    ap.add_argument("--window-s", type=float, default=None,
                    help="evaluate on the run's metrics rows (--metrics) summed into windows "
                         "of this many seconds, as the retrain builds them; with --collect, "
                         "the job's statistic window (default 2)")
    ap.add_argument("--metrics", default=str(METRICS),
                    help=f"the run's metrics rows, for --window-s (default {METRICS.name})")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the result here")
    c = ap.add_argument_group("collect (--collect: runs Kafka and Spark, about 35 minutes)")
    c.add_argument("--collect", action="store_true", help="make the CSV from a real run")
    c.add_argument("--out", default=str(DATA), help="where --collect writes the CSV")
    c.add_argument("--points", type=int, default=192,
                   help="taxi half-hours of the rate shape (192: four days)")
    c.add_argument("--shape-start", type=int, default=0, help="first taxi half-hour used")
    c.add_argument("--segment-s", type=float, default=10.0, help="seconds per shape point")
    c.add_argument("--rate-low", type=float, default=30.0, help="events/s at the shape's min")
    c.add_argument("--rate-high", type=float, default=600.0, help="events/s at its max")
    c.add_argument("--trigger-s", type=float, default=2.0, help="micro-batch trigger")
    c.add_argument("--band-low", type=float, default=100.0,
                   help="ELB band, events per engine per window (low)")
    c.add_argument("--band-high", type=float, default=300.0, help="ELB band (high)")
    c.add_argument("--engines-min", type=int, default=1)
    c.add_argument("--engines-max", type=int, default=8)
    c.add_argument("--drain-s", type=float, default=20.0,
                   help="seconds the job keeps reading after the last segment")
    c.add_argument("--master", default="local[2]")
    c.add_argument("--start-timeout-s", type=float, default=300.0,
                   help="seconds the job may take to start")
    args = ap.parse_args(argv)
    if args.collect:
        args.window_s = 2.0 if args.window_s is None else args.window_s
        for name in ("segment_s", "window_s", "trigger_s", "drain_s"):
            if not getattr(args, name) > 0:
                ap.error(f"--{name.replace('_', '-')}: must be > 0")
        if args.points < 2 or not 1 <= args.engines_min <= args.engines_max:
            ap.error("--points >= 2 and 1 <= --engines-min <= --engines-max")
        return collect(args)
    try:
        if args.window_s is None:
            source = Path(args.csv).name
            X, y = read_windows(Path(args.csv))
        else:
            if not args.window_s > 0:
                raise InputError(f"--window-s: must be > 0, got {args.window_s}")
            source = f"{Path(args.metrics).name} in {args.window_s:g} s windows"
            X, y = read_metrics_windows(Path(args.metrics), args.window_s)
        if args.limit is not None:
            if args.limit < 13:
                raise InputError(f"--limit: must be >= 13, got {args.limit}")
            X, y = X[:args.limit], y[:args.limit]
        result = evaluate(X, y, repeats=args.repeats, iters=args.iters)
    except (InputError, ValueError) as exc:
        print(f"bench_latency_gp: {exc}", file=sys.stderr)
        return 2
    print_table(result, source)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
