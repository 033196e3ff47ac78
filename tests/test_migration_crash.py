"""Crash mid-migration: SIGKILL the streaming process (and its JVM and Python workers) while
a migration is in flight, restart it with the same run id, and check the outputs are those of
an uninterrupted run: nothing lost, nothing doubled, every migration completed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from pathlib import Path

import pytest
from engines_support import (
    job_config,
    new_topic,
    outputs,
    produce_events,
    reference,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PARAMS = '{"window_s": 1.0}'


def _start(cfg, run_id: str, topic: str, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "KEYSHIFT_HOME": str(cfg.home_path),
        "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
        "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count),
        "KEYSHIFT_SPARK__TRIGGER_S": str(cfg.spark.trigger_s),
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": str(cfg.spark.shuffle_partitions),
        "KEYSHIFT_CONTROLLER__WINDOW_S": str(cfg.controller.window_s),
        "KEYSHIFT_CONTROLLER__THETA": str(cfg.controller.theta),
        "PYSPARK_PYTHON": sys.executable,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.job", "--app", "wordcount", "--policy", "dlb-h",
         "--run-id", run_id, "--topic", topic, "--engines", "4", "--max-offsets", "300",
         "--params", PARAMS],
        cwd=ROOT, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(timeout=120)


def test_sigkill_during_migration_then_restart_gives_uninterrupted_output(
    spark, platform_config, tmp_path
) -> None:
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    topic = new_topic(cfg.kafka.bootstrap)
    total, bad = 1200, 4
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total,
                            skew="zipf:0.2@0,1.5@300", keys=300, malformed=bad)
    run_id = f"crash-{topic}"
    run_dir = cfg.home_path / "runs" / run_id
    log = tmp_path / "job.log"

    first = _start(cfg, run_id, topic, log)
    try:
        assert wait_until(lambda: (run_dir / "migrating.json").exists()
                          or first.poll() is not None, 1200), "no migration started"
        assert first.poll() is None, log.read_text()[-3000:]
    finally:
        _kill_group(first, signal.SIGKILL)  # mid-migration: snapshots in Delta, not restored
    mig = table_rows(spark, cfg, "migrations", run_id)
    assert any(r.status == "started" for r in mig)

    second = _start(cfg, run_id, topic, log)
    try:
        def done() -> bool:
            if second.poll() is not None:
                return True
            rows = table_rows(spark, cfg, "metrics", run_id)
            return sum(r.events_in + r.dead_letter for r in rows) >= total

        assert wait_until(done, 1500, poll_s=5), "restarted job did not finish the input"
        assert second.poll() is None, log.read_text()[-3000:]
    finally:
        _kill_group(second, signal.SIGTERM)

    metrics = table_rows(spark, cfg, "metrics", run_id)
    batch_ids = [r.batch_id for r in metrics]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was recorded twice"
    assert sum(r.events_in for r in metrics) == total - bad
    assert sum(r.dead_letter for r in metrics) == bad
    assert sum(r.processed for r in metrics) == total - bad
    mig = table_rows(spark, cfg, "migrations", run_id)
    started = {r.migration_id for r in mig if r.status == "started"}
    completed = [r.migration_id for r in mig if r.status == "completed"]
    assert started and started == set(completed) and len(completed) == len(set(completed))
    assert outputs(spark, cfg, run_id) == reference("wordcount", events, cfg.groups.count,
                                                    {"window_s": 1.0})
