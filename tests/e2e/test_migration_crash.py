"""Crash mid-migration: SIGKILL the streaming process (and its JVM and Python workers) while
a migration is in flight, restart it with the same run id, and check the outputs are those of
an uninterrupted run: nothing lost, nothing doubled, every migration completed. Once with a
DLB-H rebalance in flight, once with the engine scaler's change of N in flight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engines_support import (
    job_config,
    job_env,
    new_topic,
    outputs,
    produce_events,
    records_in_log,
    reference,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARAMS = '{"window_s": 1.0}'


def _start(cfg, run_id: str, topic: str, log: Path, max_offsets: int = 300,
           extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = job_env(cfg, **(extra_env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "wordcount", "--policy", "dlb-h",
         "--run-id", run_id, "--topic", topic, "--engines", "4", "--max-offsets", str(max_offsets),
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


def _word_input(cfg, total: int, bad: int, skew: str) -> tuple[str, list]:
    """A new topic with ``total`` word-count records over 300 keys, ``bad`` of them
    malformed; returns the topic and the good events in production order."""
    topic = new_topic(cfg.kafka.bootstrap)
    return topic, produce_events(cfg.kafka.bootstrap, topic, "wordcount", total, skew=skew,
                                 keys=300, malformed=bad)


def _kill_mid_migration(cfg, run_id: str, topic: str, log: Path, **start) -> None:
    """Run the job until a migration is in flight (``migrating.json``: the batch realizing a
    plan change has begun, its release and restore not committed) and SIGKILL its whole
    process group there: the job's fault point inside the first migration's engine stage
    (streaming/faults.py). Polling for the file instead misses a migration that takes
    less than the poll (0.4 s batches here)."""
    from keyshift.streaming.faults import ENV

    run_dir = cfg.home_path / "runs" / run_id
    extra = {**start.pop("extra_env", {}), ENV: "migration@0"}
    first = _start(cfg, run_id, topic, log, extra_env=extra, **start)
    try:
        assert wait_until(lambda: first.poll() is not None, 1200), "no migration started"
        assert b"killing the job now" in log.read_bytes(), log.read_text()[-3000:]
        assert (run_dir / "migrating.json").exists()
    finally:
        _kill_group(first, signal.SIGKILL)


def test_sigkill_during_migration_then_restart_gives_uninterrupted_output(
    spark, platform_config, tmp_path
) -> None:
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    total, bad = 1200, 4
    topic, events = _word_input(cfg, total, bad, "zipf:0.2@0,1.5@300")
    run_id = f"crash-{topic}"
    log = tmp_path / "job.log"

    _kill_mid_migration(cfg, run_id, topic, log)
    in_flight = json.loads((cfg.home_path / "runs" / run_id / "migrating.json").read_text())
    mig = table_rows(spark, cfg, "migrations", run_id)
    assert in_flight["migration_id"] not in {r.migration_id for r in mig}

    _restart_and_check(spark, cfg, run_id, topic, log, events, total, bad)
    mig = table_rows(spark, cfg, "migrations", run_id)
    assert {r.status for r in mig if r.migration_id == in_flight["migration_id"]} == \
        {"started", "completed"}


def _restart_and_check(spark, cfg, run_id: str, topic: str, log: Path, events: list,
                       total: int, bad: int, **start) -> None:
    """Restart the killed run, let it finish the input, and compare with an uninterrupted
    run: every record once, every migration completed once, the reference's outputs."""
    second = _start(cfg, run_id, topic, log, **start)
    try:
        assert wait_until(lambda: second.poll() is not None or records_in_log(log) >= total,
                          1500), "restarted job did not finish the input"
        assert second.poll() is None, log.read_text()[-3000:]
    finally:
        _kill_group(second, signal.SIGTERM)
    # SIGTERM is a clean stop: the job deleted its heartbeat, so keyshift status says not alive
    from keyshift.streaming.runs import alive
    assert alive(cfg, run_id, time.time()) == (False, None)

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


def test_sigkill_during_a_scale_change_then_restart_gives_uninterrupted_output(
    spark, platform_config, tmp_path
) -> None:
    """The engine scaler (planner on, no champion in the store: the pure-core fallback) shrinks
    4 engines once it has measured three windows, because engines cost far more than the few
    tuples it could miss. DLB-H's θ is out of reach, so every migration is the scaler's. The
    process is killed while the groups of the removed engines are in flight."""
    cfg = job_config(platform_config, policy="dlb-h", theta=1000.0)
    total, bad = 3000, 3
    topic, events = _word_input(cfg, total, bad, "zipf:0.8")
    run_id = f"crash-scale-{topic}"
    run_dir = cfg.home_path / "runs" / run_id
    log = tmp_path / "job.log"
    start = {"max_offsets": 200, "extra_env": {
        "KEYSHIFT_PLANNER__ENABLED": "true", "KEYSHIFT_PLANNER__HORIZON": "3",
        "KEYSHIFT_PLANNER__MC": "0.001", "KEYSHIFT_PLANNER__EC": "10",
        "KEYSHIFT_PLANNER__RC": "0.1",
        "KEYSHIFT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp_path / 'empty-mlflow.db'}",
        "KEYSHIFT_MLFLOW__ARTIFACT_ROOT": str(tmp_path / "mlartifacts"),
    }}

    _kill_mid_migration(cfg, run_id, topic, log, **start)
    in_flight = json.loads((run_dir / "migrating.json").read_text())
    # the plan change and its decision were staged (streaming/staging.py), not committed
    # yet: the restarted process commits them before it reads them

    _restart_and_check(spark, cfg, run_id, topic, log, events, total, bad, **start)
    # in batch order: a table's rows come back in its files' order, and the restart's
    # commit of what its predecessor staged may land after rows of later batches
    scaler = sorted((r for r in table_rows(spark, cfg, "decisions", run_id)
                     if r.component == "scaler"), key=lambda r: r.batch_id)
    ids = [r.batch_id for r in scaler]
    assert len(ids) == len(set(ids)), "a scaler decision was recorded twice"
    changed = [r for r in scaler if r.plan_version is not None]
    assert changed and changed[0].engines_after < changed[0].engines_before == 4, \
        [r.reason for r in scaler]
    assert changed[0].batch_id == in_flight["batch_id"] - 1  # realized in the next batch
    plans = {r.version: r for r in table_rows(spark, cfg, "plans", run_id, column="scope")}
    assert sum(plans[changed[0].plan_version].live) == changed[0].engines_after
    # the realized N survived the crash: the batches after the change ran on it
    metrics = {m.batch_id: m.engines for m in table_rows(spark, cfg, "metrics", run_id)}
    assert metrics[in_flight["batch_id"]] == changed[0].engines_after
    assert "fallback SeasonalProfile+EngineLatency" in changed[0].reason
