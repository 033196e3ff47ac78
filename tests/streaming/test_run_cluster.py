"""``keyshift run`` on a real Spark standalone cluster (a master and two 1-core workers, each
with its own work and local dirs; only the warehouse is shared): DLB-H migrates groups, one
worker is SIGKILLed mid-run, the job goes on with the other, and the complex events equal
the single-node never-rebalanced reference with every record accounted for."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_fixtures import cluster_app_env, job_keys
from engines_support import new_topic, outputs, produce_events, reference, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"window_s": 1.0}
RECORDS, MALFORMED, PER_BATCH = 1200, 6, 100


def _worker(task: dict) -> str:
    """``worker-0`` / ``worker-1``: the work dir of the executor that ran the task."""
    return next((p for p in Path(task["workdir"]).parts if p.startswith("worker-")), "?")


def _batches(run_dir: Path) -> list[dict]:
    path = run_dir / "batches.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_run_on_a_cluster_survives_a_killed_worker(spark, platform_config, spark_cluster,
                                                    tmp_path: Path) -> None:
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", RECORDS,
                            skew="zipf:0.2@0,1.5@300", keys=300, malformed=MALFORMED)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    env = cluster_app_env(spark_cluster, home, warehouse)
    env.update({
        **job_keys(cfg),
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",  # a decision after every batch
        "KEYSHIFT_CONTROLLER__THETA": "10.0",
        "KEYSHIFT_ENGINES__COMPACT_EVERY": "4",  # base files and pruning happen in the run
        "PYSPARK_PYTHON": sys.executable,
    })
    run_id = "cluster-run"
    log = tmp_path / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "wordcount", "--policy", "dlb-h",
         "--run-id", run_id, "--topic", topic, "--engines", "4",
         "--max-offsets", str(PER_BATCH), "--params", json.dumps(PARAMS),
         "--available-now", "--json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=open(log, "wb"),
        start_new_session=True,
    )
    run_dir = home / "runs" / run_id
    try:
        # kill worker 0 once both workers have run engine tasks and a migration happened
        deadline = time.monotonic() + 600
        while True:
            done = _batches(run_dir)
            workers = {_worker(t) for b in done for t in b["tasks"]}
            if {"worker-0", "worker-1"} <= workers and any(b["moved_groups"] for b in done):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no migration on both workers before the end; log:\n"
                            f"{log.read_text()[-4000:]}")
            time.sleep(0.2)
        killed_after = done[-1]["batch_id"]
        spark_cluster.kill_worker(0)
        stdout, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, log.read_text()[-4000:]
        assert spark_cluster.alive_workers() == [1]
    finally:
        if proc.poll() is None:
            proc.kill()
        if not spark_cluster.worker_daemons[0].alive():
            spark_cluster.restart_worker(0)  # the session's cluster stays whole for others

    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    # events in = processed + dead-lettered, nothing lost to the dead worker
    assert summary["events_in"] + summary["dead_letter"] == RECORDS
    assert summary["dead_letter"] == MALFORMED and summary["processed"] == summary["events_in"]
    assert summary["migrations"] >= 1

    batches = _batches(run_dir)
    after = [b for b in batches if b["batch_id"] > killed_after + 1]
    assert after, "the run ended right at the kill; no batch ran on the survivor alone"
    assert all(_worker(t) == "worker-1" for b in after for t in b["tasks"])
    # engines that had lived on worker 0 were rebuilt from their durable changelog
    assert any(t["rebuilt"] for b in batches if b["batch_id"] > killed_after for t in b["tasks"])
    assert any(t["compacted"] for b in batches for t in b["tasks"])

    wh = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(warehouse)})})
    mig = table_rows(spark, wh, "migrations", run_id)
    assert {r.migration_id for r in mig if r.status == "completed"} == \
        {r.migration_id for r in mig if r.status == "started"}
    assert outputs(spark, wh, run_id) == reference("wordcount", events, cfg.groups.count, PARAMS)
