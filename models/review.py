"""What a reviewer opening a training run or a model version in MLflow sees besides numbers
(issue 15 item 5): the held-out forecast against what happened, its residuals, the Delta
table version the history was read at, and a description of the version in words.

Numbers alone (an RMSE, a CC) do not show *where* a forecast fails — a missed peak, a
lagging level, an interval too narrow at night — nor which data produced it. The plots
answer the first; the lineage (``mlflow.log_input``: the Delta table's path and version)
answers the second, so a reviewer can re-read exactly the rows a version was trained on.
Plots are drawn on Agg figures of their own (no pyplot state, no display needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.models.features import METRICS_COLUMNS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

TARGETS = {
    "input_rate": ("input rate", "events/s"),
    "latency": ("latency per event", "s"),
}
PLOTS = ("forecast_vs_actual", "residuals")
PLOT_DIR = "plots"


@dataclass(frozen=True)
class DeltaSource:
    """The Delta table a training history was read from, at the version it was read at."""

    table: str
    path: str
    version: int

    def __str__(self) -> str:
        return f"Delta table `{self.table}` at {self.path}, version {self.version}"


def plot_path(which: str, plot: str) -> str:
    """Artifact path of a run's plot, e.g. ``plots/input_rate_residuals.png``."""
    return f"{PLOT_DIR}/{which}_{plot}.png"


def _utc(t: np.ndarray) -> np.ndarray:
    return np.asarray(t, dtype=np.float64).astype("datetime64[s]")


def _figure(rows: int = 1, cols: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, **kwargs)


def _time_axis(ax: Any) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_xlabel("window start (UTC)")


def held_out_figures(which: str, t: np.ndarray, actual: np.ndarray, mean: np.ndarray,
                     lower: np.ndarray, upper: np.ndarray) -> dict[str, Figure]:
    """The held-out tail (window starts ``t`` in epoch seconds): forecast mean and 90 %
    interval against the actual values, and the residuals (actual − forecast) over time
    and as a histogram."""
    label, unit = TARGETS[which]
    when = _utc(t)
    fig, ax = _figure()
    ax.fill_between(when, lower, upper, color="tab:blue", alpha=0.2, label="90 % interval")
    ax.plot(when, mean, color="tab:blue", lw=1.2, label="forecast (mean)")
    ax.plot(when, actual, ".", color="tab:red", ms=4, label="actual")
    inside = float(np.mean((actual >= lower) & (actual <= upper)))
    ax.set_title(f"{label}: forecast vs actual on the held-out tail "
                 f"({len(t)} windows, {inside:.0%} inside the 90 % interval)")
    _time_axis(ax)
    ax.set_ylabel(f"{label} [{unit}]")
    ax.legend(loc="upper right", fontsize=8)
    forecast = fig

    residual = np.asarray(actual) - np.asarray(mean)
    fig, (over_time, spread) = _figure(1, 2, width_ratios=(3, 1), sharey=True)
    over_time.axhline(0.0, color="grey", lw=0.8)
    over_time.fill_between(when, lower - mean, upper - mean, color="tab:blue", alpha=0.2,
                           label="90 % interval")
    over_time.plot(when, residual, ".", color="tab:red", ms=4, label="actual − forecast")
    _time_axis(over_time)
    over_time.set_ylabel(f"residual [{unit}]")
    over_time.set_title(f"{label}: residuals (mean {residual.mean():+.3g}, "
                        f"RMSE {np.sqrt(np.mean(residual ** 2)):.3g})")
    over_time.legend(loc="upper right", fontsize=8)
    spread.hist(residual, bins=max(5, min(30, len(residual) // 3)), orientation="horizontal",
                color="tab:red", alpha=0.7)
    spread.axhline(0.0, color="grey", lw=0.8)
    spread.set_title("distribution")
    spread.set_xlabel("windows")
    return {"forecast_vs_actual": forecast, "residuals": fig}


def log_held_out_plots(which: str, t: np.ndarray, actual: np.ndarray, mean: np.ndarray,
                       lower: np.ndarray, upper: np.ndarray) -> list[str]:
    """Log :func:`held_out_figures` into the active run; return their artifact paths."""
    import mlflow

    paths = []
    for plot, fig in held_out_figures(which, t, actual, mean, lower, upper).items():
        mlflow.log_figure(fig, plot_path(which, plot))
        paths.append(plot_path(which, plot))
    return paths


def log_training_data(metrics: pd.DataFrame, source: DeltaSource | None) -> None:
    """Log the history the run trained on as its input dataset: the ``metrics`` rows the
    features are built from, with the Delta table and version as the dataset's source.

    The version is also a tag of the input (and in the dataset's name), because MLflow's
    Delta source leaves version 0 out of what it stores. Without a Delta source (a caller
    that passed a frame of its own) MLflow records the calling code as the source."""
    import mlflow
    from mlflow.data.delta_dataset_source import DeltaDatasetSource

    rows = metrics.loc[:, [c for c in METRICS_COLUMNS if c in metrics.columns]]
    if source is None:
        mlflow.log_input(mlflow.data.from_pandas(rows, name="metrics"), context="training")
        return
    dataset = mlflow.data.from_pandas(
        rows, name=f"{source.table}@v{source.version}",
        source=DeltaDatasetSource(path=source.path, delta_table_version=source.version))
    mlflow.log_input(dataset, context="training",
                     tags={"delta_table": source.table, "delta_path": source.path,
                           "delta_table_version": str(source.version)})


def _day(t: float) -> str:
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M")


def version_description(which: str, features: tuple[str, ...], train_t: np.ndarray,
                        test_t: np.ndarray, held_out: dict[str, float], kernel: str,
                        source: DeltaSource | None, decision: str, choice: str = "",
                        choice_reason: str = "") -> str:
    """The registered version's description (Markdown, shown on its page in MLflow).
    ``choice`` and ``choice_reason`` (the forecaster's ``choice_`` and ``choice_reason_``)
    say which forecaster the training window's last days chose -- a GP on a profile, the
    profile alone or seasonal naive -- and why: a reviewer promoting a version that is
    seasonal naive should know it is."""
    label, unit = TARGETS[which]
    data = str(source) if source is not None else "a metrics frame passed by the caller"
    what = (f"chosen on the training window's last days: {choice} (GP kernel `{kernel}`)"
            if choice else f"a Gaussian process, kernel `{kernel}`")
    lines = [
        (f"Forecasts the {label} [{unit}] of keyshift's stream job for a future window, from "
         f"({', '.join(features)}); {what}. The elasticity "
         "planner reads it through the champion alias."),
        "",
        *([f"- Why this forecaster: {choice_reason}."] if choice_reason else []),
        (f"- Training window: {len(train_t)} windows, {_day(train_t[0])} to "
         f"{_day(train_t[-1])} UTC."),
        (f"- Held out: the next {len(test_t)} windows, {_day(test_t[0])} to "
         f"{_day(test_t[-1])} UTC: RMSE {held_out['rmse']:.4g}, MAE {held_out['mae']:.4g}, "
         f"CC {held_out['cc']:.3f} (plots `{plot_path(which, PLOTS[0])}` and "
         f"`{plot_path(which, PLOTS[1])}` of the run)."),
        f"- Data: {data}.",
        f"- Champion decision: {decision}.",
        ("- Serves with mlflow, numpy and pandas only (pinned in requirements.txt): the "
         "`predictor` artifact is the posterior in JSON and .npz, nothing pickled."),
    ]
    return "\n".join(lines)
