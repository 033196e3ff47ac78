"""The nightly retrain (docs/design.md, "Batch layer"): metrics history → features → both
GPs → MLflow run (params, held-out metrics and plots, the history's Delta table version, models
with signatures) → registry (with a description per version) → champion alias.

Champion rule: the new version takes the alias only if its RMSE on this run's held-out tail is
lower than the current champion's RMSE on the SAME tail (the champion is re-scored here, never
compared through numbers it logged on other data). A champion that cannot be loaded any more
loses to any new version. The registered model is exactly the one that was scored (fitted on
the head); serving adds the windows since then through ``add_observations``.

A new model that *ties* the champion (the same RMSE on the same tail, e.g. a rerun on the same
history) is not registered: it would be a copy under a new number, and a night that produced
nothing new must not look like one that did (the retrain's asset event starts the baselines).
The run still records its metrics, plots and the decision.
"""

from __future__ import annotations

import time
from typing import Any

import mlflow
import numpy as np
import pandas as pd

from keyshift.config import Config, config_workload
from keyshift.models.evaluation import score, split_tail
from keyshift.models.features import TIMESTAMP_COLUMN, build_features, with_topic_rates
from keyshift.models.gp import GPForecaster, InputRateGP, LatencyGP
from keyshift.models.registry import (
    EXPERIMENT,
    WORKLOAD_TAG,
    RegistryError,
    alias_version,
    ensure_experiment,
    load_version,
    log_forecaster,
    model_name,
    tracking,
)
from keyshift.models.review import (
    DeltaSource,
    log_held_out_plots,
    log_training_data,
    version_description,
)

DEFAULT_MIN_ROWS = 48


def _champion_decision(cfg: Config, client, which: str, new_rmse: float,
                       X_test: np.ndarray, y_test: np.ndarray, workload: str) -> dict[str, Any]:
    name = model_name(cfg, which, workload)
    current = alias_version(client, name, cfg.mlflow.alias)
    if current is None:
        return {"move": True, "previous": None, "champion_rmse": None,
                "reason": f"no {cfg.mlflow.alias} yet"}
    try:
        champion = load_version(cfg, which, current, workload)
        champion_rmse = score(y_test, champion.predict(X_test)[0])["rmse"]
    except RegistryError as exc:
        return {"move": True, "previous": current, "champion_rmse": None,
                "reason": f"current {cfg.mlflow.alias} v{current} unreadable: {exc}"}
    if ties(new_rmse, champion_rmse):
        return {"move": False, "tie": True, "previous": current, "champion_rmse": champion_rmse,
                "reason": f"new RMSE {new_rmse:.6g} ties v{current}'s {champion_rmse:.6g} on "
                          "the same held-out tail: no new version"}
    better = new_rmse < champion_rmse
    verdict = "beats" if better else "does not beat"
    return {"move": better, "previous": current, "champion_rmse": champion_rmse,
            "reason": f"new RMSE {new_rmse:.6g} {verdict} v{current}'s {champion_rmse:.6g} "
                      "on the same held-out tail"}


def ties(new_rmse: float, champion_rmse: float, rel: float = 1e-9) -> bool:
    """Equal up to float noise: the same fit scored twice differs in the last bits only."""
    return abs(new_rmse - champion_rmse) <= rel * max(abs(new_rmse), abs(champion_rmse), 1e-300)


