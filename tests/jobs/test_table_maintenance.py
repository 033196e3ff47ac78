"""Delta table maintenance: the ``keyshift_table_maintenance`` DAG run with ``dag.test()`` on
a warehouse whose ``dead_letter`` table holds 20 one-row appends (what 20 micro-batches leave
behind) compacts it to one active file, keeps the compacted files for the retention (168 h)
and reports the counts; a table that cannot be maintained fails the task with its name and
the failure line, after the others were maintained; with the retention check off (test
only) VACUUM deletes the compacted files from disk.

One child process holds Airflow (its configuration is fixed at import, its home private to
the test) and one Spark JVM for all runs, as in test_dags_e2e.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_support import DAGS, airflow_env, migrate

from keyshift.config import load_config
from keyshift.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
APPENDS = 20

_RUNNER = r"""
import json, sys
from datetime import datetime, timezone
from pathlib import Path
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.session import create_session
from delta.tables import DeltaTable
from keyshift.config import load_config
from keyshift.lakehouse.maintenance import LISTING_PARALLELISM, maintain_table
from keyshift.lakehouse.delta import append_rows
from keyshift.lakehouse.session import get_spark

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
dag = bag.get_dag("keyshift_table_maintenance")
for t in dag.tasks:
    t.retries = 0  # dag.test() waits a retry's back-off out in real time

def run(day, conf=None):
    dr = dag.test(logical_date=datetime(2026, 11, day, 4, tzinfo=timezone.utc), run_conf=conf)
    with create_session() as s:
        from airflow.models.taskinstance import TaskInstance as TI
        tis = s.query(TI).filter(TI.dag_id == dag.dag_id, TI.run_id == dr.run_id).all()
        states = {ti.task_id: str(ti.state) for ti in tis}
    print("RUN " + json.dumps({"state": str(dr.state), "tasks": states}), flush=True)

def files(path):
    active = DeltaTable.forPath(spark, path).detail().first()["numFiles"]
    on_disk = len(list(Path(path).glob("*.parquet")))
    print("FILES " + json.dumps({"active": active, "on_disk": on_disk}), flush=True)

cfg = load_config()
run(20)                                         # fresh warehouse: nothing to maintain
spark = get_spark(cfg)
path = cfg.table_path("dead_letter")
def one_batch(batch):                           # one small file per micro-batch
    append_rows(spark, cfg, "dead_letter",
                [{"run_id": "r1", "batch_id": batch, "topic": "t", "partition": 0,
                  "offset": batch, "raw": "{", "reason": "not JSON"}])
from concurrent.futures import ThreadPoolExecutor
one_batch(0)                                    # creates the table
with ThreadPoolExecutor(4) as pool:             # blind appends: Delta commits them side by side
    list(pool.map(one_batch, range(1, APPENDS)))
files(path)
run(21)
files(path)
print("PROPS " + json.dumps(DeltaTable.forPath(spark, path).detail().first()["properties"]),
      flush=True)
run(22)                                         # again: already compact, nothing changes
files(path)
(Path(cfg.table_path("decisions")) / "_delta_log").mkdir(parents=True)  # not a Delta table
append_rows(spark, cfg, "dead_letter",
            [{"run_id": "r1", "batch_id": 99, "topic": "t", "partition": 0, "offset": 99,
              "raw": "{", "reason": "not JSON"}])
run(23)
files(path)
spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
sc = spark.sparkContext
sc.setJobGroup("vacuum0", "maintain_table by hand")
vacuum0 = maintain_table(spark, path, 0.0)    # no listing setting of its caller around it
tracker = sc.statusTracker()
stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("vacuum0")
          for s in tracker.getJobInfo(j).stageIds]
