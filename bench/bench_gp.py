"""GP training time and accuracy (elastic-cep §IV, Table II) on a real load series.

Target from the issue: training the GP on 2,000 points in under 5 s on this machine's CPU.
Measured in one process, on one split (the head for training, the next rows as the held-out
tail), medians of several repeats:

- exact GP, hyper-parameters on a strided subset (``hyper_points``, the default) — BASELINE;
- sparse GP (SGPR, inducing points, m = 128) fitted on every row;
- with ``--full`` (minutes, so opt-in): the exact GP with the textbook fit on every row, the
  kernel chosen by marginal likelihood (``auto``: three fits), and SGPR with m = 256;
- the paper's comparison models: RBF SVM, neural network; and the seasonal-naive bar.

Every row reports CC, MAE, RMSE, training seconds (wall and CPU), and the ratio of its
training time and RMSE to the baseline's.

    .venv/bin/python bench/bench_gp.py [--quick] [--repeats N] [--series taxi|bike|twitter]
                                       [--full] [--plot FILE.png] [--online WINDOWS]

``--online`` (default 30 windows) also times the serving step of the planner — one window
added, ten forecast — the old way (GPyTorch refactorises at every prediction) against the
cached Cholesky factor of keyshift.models.gp.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from keyshift.datasets import data_file  # noqa: E402
from keyshift.models.baselines import NNForecaster, SeasonalNaive, SVMForecaster  # noqa: E402
from keyshift.models.evaluation import score  # noqa: E402
from keyshift.models.features import rate_features, to_epoch_seconds  # noqa: E402
from keyshift.models.gp import InputRateGP  # noqa: E402

TARGET_S = 5.0


def load_series(name: str) -> tuple[np.ndarray, np.ndarray, str]:
    if name == "taxi":
        df = pd.read_csv(data_file("nab_nyc_taxi.csv"))
        return to_epoch_seconds(df["timestamp"]), df["value"].to_numpy(float), \
            "NAB nyc_taxi (passengers / 30 min)"
    if name == "twitter":
        df = pd.read_csv(data_file("nab_Twitter_volume_AAPL.csv"))
        return to_epoch_seconds(df["timestamp"]), df["value"].to_numpy(float), \
            "NAB Twitter_volume_AAPL (tweets / 5 min)"
    if name == "bike":
        df = pd.read_csv(data_file("bike_sharing_hour.csv"))
        ts = pd.to_datetime(df["dteday"]) + pd.to_timedelta(df["hr"], unit="h")
        return to_epoch_seconds(ts.dt.tz_localize("UTC")), df["cnt"].to_numpy(float), \
            "UCI bike sharing (rentals / hour)"
    raise SystemExit(f"--series: unknown {name!r}; choose taxi, bike or twitter")


def online_step(console: Console, X_tr, y_tr, X_te, y_te, windows: int, kernel: str,
                iters: int) -> None:
    """The serving loop of the planner: one new window in (``add_observations``), a forecast
    of the next 10 out (``predict``). Before: GPyTorch refactorises K + σ²I at the first
    prediction after every change of its training data, O(n³). Now: the exact posterior's
    Cholesky factor grows by one row, O(n²) (keyshift.models.gp._OnlinePosterior). Same fitted GP,
    same rows; the predictions are compared too."""
    import gpytorch
    import torch

    from keyshift.models.gp import _MAX_CHOLESKY, _ONLINE_SLACK

    if windows > _ONLINE_SLACK:  # before any fit: the comparison holds within one trim period
        raise SystemExit(f"--online: at most {_ONLINE_SLACK} windows (one trim period)")
    gp = InputRateGP(kernel=kernel, iters=iters, max_train=X_tr.shape[0]).fit(X_tr, y_tr)
    state = (gp._X.copy(), gp._y.copy())
    horizon = 10

    def gpytorch_predict(x):
        s = gp._scaling
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(_MAX_CHOLESKY):
            d = gp._likelihood(gp._model(torch.as_tensor(s.x(x), dtype=torch.float64)))
            return d.mean.numpy() * s.y_std + s.y_mean

    def run(old: bool) -> tuple[list[float], list[float], np.ndarray]:
        gp._condition_on(*state)
        wall, cpu, last = [], [], None
        for j in range(windows):
            x_next = X_te[j + 1:j + 1 + horizon]
            t0, c0 = time.perf_counter(), time.process_time()
            if old:
                # The same rows as the cached path (which trims only every _ONLINE_SLACK).
                gp._condition_on(np.vstack([gp._X, X_te[j:j + 1]]),
                                 np.concatenate([gp._y, y_te[j:j + 1]]))
                last = gpytorch_predict(x_next)
            else:
                gp.add_observations(X_te[j:j + 1], y_te[j:j + 1])
                last = gp.predict(x_next)[0]
            wall.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
        return wall, cpu, last

    gp.predict(X_te[:1])  # the first factorisation is part of fitting, not of a step
    old_wall, old_cpu, old_mean = run(old=True)
    gp.predict(X_te[:1])
    new_wall, new_cpu, new_mean = run(old=False)
    table = Table(title=f"online step (1 window in, {horizon} forecast), n = {X_tr.shape[0]}, "
                        f"median of {windows} windows")
    for col in ("path", "wall ms", "CPU ms", "ratio (wall)"):
        table.add_column(col, justify="left" if col == "path" else "right")
    ow, nw = statistics.median(old_wall), statistics.median(new_wall)
    table.add_row("GPyTorch refactorisation (before)", f"{ow:.1f}", f"{statistics.median(old_cpu):.1f}", "1.00")
    table.add_row("cached Cholesky, one row per window", f"{nw:.1f}", f"{statistics.median(new_cpu):.1f}",
                  f"{nw / ow:.3f}")
    console.print(table)
    console.print(f"largest difference of the last forecast means: "
                  f"{float(np.max(np.abs(old_mean - new_mean))):.3g} (target units)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 training points, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--series", default="taxi")
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=600)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--kernel", default="ard+daily")
    ap.add_argument("--full", action="store_true",
                    help="add the exact GP fitted on every row, kernel auto and SGPR m=256")
    ap.add_argument("--plot", help="PNG of the held-out tail and every forecast")
    ap.add_argument("--online", type=int, default=30,
                    help="windows of the online step (add one observation, forecast 10 "
                         "windows) to time, old way vs cached factor; 0 skips")
    args = ap.parse_args()
    n_train = args.n_train or (1000 if args.quick else 2000)
    repeats = args.repeats or (1 if args.quick else 3)

    t, y, title = load_series(args.series)
    if len(y) < n_train + args.n_test:
        raise SystemExit(f"--n-train/--n-test: series has only {len(y)} points")
    # the most recent n_train + n_test points: a forecast of the last stretch of history
    t, y = t[-(n_train + args.n_test):], y[-(n_train + args.n_test):]
    X = rate_features(t)
    X_tr, y_tr, X_te, y_te = X[:n_train], y[:n_train], X[n_train:], y[n_train:]

    k, it = args.kernel, args.iters
    models = {
        "GP exact (baseline)": lambda: InputRateGP(kernel=k, iters=it, max_train=n_train),
        "GP sparse m=128": lambda: InputRateGP(kernel=k, method="sgpr", inducing=128,
                                               iters=it, max_train=n_train),
        "SVM (RBF)": SVMForecaster,
        "neural network": NNForecaster,
        "seasonal naive": SeasonalNaive,
    }
    if args.full:
        models["GP exact, kernel auto"] = lambda: InputRateGP(kernel="auto", iters=it,
                                                              max_train=n_train)
        models["GP sparse m=256"] = lambda: InputRateGP(kernel=k, method="sgpr", inducing=256,
                                                        iters=it, max_train=n_train)
        models["GP exact, fit on all rows"] = lambda: InputRateGP(
            kernel=k, iters=it, max_train=n_train, hyper_points=n_train)

    console = Console(width=120)
    # Warm up: the first fit in a process pays torch/gpytorch/sklearn imports and lazy
    # initialisation, which is not training time.
    for make in models.values():
        make().fit(X_tr[:40], y_tr[:40])
    rows: dict[str, dict[str, float]] = {}
    preds: dict[str, np.ndarray] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("fitting", total=len(models) * repeats)
        for name, make in models.items():
            times, cpu = [], []
            for _ in range(repeats):
                progress.update(task, description=f"fitting {name}")
                model = make()
                started, started_cpu = time.perf_counter(), time.process_time()
                model.fit(X_tr, y_tr)
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
                progress.advance(task)
            mean, _ = model.predict(X_te)
            preds[name] = mean
            rows[name] = {**score(y_te, mean), "train_s": statistics.median(times),
                          "cpu_s": statistics.median(cpu)}

    base = rows["GP exact (baseline)"]
    table = Table(title=f"{title}: train {n_train}, test {len(y_te)}, kernel {k}, "
                        f"{it} Adam steps, median of {repeats}")
    for col in ("model", "CC", "MAE", "RMSE", "train s", "CPU s", "time ratio", "RMSE ratio"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, r in rows.items():
        table.add_row(name, f"{r['cc']:.3f}", f"{r['mae']:.4g}", f"{r['rmse']:.4g}",
                      f"{r['train_s']:.2f}", f"{r['cpu_s']:.2f}",
                      f"{r['train_s'] / base['train_s']:.2f}",
                      f"{r['rmse'] / base['rmse']:.2f}")
    console.print(table)
    verdict = "met" if base["train_s"] < TARGET_S else "NOT met"
    console.print(f"target: exact GP on {n_train} points in < {TARGET_S:.0f} s — {verdict} "
                  f"({base['train_s']:.2f} s wall, {base['cpu_s']:.2f} s CPU; the host is "
                  f"shared, so CPU seconds are the steadier figure). Paper Table II (their latency data): "
                  "GP CC 0.94, NN 0.86, SVM 0.85.")
    if args.online:
        online_step(console, X_tr, y_tr, X_te, y_te, args.online, k, it)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        hours = (t[n_train:] - t[n_train]) / 3600.0
        fig, ax = plt.subplots(figsize=(11, 4))
        ax.plot(hours, y_te, ".", ms=3, color="tab:red", label="observed")
        for name, p in preds.items():
            ax.plot(hours, p, lw=1, label=name)
        ax.set_xlabel("hours into the held-out tail")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        console.print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
