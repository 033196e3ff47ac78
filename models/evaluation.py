"""Scoring and the model comparison of elastic-cep Table II: every forecaster is fitted on
the head of one series and scored on its tail with the correlation coefficient (CC), mean
absolute error (MAE), root mean squared error (RMSE) and the training time.

The tail is the most recent part of the series, never a random sample: forecasting the future
from the past is the only use the planner makes of these models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from keyshift.errors import FieldError
from models.baselines import NNForecaster, SeasonalNaive, SVMForecaster
from models.features import FeatureError, rate_features, to_epoch_seconds
from models.gp import InputRateGP


class SeriesError(FieldError):
    """A series file or a split is unusable; the message names the field."""


def score(y_true: Any, y_pred: Any) -> dict[str, float]:
    """CC, MAE and RMSE of a forecast. CC is 0 when either side is constant (undefined)."""
    y_true = np.asarray(y_true, dtype=np.float64).reshape(-1)
    y_pred = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if y_true.shape != y_pred.shape:
        raise SeriesError("y_pred", f"{y_pred.size} predictions for {y_true.size} targets")
    if y_true.size == 0:
        raise SeriesError("y_true", "nothing to score")
    err = y_pred - y_true
    if y_true.std() > 0 and y_pred.std() > 0:
        cc = float(np.corrcoef(y_true, y_pred)[0, 1])
    else:
        cc = 0.0
    return {"cc": cc, "mae": float(np.abs(err).mean()), "rmse": float(np.sqrt((err ** 2).mean()))}


def read_series_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(epoch seconds, values) from a CSV with a header and columns ``ts`` and ``value``.

    ``ts`` is an ISO time or unix seconds; ``timestamp`` is accepted for ``ts`` so the NAB
    files read as they are. Rows are sorted by time; any unparseable cell is an error that
    names the column and the first bad line, because a silently dropped row shifts the split.
    """
    p = Path(path)
    if not p.is_file():
        raise SeriesError("series", f"{p} does not exist or is not a file")
    try:
        frame = pd.read_csv(p, dtype=str, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise SeriesError("series", f"{p} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise SeriesError("series", f"{p} is not a readable CSV ({exc})") from None
    columns = {c.strip().lower(): c for c in frame.columns}
    ts_col = columns.get("ts") or columns.get("timestamp")
    if ts_col is None or "value" not in columns:
        raise SeriesError("series", f"{p} needs a header with columns 'ts' and 'value', got "
                          f"{list(frame.columns)}")
    if frame.empty:
        raise SeriesError("series", f"{p} has a header but no rows")
    raw_ts = frame[ts_col].str.strip()
    raw_v = frame[columns["value"]]
    values = pd.to_numeric(raw_v, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        line = int(np.argmax(bad)) + 2
        raise SeriesError("value", f"line {line}: {raw_v.iloc[line - 2]!r} is not a finite number")
    numeric = pd.to_numeric(raw_ts, errors="coerce")
    if numeric.notna().all():
        t = numeric.to_numpy(np.float64)
    else:
        parsed = pd.to_datetime(raw_ts, utc=True, errors="coerce", format="mixed")
        if parsed.isna().any():
            line = int(np.argmax(parsed.isna().to_numpy())) + 2
            raise SeriesError("ts", f"line {line}: {raw_ts.iloc[line - 2]!r} is neither an ISO "
                              "time nor unix seconds")
        try:
            t = to_epoch_seconds(parsed)
        except FeatureError as exc:
            raise SeriesError("ts", str(exc)) from None
    if not np.isfinite(t).all():
        raise SeriesError("ts", "contains non-finite times")
    order = np.argsort(t, kind="stable")
    return t[order], values[order]


def split_tail(n: int, test_fraction: float, min_train: int = 10, min_test: int = 2) -> int:
    """Index where the held-out tail starts; errors name ``test_fraction`` or the series."""
    if not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise SeriesError("test_fraction", f"must be in (0, 1), got {test_fraction!r}")
    cut = int(round(n * (1 - test_fraction)))
    if cut < min_train or n - cut < min_test:
        raise SeriesError("series", f"{n} rows leave {cut} for training and {n - cut} for "
                          f"testing; need at least {min_train} and {min_test}")
    return cut


def default_models(gp_iters: int = 60, kernel: str = "auto",
                   seed: int = 0) -> dict[str, Callable[[], Any]]:
    """Factories of the Table II line-up plus the sparse GP and the seasonal-naive bar."""
    return {
        "gp": lambda: InputRateGP(kernel=kernel, iters=gp_iters, seed=seed),
        "gp-sparse": lambda: InputRateGP(kernel=kernel, method="sgpr", iters=gp_iters,
                                         inducing=128, seed=seed),
        "svm": lambda: SVMForecaster(),
        "nn": lambda: NNForecaster(seed=seed),
        "seasonal-naive": lambda: SeasonalNaive(),
    }


def compare(
    t: np.ndarray,
    values: np.ndarray,
    test_fraction: float = 0.3,
    models: dict[str, Callable[[], Any]] | None = None,
    names: Iterable[str] | None = None,
    max_train: int | None = 2000,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit each model on the head of the series and score it on the tail.

    ``max_train`` keeps the most recent head rows for EVERY model alike (an exact GP cannot
    take ten thousand rows, and a fair comparison gives all models the same data).
    """
    factories = models or default_models()
    chosen = list(names) if names is not None else list(factories)
    unknown = [n for n in chosen if n not in factories]
    if unknown:
        raise SeriesError("models", f"unknown {unknown}; known: {sorted(factories)}")
    if max_train is not None and max_train < 2:
        raise SeriesError("max_train", f"must be >= 2, got {max_train}")
    cut = split_tail(len(t), test_fraction)
    X = rate_features(t)
    start = 0 if max_train is None else max(0, cut - max_train)
    X_tr, y_tr, X_te, y_te = X[start:cut], values[start:cut], X[cut:], values[cut:]
    results: dict[str, Any] = {}
    predictions: dict[str, np.ndarray] = {}
    for name in chosen:
        if progress:
            progress(name)
        model = factories[name]()
        started = time.perf_counter()
        model.fit(X_tr, y_tr)
        train_s = time.perf_counter() - started
        mean, _ = model.predict(X_te)
        predictions[name] = mean
        results[name] = {**score(y_te, mean), "train_s": train_s}
        if getattr(model, "kernel_", None):
            results[name]["kernel"] = model.kernel_
    return {
        "n_train": int(cut - start),
        "n_test": int(len(t) - cut),
        "models": results,
        "test_ts": t[cut:],
        "test_y": y_te,
        "predictions": predictions,
    }
