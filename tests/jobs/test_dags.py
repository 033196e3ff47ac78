"""Every DAG file imports cleanly (DagBag) and declares the schedule, tasks, owner, retries,
tags, params, timeouts, failure callbacks and asset wiring the batch layer promises. Airflow runs in a child process with a private
AIRFLOW_HOME: its configuration is fixed at import, so it must not leak into the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_support import DAGS, airflow_env

_INSPECT = r"""
import json, sys
from datetime import datetime, timezone
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.decoders import decode_timetable
from airflow.serialization.encoders import encode_timetable
from airflow.timetables.base import TimeRestriction
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}

def first_run(dag, now=None):
    # when the scheduler would start the first run of a DAG that just appeared (or was
    # unpaused for the first time): the timetable as the scheduler reads it (serialized);
    # at ``now`` when given (the clock the timetable reads, replaced)
    import airflow.timetables.trigger as trigger

    real = trigger.utcnow
    if now is not None:
        trigger.utcnow = lambda: now
    try:
        core = decode_timetable(encode_timetable(dag.timetable))
        info = core.next_dagrun_info(last_automated_data_interval=None,
                                     restriction=TimeRestriction(dag.start_date, dag.end_date,
                                                                 dag.catchup))
    finally:
        trigger.utcnow = real
    return None if info is None else info.run_after.isoformat()

def just_after(dag):
    expression = encode_timetable(dag.timetable)["__var"].get("expression")
    if expression is None:
        return {}
    minute, hour = (int(x) for x in expression.split()[:2])
    now = datetime.now(timezone.utc).replace(hour=hour, minute=minute + 1, second=0,
                                             microsecond=0)
    return {f"{hour:02d}:{minute + 1:02d}": first_run(dag, now)}

for dag in bag.dags.values():
    t = dag.tasks[0]
    out["dags"][dag.dag_id] = {
        "tasks": sorted(x.task_id for x in dag.tasks),
        "edges": sorted([u.task_id, d] for u in dag.tasks for d in u.downstream_task_ids),
        "schedule": encode_timetable(dag.timetable)["__var"].get("expression"),
        "first_run": first_run(dag) if "expression" in encode_timetable(dag.timetable)["__var"]
                     else None,
        "now": datetime.now(timezone.utc).isoformat(),
        # a minute after this day's time on the DAG's clock (02:01 for "0 2 * * *")
        "just_after": just_after(dag),
        "start_date": dag.start_date and dag.start_date.isoformat(),
        "default_args": sorted(dag.default_args),
        "doc_md": dag.doc_md,
        "schedule_assets": sorted(a.uri for a in dag.schedule)
                           if isinstance(dag.schedule, list) else [],
        "outlets": {x.task_id: sorted(o.uri for o in x.outlets) for x in dag.tasks},
        "timeouts": {x.task_id: x.execution_timeout and x.execution_timeout.total_seconds()
                     for x in dag.tasks},
        "callbacks": {x.task_id: [f"{c.__module__}.{c.__name__}" for c in x.on_failure_callback]
                      for x in dag.tasks},
        "catchup": dag.catchup, "owner": dag.owner, "tags": sorted(dag.tags),
        "retries": [x.retries for x in dag.tasks],
        "backoff": [x.retry_exponential_backoff for x in dag.tasks],
        "params": sorted(dag.params.keys()),
        "fileloc": dag.fileloc,
    }
