"""Nightly compaction (Delta OPTIMIZE) and VACUUM of keyshift's Delta tables.

Every micro-batch of the streaming job appends small files to each table; this DAG rewrites
them into a few large files and deletes the files removed longer ago than
``warehouse.vacuum_retention_hours`` (at least 168 h). Trigger with config
``{"tables": ["metrics", "key_loads"], "retention_hours": 336}`` to maintain some tables or
keep files longer. Scheduling only: the work is ``keyshift.jobs.table_maintenance``.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from keyshift.jobs.airflow_tasks import (
    PAUSED_NOTE,
    REPORT_TIMEOUT,
    default_args,
    job_timeout,
    nightly,
)
from keyshift.schemas import TABLES


@dag(
    dag_id="keyshift_table_maintenance",
    description="Compact (OPTIMIZE) and vacuum keyshift's Delta tables",
    schedule=nightly("0 4 * * *"),  # after the nightly retrain (02:00) and the baselines it triggers
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    tags=["keyshift", "batch", "maintenance"],
    params={
        "tables": Param(None, type=["null", "array"],
                        items={"type": "string", "enum": list(TABLES)},
                        description="tables to maintain; empty: all of keyshift's tables"),
        "retention_hours": Param(None, type=["null", "number"], minimum=168,
                                 description="VACUUM retention; empty: "
                                             "warehouse.vacuum_retention_hours"),
    },
    doc_md=__doc__ + PAUSED_NOTE,
)
def keyshift_table_maintenance():
    @task(execution_timeout=job_timeout("maintenance_timeout_min"))
    def compact_and_vacuum() -> dict:
        from keyshift.jobs.airflow_tasks import maintenance

        p = get_current_context()["params"]
        return maintenance(p["tables"], p["retention_hours"])

    @task(execution_timeout=REPORT_TIMEOUT)
    def report(result: dict) -> str:
        import logging

        from keyshift.jobs.table_maintenance import summary_line

        line = summary_line(result)
        logging.getLogger("keyshift.dags").info("%s", line)
        return line

    report(compact_and_vacuum())


keyshift_table_maintenance()
