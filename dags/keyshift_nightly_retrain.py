"""Nightly retrain of the input-rate and latency GPs on the Delta ``metrics`` history.

Scheduling only: the work is ``keyshift.jobs.retrain_models`` (see ``keyshift.jobs.airflow_tasks``). A
successful retrain emits the ``keyshift://models/champions`` asset, which schedules
``keyshift_baseline_partitions``.
Trigger with config ``{"days": 7, "to": "2026-11-25", "kernel": "ard+daily"}`` to retrain
on another range or with one kernel instead of the best of all.
"""

from __future__ import annotations

from airflow.sdk import Asset, Param, dag, get_current_context, task

from keyshift.jobs.airflow_tasks import (
    MODELS_ASSET_URI,
    PAUSED_NOTE,
    REPORT_TIMEOUT,
    default_args,
    job_timeout,
    nightly,
)

MODELS = Asset(MODELS_ASSET_URI)


@dag(
    dag_id="keyshift_nightly_retrain",
    description="Refit GP(input rate) and GP(latency) on the metrics history; MLflow champion",
    schedule=nightly("0 2 * * *"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["keyshift", "batch", "models"],
    params={
        "days": Param(14, type="integer", minimum=1, description="look-back in whole days"),
        "to": Param(None, type=["null", "string"], format="date",
                    description="last day (UTC); empty: the day before the run"),
        "kernel": Param("auto", type="string",
                        enum=["auto", "ard|ard+local", "ard", "ard+local", "ard+daily",
                              "ard+weekly", "ard+daily+weekly"],
                        description="GP kernel; auto keeps the one that best forecasts "
                                    "held-out days of the training tail, a|b chooses "
                                    "among those"),
    },
    doc_md=__doc__ + PAUSED_NOTE,
)
def keyshift_nightly_retrain():
    @task(outlets=[MODELS], execution_timeout=job_timeout("retrain_timeout_min"))
    def retrain_models() -> dict:
        from keyshift.jobs.airflow_tasks import retrain, run_date_of

        ctx = get_current_context()
        run_date = run_date_of(ctx)
        p = ctx["params"]
        return retrain(run_date, p["days"], p["to"], p["kernel"])

    @task(execution_timeout=REPORT_TIMEOUT)
    def report(result: dict) -> str:
        from keyshift.jobs.airflow_tasks import report as summarise

        return summarise(result)

    report(retrain_models())


keyshift_nightly_retrain()
