"""``keyshift forecast``: the elastic-cep Table II comparison on any series, as a
rolling-origin backtest (:func:`keyshift.models.evaluation.backtest`).

Fits the structured GP, an RBF SVM, a neural network, seasonal naive and the seasonal profile
before each of ``--origins`` origins of a CSV series and prints, pooled over the origins, MAE,
RMSE, MASE (against seasonal naive), CC, the 90 % interval's coverage and training time, as a
table or as JSON (``--json``), optionally with a PNG of the tail and every model's forecast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from keyshift.cli import UsageError

READS_CONFIG = False  # keyshift.cli: no --config

SUMMARY = "compare the GP forecaster with other models on your series"

# keyshift.models.gp.KERNELS of the input-rate GP (the latency GP's load terms do not apply to
# a series), for the help text: building the parser of every keyshift command must not
# import the model layer (0.3 s); tests/models/test_forecast_cli.py keeps the two equal
KERNELS = ("ard", "ard+local", "ard+daily", "ard+weekly", "ard+daily+weekly")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "forecast",
        help=SUMMARY,
        description="Rolling-origin backtest: fit every model on the history before each "
                    "origin, forecast the next points; MAE, RMSE, MASE, CC, 90 % coverage, "
                    "training seconds.",
    )
    p.add_argument("--series", required=True, metavar="FILE.csv",
                   help="CSV with header, columns ts (ISO time or unix seconds) and value")
    p.add_argument("--test-fraction", type=float, default=0.3, metavar="F",
                   help="share of the most recent rows forecast, split over the origins "
                        "(default 0.3; ignored with --horizon)")
    p.add_argument("--origins", type=int, default=5, metavar="K",
                   help="forecast origins, consecutive (default 5)")
    p.add_argument("--horizon", type=int, default=None, metavar="H",
                   help="points forecast from each origin (default: the test fraction / K)")
    p.add_argument("--models", default="gp,svm,nn,seasonal-naive,seasonal-profile",
                   help="comma list among gp, gp-alone (the GP without seasonal naive and "
                        "the profile alone as rivals), gp-eq8, gp-sparse, svm, nn, "
                        "seasonal-naive, seasonal-profile")
    p.add_argument("--max-train", type=int, default=None, metavar="N",
                   help="at most N rows before each origin for every model (default: all; "
                        "SVM and NN take the last 2,000 of them)")
    p.add_argument("--kernel", default="ard|ard+local", metavar="K[|K...]",  # evaluation.DEFAULT_KERNEL
                   help=f"GP kernel on the profile's residual, one of {', '.join(KERNELS)}, or "
                        "several joined by '|' (or auto: all), the one that forecast the "
                        "held-out tail of the training window best kept at each origin "
                        "(default ard|ard+local: Eq. 8, with a local term where it helps)")
    p.add_argument("--iters", type=int, default=60, help="GP optimiser steps (default 60)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the models' fits (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the tail and the forecasts")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from keyshift.models.evaluation import (
        SeriesError,
        backtest,
        default_models,
        read_series_csv,
    )
    from keyshift.models.gp import KERNELS as GP_KERNELS
    from keyshift.models.gp import ModelInputError, unknown_kernels

    if args.iters < 1:
        raise UsageError(f"--iters: must be >= 1, got {args.iters}")
    if unknown := unknown_kernels(args.kernel):
        raise UsageError(f"--kernel: {unknown[0]!r} is not one of auto, {', '.join(GP_KERNELS)}")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names:
        raise UsageError("--models: empty list")
    try:
        t, values = read_series_csv(args.series)
        factories = default_models(gp_iters=args.iters, kernel=args.kernel, seed=args.seed)
        kwargs = dict(origins=args.origins, horizon=args.horizon,
                      test_fraction=None if args.horizon else args.test_fraction,
                      models=factories, names=names, max_train=args.max_train)
        if args.json:
            result = backtest(t, values, **kwargs)
        else:
            from rich.console import Console

            console = Console(stderr=True)
            with console.status("fitting") as status:
                result = backtest(t, values, **kwargs,
                                  progress=lambda n: status.update(f"fitting {n}"))
    except (SeriesError, ModelInputError) as exc:
        raise UsageError(str(exc)) from None
    if args.plot:
        _plot(result, Path(args.plot), Path(args.series).name)
    out = {
        "series": str(args.series),
        "test_fraction": args.test_fraction,
        "n_train": result["n_train"],
        "n_test": result["n_test"],
        "origins": result["origins"],
        "horizon": result["horizon"],
        "models": result["models"],
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _table(out)
    return 0


def _table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{out['series']}: {out['origins']} origins × {out['horizon']} points "
                        f"({out['n_test']} forecast), {out['n_train']} rows before the first")
    for col in ("model", "MAE", "RMSE", "MASE", "CC", "cover 90%", "train s", "kernel"):
        table.add_column(col, justify="left" if col in ("model", "kernel") else "right")
    for name, m in out["models"].items():
        table.add_row(name, f"{m['mae']:.4g}", f"{m['rmse']:.4g}", f"{m['mase']:.3f}",
                      f"{m['cc']:.3f}", f"{m['coverage_90']:.1%}", f"{m['train_s']:.2f}",
                      m.get("kernel", ""))
    console = Console(file=sys.stdout)
    console.print(table)
    for name, m in out["models"].items():  # which forecaster each origin's fit became
        if m.get("choice"):
            console.print(f"{name} chose, per origin: {m['choice']}", highlight=False)


def _plot(result: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x = (np.asarray(result["test_ts"]) - result["test_ts"][0]) / 3600.0
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(x, result["test_y"], ".", color="tab:red", ms=3, label="observed")
    for name, pred in result["predictions"].items():
        ax.plot(x, pred, lw=1, label=name)
    ax.set_xlabel("hours after the first origin")
    ax.set_ylabel("value")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
