"""Champion GPs on a fresh machine (``keyshift demo --seed-history``): a synthetic history of
the demo's own workload that ends *now*, then the nightly retrain on it.

Why: the job's scaler forecasts from the registry's champions, and a new clone has none —
the retrain skips ("too little history") until a streaming job has run for a while, so a
new user would never see a forecast move N. This step writes the history the speed layer
would have written had this workload run for the last hours, and runs the same code as the
nightly DAG's retrain task (:func:`keyshift.jobs.retrain_models.run`) on it.

The history lines up with the demo's clock and units, so the champions' forecast for "now"
continues it: its windows are the controller's statistic windows (``controller.window_s``,
the In and Lat the scaler observes and asks the GPs for), they tile the epoch up to the
current window, the input rate passes through the demo's ``--rate`` at the current time of
day (the daily cycle of :func:`keyshift.jobs.history.daily_shape` around it), and the per-tuple
latency has the shape measured on real runs: a fixed engine time per engine and batch
(``TASK_S``, task start and state load/save) spread over the tuples, plus ``TUPLE_S`` per
tuple. N varies in the history, as if a scaler had run, so the latency GP sees engine counts.
Only ``metrics`` is written: it is all the retrain reads.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from keyshift.config import Config, config_workload
from keyshift.jobs.history import (
    DayRange,
    SyntheticHistory,
    daily_shape,
    synthetic_frames,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUN_ID = "demo-history"
WINDOWS = 1200
"""Windows of history: an exact GP fits both models on them in seconds on two cores."""
TASK_S = 0.03
"""Engine seconds per engine and micro-batch that do not depend on the tuples (measured:
~0.2 ms per tuple at ~150 tuples per engine and batch on a two-core host)."""
TUPLE_S = 5e-5
"""Engine seconds per tuple in a full batch (measured: 0.06 ms on the same host)."""
SCALE_EVERY_WINDOWS = 30
KERNEL = "ard"
"""The paper's kernel (Eq. 8): hours of history hold no daily cycle for a periodic term,
and one kernel trains in a quarter of ``auto``'s time."""


def demo_history(cfg: Config, rate: float, end: datetime) -> SyntheticHistory:
    """The history of a workload of ``rate`` events/s that ran until ``end`` (see module)."""
    window_s = max(round(cfg.controller.window_s), 1)
    batches = max(cfg.controller.window_s / cfg.spark.trigger_s, 1.0)
    return SyntheticHistory(
        days=WINDOWS * window_s / 86400.0, window_s=window_s,
        peak_rate=rate / float(daily_shape(end.timestamp())),
        engines=cfg.engines.max if cfg.planner.max_engines == 0 else cfg.planner.max_engines,
        service_rate=1.0 / TUPLE_S, task_s=TASK_S * batches,
        scale_every_s=SCALE_EVERY_WINDOWS * window_s, seed=14, run_id=RUN_ID, keys=500)


def seed_champions(spark: SparkSession, cfg: Config, rate: float,
                   end: datetime | None = None) -> dict[str, Any]:
    """Write the demo's history ending at ``end`` (default now) into ``metrics`` and retrain
    on the days it touches; returns the retrain's summary with ``history`` (what was
    written) and ``seconds``. Raises what the retrain raises; a ``skipped`` status is the
    caller's to report."""
    from keyshift.jobs import retrain_models
    from keyshift.lakehouse.delta import replace_runs

    started = time.perf_counter()
    end = end or datetime.now(UTC)
    retrain_models.check_tracking_store(cfg.mlflow_tracking_uri)  # seconds, not a write first
    spec = demo_history(cfg, rate, end)
    metrics, _ = synthetic_frames(cfg, end, spec)
    rows = replace_runs(spark, cfg, "metrics", metrics)
    written = time.perf_counter()
    first, last = metrics.window_start.iloc[0], metrics.window_end.iloc[-1]
    days = DayRange(first.date(), last.date())
    result = retrain_models.run(cfg, days, spark=spark, kernel=KERNEL)
    result["workload"] = config_workload(cfg)
    result["history"] = {"run_id": RUN_ID, "rows": rows, "window_s": spec.window_s,
                         "from": first.isoformat(), "to": last.isoformat(),
                         "rate": float(metrics.input_rate.tail(60).mean()),
                         "write_s": round(written - started, 1)}
    result["seconds"] = time.perf_counter() - started
    return result


def champion_line(result: dict[str, Any]) -> str:
    """One line for the terminal: what was seeded and which versions are champions now."""
    h = result["history"]
    head = (f"seeded {h['rows']} windows of {h['window_s']} s ({h['from'][11:16]}–"
            f"{h['to'][11:16]} UTC, {h['rate']:.0f} events/s at the end) in "
            f"{h['write_s']:.0f} s and retrained in {result['seconds'] - h['write_s']:.0f} s")
    if result["status"] != "trained":
        return f"{head}: skipped, {result['reason']}"
    parts = []
    models = seeded_models(result)
    for which in ("input_rate", "latency"):
        m = models[which]
        if m["champion_moved"]:
            parts.append(f"{m['name']} v{m['version']}")
        else:
            parts.append(f"{m['name']} v{m['previous_champion']} (kept: v{m['version']} "
                         "did not beat it)")
    return f"{head}: champions {', '.join(parts)}"


def seeded_models(result: dict[str, Any]) -> dict[str, Any]:
    """The seeded workload's models in the retrain's summary (training's entry per model)."""
    (outcome,) = [o for w, o in result["workloads"].items() if w == result["workload"]]
    return outcome["models"]["models"]


__all__ = ["RUN_ID", "champion_line", "demo_history", "seed_champions", "seeded_models"]
