"""Every DAG file imports cleanly (DagBag) and declares the schedule, tasks, owner, retries,
tags and params the batch layer promises. Airflow runs in a child process with a private
AIRFLOW_HOME: its configuration is fixed at import, so it must not leak into the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[1] / "dags"

_INSPECT = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag in bag.dags.values():
    t = dag.tasks[0]
    out["dags"][dag.dag_id] = {
        "tasks": sorted(x.task_id for x in dag.tasks),
        "edges": sorted([u.task_id, d] for u in dag.tasks for d in u.downstream_task_ids),
        "schedule": dag.schedule if isinstance(dag.schedule, str) else None,
        "catchup": dag.catchup, "owner": dag.owner, "tags": sorted(dag.tags),
        "retries": [x.retries for x in dag.tasks],
        "backoff": [x.retry_exponential_backoff for x in dag.tasks],
        "params": sorted(dag.params.keys()),
        "fileloc": dag.fileloc,
    }
print("JSON" + json.dumps(out))
"""


def airflow_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp / 'airflow' / 'airflow.db'}",
    })
    return env


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("dagbag")
    proc = subprocess.run([sys.executable, "-c", _INSPECT, str(DAGS)], env=airflow_env(tmp),
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


def test_baseline_partitions_dag_runs_after_the_retrain_and_takes_params(bag: dict) -> None:
    d = bag["dags"]["keyshift_baseline_partitions"]
    assert d["tasks"] == ["baseline_partitions", "report"]
    assert d["edges"] == [["baseline_partitions", "report"]]
    retrain_hour = int(bag["dags"]["keyshift_nightly_retrain"]["schedule"].split()[1])
    assert int(d["schedule"].split()[1]) > retrain_hour
    assert d["catchup"] is False and d["owner"] == "keyshift"
    assert d["retries"] == [2, 2]
    assert d["params"] == ["days", "engines", "to"]


def test_dag_files_hold_no_business_logic() -> None:
    """DAG files schedule; the work is in jobs/. They import no Spark, MLflow or numpy."""
    for path in DAGS.glob("*.py"):
        text = path.read_text()
        for heavy in ("pyspark", "mlflow", "numpy", "delta", "gpytorch"):
            assert f"import {heavy}" not in text and f"from {heavy}" not in text, path.name
        assert "from jobs.airflow_tasks import" in text, path.name
