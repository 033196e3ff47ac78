"""``keyshift forecast``: the elastic-cep Table II comparison on any series.

Fits the GP (exact and sparse), an RBF SVM, a neural network and a seasonal-naive forecast on
the head of a CSV series and prints CC, MAE, RMSE and training time on the tail, as a table
or as JSON (``--json``), optionally with a PNG of the tail and every model's forecast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from keyshift.cli import UsageError


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "forecast",
        help="compare the GP forecaster with SVM, NN and seasonal-naive on a series",
        description="Fit every model on the head of a series, score it on the held-out tail "
                    "(CC, MAE, RMSE, training seconds).",
    )
    p.add_argument("--series", required=True, metavar="FILE.csv",
                   help="CSV with header, columns ts (ISO time or unix seconds) and value")
    p.add_argument("--test-fraction", type=float, default=0.3, metavar="F",
                   help="share of the most recent rows held out for scoring (default 0.3)")
    p.add_argument("--models", default="gp,gp-sparse,svm,nn,seasonal-naive",
                   help="comma list among gp, gp-sparse, svm, nn, seasonal-naive")
    p.add_argument("--max-train", type=int, default=2000, metavar="N",
                   help="most recent head rows every model trains on (default 2000)")
    p.add_argument("--kernel", default="auto",
                   choices=["auto", "ard", "ard+daily", "ard+weekly"],
                   help="GP kernel; auto picks by marginal likelihood (default)")
    p.add_argument("--iters", type=int, default=60, help="GP optimiser steps (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the tail and the forecasts")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from models.evaluation import SeriesError, compare, default_models, read_series_csv
    from models.gp import ModelInputError

    if args.iters < 1:
        raise UsageError(f"--iters: must be >= 1, got {args.iters}")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names:
        raise UsageError("--models: empty list")
    try:
        t, values = read_series_csv(args.series)
        factories = default_models(gp_iters=args.iters, kernel=args.kernel, seed=args.seed)
        if args.json:
            result = compare(t, values, args.test_fraction, factories, names, args.max_train)
        else:
            from rich.console import Console

            console = Console(stderr=True)
            with console.status("fitting") as status:
                result = compare(t, values, args.test_fraction, factories, names,
                                 args.max_train,
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

    table = Table(title=f"{out['series']}: train {out['n_train']} rows, test {out['n_test']}")
    for col in ("model", "CC", "MAE", "RMSE", "train s", "kernel"):
        table.add_column(col, justify="left" if col in ("model", "kernel") else "right")
    for name, m in out["models"].items():
        table.add_row(name, f"{m['cc']:.3f}", f"{m['mae']:.4g}", f"{m['rmse']:.4g}",
                      f"{m['train_s']:.2f}", m.get("kernel", ""))
    Console(file=sys.stdout).print(table)


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
    ax.set_xlabel("hours into the held-out tail")
    ax.set_ylabel("value")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
