"""Both DAGs end to end with ``dag.test()`` on a small Delta history written with the
project's own schemas: a missing table fails the task with the path, an empty range skips
with the reason, a real range registers models in MLflow (a rerun on the same history ties
the champions: no new version, no asset event) and stores an LPTF and a CLB plan with their RSTD on the history.

One child process holds Airflow (its configuration is fixed at import, and its home is
private to the test) and one Spark JVM for all runs; the test reads MLflow itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_support import DAGS, airflow_env, migrate

ROOT = Path(__file__).resolve().parents[2]

_RUNNER = r"""
import json, sys
from datetime import date, datetime, timezone
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.session import create_session
from keyshift.config import load_config
from keyshift.jobs.history import SyntheticHistory, write_synthetic_history
from keyshift.lakehouse.session import get_spark

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
# dag.test() waits out a retry's back-off in real time; the retry policy itself is checked
# in test_dags.py, here a failure must end the run at once.
for dag in bag.dags.values():
    for t in dag.tasks:
        t.retries = 0

def run(dag_id, conf, day):
    dr = bag.get_dag(dag_id).test(logical_date=datetime(2026, 11, day, 2, tzinfo=timezone.utc),
                                  run_conf=conf)
    with create_session() as s:
        from airflow.models.taskinstance import TaskInstance as TI
        tis = s.query(TI).filter(TI.dag_id == dag_id, TI.run_id == dr.run_id).all()
        states = {ti.task_id: str(ti.state) for ti in tis}
    print("RUN " + json.dumps({"dag": dag_id, "run_id": dr.run_id, "state": str(dr.state),
                              "tasks": states}), flush=True)

cfg = load_config()
conf = {"to": "2026-11-24", "days": 2}
retrain = {**conf, "kernel": "ard+daily"}  # the history has a daily cycle; 1/3 of auto's cost
run("keyshift_nightly_retrain", conf, 20)                       # no tables yet
spark = get_spark(cfg)
spec = SyntheticHistory(days=2, window_s=1800, keys=400, engines=4, seed=5)
write_synthetic_history(spark, cfg, date(2026, 11, 24), spec)
run("keyshift_nightly_retrain", {"to": "2026-10-01", "days": 1}, 21)  # range with no windows
run("keyshift_nightly_retrain", retrain, 22)
run("keyshift_nightly_retrain", retrain, 23)                    # same data: a tie
run("keyshift_baseline_partitions", {**conf, "engines": 4}, 24)
run("keyshift_baseline_partitions", {**conf, "engines": 4}, 25)  # idempotent
plans = [r.asDict() for r in spark.read.format("delta").load(cfg.table_path("plans"))
         .select("version", "scope", "policy", "engines", "groups", "expected_rstd",
                 "expected_var", "source_from", "source_to", "reason").collect()]
print("PLANS " + json.dumps(plans, default=str), flush=True)
from airflow.models.asset import AssetEvent, AssetModel
from keyshift.jobs.airflow_tasks import MODELS_ASSET_URI
with create_session() as s:
    events = (s.query(AssetEvent.source_dag_id, AssetEvent.source_task_id, AssetEvent.source_run_id)
              .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
              .filter(AssetModel.uri == MODELS_ASSET_URI).all())
print("ASSET_EVENTS " + json.dumps([list(e) for e in events]), flush=True)
"""


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("e2e")
    env = airflow_env(tmp, KEYSHIFT_GROUPS__COUNT="64")
    migrate(env)
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(DAGS)], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=1500, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    runs = [json.loads(ln[4:]) for ln in proc.stdout.splitlines() if ln.startswith("RUN ")]
    plans = next(json.loads(ln[6:]) for ln in proc.stdout.splitlines()
                 if ln.startswith("PLANS "))
    events = next(json.loads(ln[13:]) for ln in proc.stdout.splitlines()
                  if ln.startswith("ASSET_EVENTS "))
    return {"runs": runs, "plans": plans, "events": events, "log": out, "home": tmp / "ks"}


pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_missing_tables_fail_the_task_with_the_path(e2e: dict) -> None:
    first = e2e["runs"][0]
    assert first["state"] == "failed"
    assert first["tasks"]["retrain_models"] == "failed"
    assert first["tasks"]["report"] == "upstream_failed"
    assert "metrics: no Delta table at" in e2e["log"]


def test_an_empty_range_is_a_skip_with_the_reason(e2e: dict) -> None:
    empty = e2e["runs"][1]
    assert empty["tasks"]["retrain_models"] == "skipped"
    assert empty["state"] == "success"
    assert "metrics holds no windows in 2026-10-01..2026-10-01" in e2e["log"]


def test_retrain_registers_versions_and_a_tie_registers_none(e2e: dict) -> None:
    """The first retrain registers both GPs (champions); the same history again fits the
    same models, which tie the champions: no new version, the task skips with the reason."""
    from mlflow import MlflowClient

    from keyshift.config import load_config

    first, again = e2e["runs"][2:4]
    assert first["state"] == "success", first
    assert first["tasks"] == {"retrain_models": "success", "report": "success"}
    assert again["state"] == "success", again
    assert again["tasks"] == {"retrain_models": "skipped", "report": "skipped"}
    assert "ties v1" in e2e["log"] and "no new version" in e2e["log"]
    cfg = load_config(env={"KEYSHIFT_HOME": str(e2e["home"])})
    client = MlflowClient(tracking_uri=cfg.mlflow_tracking_uri,
                          registry_uri=cfg.mlflow_tracking_uri)
    from keyshift.models.registry import model_name

    # the synthetic history is the config's own workload's
    for name in (model_name(cfg, "input_rate"), model_name(cfg, "latency")):
        versions = client.search_model_versions(f"name='{name}'")
        assert [str(v.version) for v in versions] == ["1"], name
        assert str(client.get_model_version_by_alias(name, cfg.mlflow.alias).version) == "1"


def test_only_a_successful_retrain_emits_the_models_asset(e2e: dict) -> None:
    """The asset schedules the baselines DAG: the failed (no tables), skipped (empty range)
    and tied (nothing new) retrains emit nothing, the one that registered versions one
    event."""
    events = e2e["events"]
    assert len(events) == 1, events
    assert {(dag, task) for dag, task, _ in events} == {
        ("keyshift_nightly_retrain", "retrain_models")}
    assert [run for _, _, run in events] == [e2e["runs"][2]["run_id"]]


def test_baselines_store_lptf_and_clb_with_rstd_once(e2e: dict) -> None:
    for run in e2e["runs"][4:6]:
        assert run["state"] == "success", run
    plans = e2e["plans"]
    assert sorted(p["policy"] for p in plans) == ["clb", "lptf"]  # re-run added nothing
    for p in plans:
        assert p["scope"] == "baseline" and p["engines"] == 4 and p["groups"] == 64
        assert p["expected_rstd"] >= 0 and p["expected_var"] >= 0
        assert p["source_from"].startswith("2026-11-23") and p["source_to"].startswith("2026-11-25")
        assert "RSTD" in p["reason"]
    assert sorted(p["version"] for p in plans) == [1, 2]
    assert "baselines on 2026-11-23..2026-11-24, 4 engines: lptf v1" in e2e["log"]