def train_and_register(
    metrics: pd.DataFrame,
    cfg: Config,
    test_fraction: float = 0.2,
    min_rows: int = DEFAULT_MIN_ROWS,
    kernel: str = "auto",
    iters: int = 60,
    experiment: str = EXPERIMENT,
    source: DeltaSource | None = None,
    workload: str | None = None,
    rate_history: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Fit, log, register and maybe promote both forecasters of one workload (default:
    ``cfg``'s, :func:`keyshift.config.config_workload`) on its ``metrics`` rows; return a
    summary. Each version is tagged with its workload (``keyshift.models.registry``).

    ``source`` names the Delta table version ``metrics`` was read at; the run logs it as
    its input dataset, and each version's description cites it.

    ``rate_history`` (rows of ``input_rates``: the topic's own past) joins the input-rate
    model's rows where no run measured the window. A model with fewer than ``min_rows``
    usable windows is not fitted (its entry says so, ``skipped``); both so returns
    ``{"skipped": reason}``: a fresh deployment is not a failure. An unreachable store raises
    :class:`RegistryError` before any model is fitted.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction: must be in (0, 1), got {test_fraction!r}")
    if min_rows < 4:
        raise ValueError(f"min_rows: must be >= 4, got {min_rows!r}")
    workload = workload or config_workload(cfg)
    X_rate, y_rate, X_lat, y_lat = build_features(metrics, cfg.controller.window_s)
    if rate_history is not None and len(rate_history):
        X_rate, y_rate = with_topic_rates(X_rate, y_rate, rate_history)
    usable = {"input_rate": len(y_rate), "latency": len(y_lat)}
    if max(usable.values()) < min_rows:
        return {"skipped": f"{min(usable.values())} usable metrics rows, need at least "
                           f"{min_rows}", "rows": len(metrics), "workload": workload}
    # each model on its own rows: the topic's past gives the input rate days of history
    # before the operator ever ran, while the latency model waits for runs of it
    jobs: list[tuple[str, type[GPForecaster], np.ndarray, np.ndarray]] = [
        (which, cls, X, y) for which, cls, X, y in (
            ("input_rate", InputRateGP, X_rate, y_rate),
            ("latency", LatencyGP, X_lat, y_lat)) if usable[which] >= min_rows]
    summary: dict[str, Any] = {"rows": len(metrics), "workload": workload, "models": {
        which: {"name": model_name(cfg, which, workload), "version": None, "registered": False,
                "champion_moved": False, "previous_champion": None, "champion_rmse": None,
                "skipped": True, "metrics": {},
                "reason": f"{n} usable rows, need at least {min_rows}"}
        for which, n in usable.items() if n < min_rows}}
    if rate_history is not None:
        summary["topic_rows"] = len(rate_history)
    with tracking(cfg) as client:
        experiment_id = ensure_experiment(client, cfg, experiment)
        run_name = f"retrain-{workload}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name) as run:
            summary["run_id"] = run.info.run_id
            mlflow.log_params({"test_fraction": test_fraction, "rows": len(metrics),
                               "kernel_requested": kernel, "iters": iters,
                               "workload": workload,
                               "topic_rows": 0 if rate_history is None else len(rate_history)})
            mlflow.set_tag(WORKLOAD_TAG, workload)
            log_training_data(metrics, source)
            for which, cls, X, y in jobs:
                cut = split_tail(len(y), test_fraction, min_train=3, min_test=2)
                gp = cls(kernel=kernel, iters=iters, cycle=cfg.models.cycle).fit(X[:cut],
                                                                                 y[:cut])
                mean = gp.predict(X[cut:])[0]
                held_out = score(y[cut:], mean)
                held_out["train_s"] = gp.train_seconds_
                log_held_out_plots(which, X[cut:, TIMESTAMP_COLUMN], y[cut:], mean,
                                   *gp.interval(X[cut:], 0.9))
                mlflow.log_params({f"{which}.{k}": v for k, v in gp.get_params().items()})
                # get_params() already logged the requested kernel ("auto" possibly): the one
                # chosen by marginal likelihood gets its own key (MLflow params are write-once)
                mlflow.log_params({f"{which}.kernel_chosen": gp.kernel_,
                                   f"{which}.profile_stat_chosen": gp.profile_stat_ or "none",
                                   f"{which}.cycle_chosen": gp.cycle_ or "none",
                                   f"{which}.half_life_chosen": (
                                       "none" if gp.half_life_ is None else
                                       "last cycle" if gp.half_life_ == 0 else gp.half_life_),
                                   f"{which}.forecaster_chosen": gp.choice_[:500],
                                   f"{which}.n_train": cut, f"{which}.n_test": len(y) - cut})
                # what the choice compared, for a reviewer: each candidate's marginal
                # likelihood and, when blocks were held out, its mean absolute error on them
                # (in the GP's target units: events/s, or log seconds for the latency GP)
                mlflow.log_dict({"chosen": {"kernel": gp.kernel_,
                                            "profile_stat": gp.profile_stat_,
                                            "cycle": gp.cycle_, "half_life": gp.half_life_,
                                            "forecaster": gp.choice_,
                                            "why": gp.choice_reason_},
                                 "forecaster_held_out_mae": gp.choice_errors_,
                                 "profile_held_out_mae": gp.cycle_errors_,
                                 "marginal_log_likelihood": gp.kernel_scores_,
                                 "held_out_mae": gp.kernel_errors_,
                                 "interval_scale": gp.interval_scale_,
                                 "variance_scale": gp.variance_scale_},
                                f"{which}/candidates.json")
                mlflow.log_metrics({f"{which}_{k}": float(v) for k, v in held_out.items()})
                mlflow.log_metrics({f"{which}_hp_{k}": v
                                    for k, v in gp.hyperparameters().items()})
                name = model_name(cfg, which, workload)
                decision = _champion_decision(cfg, client, which, held_out["rmse"],
                                              X[cut:], y[cut:], workload)
                if decision["champion_rmse"] is not None:
                    mlflow.log_metric(f"{which}_champion_rmse", decision["champion_rmse"])
                entry = {"name": name, "metrics": held_out, "kernel": gp.kernel_,
                         "forecaster": gp.choice_, "why": gp.choice_reason_,
                         "profile_stat": gp.profile_stat_,
                         "champion_moved": bool(decision["move"]),
                         "previous_champion": decision["previous"],
                         "champion_rmse": decision["champion_rmse"],
                         "reason": decision["reason"]}
                mlflow.set_tag(f"{which}.champion", decision["reason"])
                if decision.get("tie"):
                    summary["models"][which] = {**entry, "version": None, "registered": False}
                    continue
                version = log_forecaster(gp, which, name, X[cut:])
                if decision["move"]:
                    client.set_registered_model_alias(name, cfg.mlflow.alias, version)
                client.set_model_version_tag(name, version, WORKLOAD_TAG, workload)
                client.set_model_version_tag(name, version, "holdout_rmse",
                                             f"{held_out['rmse']:.6g}")
                client.set_model_version_tag(name, version, "champion_decision",
                                             decision["reason"])
                client.update_model_version(name, version, description=version_description(
                    which, gp.feature_names, X[:cut, TIMESTAMP_COLUMN],
                    X[cut:, TIMESTAMP_COLUMN], held_out, gp.kernel_, source,
                    decision["reason"], gp.choice_, gp.choice_reason_))
                summary["models"][which] = {**entry, "version": version, "registered": True}
    return summary



def split_workloads(metrics: pd.DataFrame, cfg: Config) -> dict[str, pd.DataFrame]:
    """``metrics`` by workload, each workload's rows in their order. Rows without one
    (written before runs recorded their workload) count as ``cfg``'s own workload: the
    config's default operator and topic are what those runs most likely were."""
    own = config_workload(cfg)
    if "workload" not in metrics.columns:
        return {own: metrics} if len(metrics) else {}
    names = metrics["workload"].astype(object).where(metrics["workload"].notna(), own)
    return {str(w): metrics[names == w] for w in dict.fromkeys(names)}
