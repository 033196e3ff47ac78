"""LPTF and CLB baseline plans from the Delta ``key_loads`` history → Delta ``plans``.

Runs when the nightly retrain has succeeded (the ``keyshift://models/champions`` asset it emits), or on
demand with params (``{"engines": 8, "days": 3}``). Scheduling only: the work is
``keyshift.jobs.baseline_partitions``.
"""

from __future__ import annotations

from airflow.sdk import Asset, Param, dag, get_current_context, task

from keyshift.jobs.airflow_tasks import (
    MODELS_ASSET_URI,
    PAUSED_NOTE,
    REPORT_TIMEOUT,
    default_args,
    job_timeout,
)

MODELS = Asset(MODELS_ASSET_URI)


@dag(
    dag_id="keyshift_baseline_partitions",
    description="Offline LPTF and CLB plans on the key-load history, with expected RSTD",
    schedule=[MODELS],
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["keyshift", "batch", "plans"],
    params={
        "engines": Param(None, type=["null", "integer"], minimum=1,
                         description="engine count of the plans; empty: engines.initial"),
        "days": Param(7, type="integer", minimum=1, description="look-back in whole days"),
        "to": Param(None, type=["null", "string"], format="date",
                    description="last day (UTC); empty: the day before the run"),
    },
    doc_md=__doc__ + PAUSED_NOTE,
)
def keyshift_baseline_partitions():
    @task(execution_timeout=job_timeout("baselines_timeout_min"))
    def baseline_partitions() -> dict:
        from keyshift.jobs.airflow_tasks import baselines, run_date_of

        ctx = get_current_context()
        run_date = run_date_of(ctx)
        p = ctx["params"]
        return baselines(run_date, p["days"], p["engines"], p["to"])

    @task(execution_timeout=REPORT_TIMEOUT)
    def report(result: dict) -> str:
        from keyshift.jobs.airflow_tasks import report as summarise

        return summarise(result)

    report(baseline_partitions())


keyshift_baseline_partitions()
