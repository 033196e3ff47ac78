"""Shared helpers for the experiments' output: markdown tables, PNG time-series plots and the
report folder. Every experiment prints its tables with :func:`markdown_table` and writes
its plots here, so all reports look alike and any module may import this one.

Matplotlib runs with the Agg backend (files only, no display), imported on first use so a
``--json`` run that writes no plot pays nothing for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def fmt(value: Any, digits: int = 3) -> str:
    """Numbers for humans: thousands separators for big ones, 3 significant digits else."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    x = float(value)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e12 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{max(digits - 1 - int(math.floor(math.log10(abs(x)))), 0)}f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells go through :func:`fmt`."""
    cells = [[fmt(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"
        for r in cells
    ]
    return "\n".join([line, sep, *body])


def show_progress(args: Any) -> bool:
    """Progress bars only for a person watching a terminal, never with --json."""
    import sys

    return not getattr(args, "json", False) and sys.stderr.isatty()


def report_dir(requested: str | None, scenario: str) -> Path:
    """``--report-dir`` or ``<home>/reports/<scenario>/``, created."""
    if requested:
        path = Path(requested).expanduser()
    else:
        from keyshift.config import load_config

        path = load_config().home_path / "reports" / scenario
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_series(
    path: Path,
    x: np.ndarray,
    series: Mapping[str, np.ndarray],
    title: str,
    ylabel: str,
    xlabel: str = "time (s)",
    logy: bool = False,
) -> Path:
    """One line per series on a shared time axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, y in series.items():
        ax.plot(x[: len(y)], y, label=label, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8, ncol=min(len(series), 4))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_engine_loads(path: Path, loads: np.ndarray, window_s: float, title: str) -> Path:
    """Windows × engines as stacked areas: who carried the load, window by window."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(loads.shape[0]) * window_s
    if loads.shape[1] <= 32:
        ax.stackplot(x, (loads / window_s).T, linewidth=0.3)
        ax.set_ylabel("tuples/s per engine (stacked)")
    else:
        im = ax.imshow(
            (loads / window_s).T, aspect="auto", origin="lower", interpolation="nearest",
            extent=(0, x[-1] + window_s if x.size else 1, 0, loads.shape[1]),
        )
        fig.colorbar(im, ax=ax, label="tuples/s")
        ax.set_ylabel("engine slot")
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_bars(
    path: Path, labels: Sequence[str], values: Mapping[str, Sequence[float]], title: str,
    ylabel: str,
) -> Path:
    """Grouped bars: one group per label, one bar per series (ours vs the paper's)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    k = len(values)
    width = 0.8 / max(k, 1)
    xs = np.arange(len(labels))
    for i, (name, ys) in enumerate(values.items()):
        ys = [np.nan if y is None else y for y in ys]
        ax.bar(xs + (i - (k - 1) / 2) * width, ys, width, label=name)
    ax.set_xticks(xs, labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def time_series_plots(
    out: Path, prefix: str, results: Mapping[str, Any], window_s: float
) -> list[Path]:
    """The three standard plots of a set of runs (label → SimResult): throughput, RSTD and
    the engines' loads of each run."""
    paths = []
    first = next(iter(results.values()))
    x = np.arange(len(first.windows)) * window_s
    paths.append(
        plot_series(
            out / f"{prefix}_throughput.png", x,
            {k: r.series("throughput") for k, r in results.items()},
            f"{prefix}: processed tuples/s per window", "tuples/s",
        )
    )
    paths.append(
        plot_series(
            out / f"{prefix}_rstd.png", x, {k: r.series("rstd") for k, r in results.items()},
            f"{prefix}: imbalance of the engines' loads (RSTD)", "RSTD (%)",
        )
    )
    for label, r in results.items():
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)
        paths.append(
            plot_engine_loads(
                out / f"{prefix}_loads_{safe}.png", r.engine_load_matrix(), window_s,
                f"{prefix} / {label}: load per engine",
            )
        )
    return paths