vacuum0["max_stage_tasks"] = max(s.numTasks for s in stages if s is not None)
vacuum0["listing_after"] = spark.conf.get(LISTING_PARALLELISM, None)
print("VACUUM0 " + json.dumps(vacuum0), flush=True)
files(path)
""".replace("APPENDS", str(APPENDS))


@pytest.fixture(scope="module")
def maintenance(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("maint")
    env = airflow_env(tmp)
    migrate(env)
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(DAGS)], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=1200, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]

    def lines(prefix: str) -> list:
        return [json.loads(ln[len(prefix):]) for ln in proc.stdout.splitlines()
                if ln.startswith(prefix)]

    return {"runs": lines("RUN "), "files": lines("FILES "), "vacuum0": lines("VACUUM0 ")[0],
            "props": lines("PROPS ")[0], "log": out}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1500)
class TestMaintenanceDag:
    def test_a_fresh_warehouse_is_a_skip(self, maintenance: dict) -> None:
        first = maintenance["runs"][0]
        assert first["state"] == "success"
        assert first["tasks"]["compact_and_vacuum"] == "skipped"
        assert "table_maintenance skipped: no Delta table of metrics" in maintenance["log"]

    def test_compaction_leaves_one_active_file_and_keeps_the_old_ones_for_retention(
        self, maintenance: dict
    ) -> None:
        before, after, again = maintenance["files"][:3]
        # 20 append commits, one active data file each (Spark may also leave an empty file
        # of an empty partition on disk, never in the log)
        assert before["active"] == APPENDS and before["on_disk"] >= APPENDS
        assert maintenance["runs"][1] == {
            "state": "success", "tasks": {"compact_and_vacuum": "success", "report": "success"}}
        # OPTIMIZE rewrote them into one; VACUUM (168 h) deleted nothing younger than that
        assert after == {"active": 1, "on_disk": before["on_disk"] + 1}
        assert (f"dead_letter {APPENDS}→1 files; absent: metrics, key_loads"
                in maintenance["log"])
        # a second run finds the table compact and changes nothing
        assert maintenance["runs"][2]["state"] == "success"
        assert again == after

    def test_vacuum_keeps_files_for_the_configured_retention_without_delta_ignoring_it(
        self, maintenance: dict
    ) -> None:
        """Delta 4 ignores a retention passed to VACUUM (and says so): the table property
        carries warehouse.vacuum_retention_hours instead."""
        assert maintenance["props"]["delta.deletedFileRetentionDuration"] == "interval 168 hours"
        assert "retention threshold other than 0 hours is ignored" not in maintenance["log"]

    def test_a_broken_table_fails_the_task_by_name_after_the_others(
        self, maintenance: dict
    ) -> None:
        broken = maintenance["runs"][3]
        assert broken["state"] == "failed"
        assert broken["tasks"] == {"compact_and_vacuum": "failed", "report": "upstream_failed"}
        log = maintenance["log"]
        assert "keyshift task failed: dag=keyshift_table_maintenance task=compact_and_vacuum" in log
        assert "MaintenanceError: decisions:" in log
        # dead_letter got a 21st small file before the run and was still compacted
        assert maintenance["files"][3]["active"] == 1

    def test_vacuum_deletes_compacted_files_once_past_the_retention(
        self, maintenance: dict
    ) -> None:
        v = maintenance["vacuum0"]
        assert v["files_after"] == 1
        # maintain_table lowers VACUUM's file listing itself (Spark's default: 10,000 tasks
        # per listing, half a minute for this one-file table) and gives the setting back
        assert v["max_stage_tasks"] < 1000 and v["listing_after"] is None
        assert v["vacuumed_files"] == maintenance["files"][3]["on_disk"] - 1
        assert maintenance["files"][-1] == {"active": 1, "on_disk": 1}


def test_the_retention_property_value() -> None:
    from keyshift.lakehouse.maintenance import retention_interval

    assert retention_interval(168) == "interval 168 hours"
    assert retention_interval(168.5) == "interval 606600 seconds"


def test_retention_below_deltas_floor_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="warehouse.vacuum_retention_hours.*at least 168"):
        load_config(env={}, warehouse={"vacuum_retention_hours": 24})
    assert load_config(env={}).warehouse.vacuum_retention_hours == 168


def test_unknown_tables_are_refused_before_spark_starts() -> None:
    from keyshift.jobs.table_maintenance import parse_tables

    assert parse_tables(None) == parse_tables("") == parse_tables(" , ")
    assert "metrics" in parse_tables(None)
    assert parse_tables("metrics, key_loads") == ["metrics", "key_loads"]
    with pytest.raises(ValueError, match="tables: unknown table metricz; known: metrics"):
        parse_tables(["metricz"])


def test_by_hand_a_short_retention_is_refused_with_status_2(capsys: pytest.CaptureFixture) -> None:
    from keyshift.jobs.table_maintenance import main

    assert main(["--retention-hours", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("table_maintenance: invalid configuration")
    assert "warehouse.vacuum_retention_hours" in err