print("JSON" + json.dumps(out))
"""


def _env(tmp: Path) -> dict[str, str]:
    # the job tasks' execution_timeout comes from [airflow]: a non-default value shows it
    return airflow_env(tmp, KEYSHIFT_AIRFLOW__RETRAIN_TIMEOUT_MIN="77")


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("dagbag")
    proc = subprocess.run([sys.executable, "-c", _INSPECT, str(DAGS)], env=_env(tmp), check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JSON"))
    return json.loads(line[4:])


def test_every_dag_file_imports_without_errors(bag: dict) -> None:
    assert bag["errors"] == {}
    files = {Path(d["fileloc"]).name for d in bag["dags"].values()}
    assert files == {p.name for p in DAGS.glob("*.py")}


def test_nightly_retrain_dag(bag: dict) -> None:
    d = bag["dags"]["keyshift_nightly_retrain"]
    assert d["tasks"] == ["report", "retrain_models"]
    assert d["edges"] == [["retrain_models", "report"]]
    assert d["schedule"] == "0 2 * * *"
    assert d["catchup"] is False
    assert d["owner"] == "keyshift"
    assert {"keyshift", "batch"} <= set(d["tags"])
    assert d["retries"] == [2, 2] and all(b > 1 for b in d["backoff"])
    assert d["params"] == ["days", "kernel", "to"]


def test_baseline_partitions_dag_runs_on_the_retrains_asset_and_takes_params(bag: dict) -> None:
    from keyshift.jobs.airflow_tasks import MODELS_ASSET_URI

    d = bag["dags"]["keyshift_baseline_partitions"]
    assert d["tasks"] == ["baseline_partitions", "report"]
    assert d["edges"] == [["baseline_partitions", "report"]]
    retrain = bag["dags"]["keyshift_nightly_retrain"]
    # the retrain's job task emits the asset (only on success); the baselines wait for it
    assert retrain["outlets"] == {"retrain_models": [MODELS_ASSET_URI], "report": []}
    assert d["schedule"] is None and d["schedule_assets"] == [MODELS_ASSET_URI]
    assert d["catchup"] is False and d["owner"] == "keyshift"
    assert d["retries"] == [2, 2]
    assert d["params"] == ["days", "engines", "to"]


def test_table_maintenance_dag(bag: dict) -> None:
    d = bag["dags"]["keyshift_table_maintenance"]
    assert d["tasks"] == ["compact_and_vacuum", "report"]
    assert d["edges"] == [["compact_and_vacuum", "report"]]
    assert d["schedule"] == "0 4 * * *"  # after the retrain (02:00) and the baselines
    assert d["catchup"] is False and d["owner"] == "keyshift"
    assert {"keyshift", "batch"} <= set(d["tags"])
    assert d["retries"] == [2, 2] and all(b > 1 for b in d["backoff"])
    assert d["params"] == ["retention_hours", "tables"]


def test_a_new_dag_starts_no_run_for_a_time_already_past(bag: dict) -> None:
    """Unpausing a nightly DAG for the first time waits for the next time on its clock
    (with a start_date and catchup=False, Airflow would run the latest missed one at once)."""
    from datetime import datetime, timedelta

    for dag_id in ("keyshift_nightly_retrain", "keyshift_table_maintenance"):
        d = bag["dags"][dag_id]
        assert d["start_date"] is None and d["catchup"] is False, dag_id
        assert d["first_run"] is not None, dag_id
        assert datetime.fromisoformat(d["first_run"]) > datetime.fromisoformat(d["now"]), d
        # also a minute after the time on its clock, which run_immediately=False ran at once
        # (Airflow 3.3's buffer of a tenth of the interval): whatever the hour of the test
        (when, run), = d["just_after"].items()
        assert run is not None and run[11:16] != when, d["just_after"]
        assert datetime.fromisoformat(run) - datetime.fromisoformat(d["now"]).replace(
            hour=int(when[:2]), minute=int(when[3:]), second=0, microsecond=0) > timedelta(
            hours=23), d["just_after"]


def test_every_dag_says_it_starts_paused_and_how_to_unpause(bag: dict) -> None:
    for dag_id, d in bag["dags"].items():
        assert "paused" in d["doc_md"] and "airflow dags unpause" in d["doc_md"], dag_id


def test_the_dags_default_args_carry_no_timeout(bag: dict) -> None:
    """The DAG's details page shows default_args' execution_timeout: a 5 min there beside a
    3 h retrain task misled; each task sets its own (checked below)."""
    for dag_id, d in bag["dags"].items():
        assert "execution_timeout" not in d["default_args"], dag_id


def test_every_task_has_a_timeout_and_the_failure_callback(bag: dict) -> None:
    """A hung Spark job with max_active_runs=1 would block every later night: each task has
    an execution_timeout (the job tasks' from [airflow], the reports' a few minutes) and
    logs one failure line."""
    from keyshift.config import load_config

    cfg = load_config(env={}).airflow
    job_minutes = {
        ("keyshift_nightly_retrain", "retrain_models"): 77,  # set in _env
        ("keyshift_baseline_partitions", "baseline_partitions"): cfg.baselines_timeout_min,
        ("keyshift_table_maintenance", "compact_and_vacuum"): cfg.maintenance_timeout_min,
    }
    seen = 0
    for dag_id, d in bag["dags"].items():
        for task_id in d["tasks"]:
            assert d["callbacks"][task_id] == ["keyshift.jobs.airflow_tasks.log_failure"], task_id
            expected = job_minutes.get((dag_id, task_id), 5)
            assert d["timeouts"][task_id] == expected * 60, (dag_id, task_id)
            seen += 1
    assert seen == 6


def test_failure_callback_logs_one_line_with_task_run_and_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from types import SimpleNamespace

    from keyshift.jobs.airflow_tasks import log_failure

    ti = SimpleNamespace(dag_id="keyshift_table_maintenance", task_id="compact_and_vacuum",
                         run_id="scheduled__2026-11-26T04:00:00+00:00", try_number=3)
    with caplog.at_level("ERROR", logger="keyshift.jobs.airflow_tasks"):
        log_failure({"ti": ti, "exception": RuntimeError("metrics: conflict\nstack...")})
    (record,) = caplog.records
    assert record.getMessage() == (
        "keyshift task failed: dag=keyshift_table_maintenance task=compact_and_vacuum "
        "run=scheduled__2026-11-26T04:00:00+00:00 try=3 error=RuntimeError: metrics: conflict")


def test_dag_files_hold_no_business_logic() -> None:
    """DAG files schedule; the work is in jobs/. They import no Spark, MLflow or numpy."""
    for path in DAGS.glob("*.py"):
        text = path.read_text()
        for heavy in ("pyspark", "mlflow", "numpy", "delta", "gpytorch"):
            assert f"import {heavy}" not in text and f"from {heavy}" not in text, path.name
        assert "from keyshift.jobs.airflow_tasks import" in text, path.name
