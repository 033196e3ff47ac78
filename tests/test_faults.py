"""Faults injected into real components (issue 16, item 1): what the running job does, what
it says, and that its outputs are the never-faulted run's, nothing lost or doubled.

Each test runs ``keyshift run`` as a subprocess (the way a user runs it) against a broker of
its own, so that stopping that broker disturbs no other test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from engines_support import job_env, new_topic, produce_events, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def own_broker(tmp_path, spark_config):
    from keyshift.streaming.broker import Broker, free_port

    port = free_port()
    controller = free_port()
    while controller == port:
        controller = free_port()
    cfg = spark_config.model_copy(update={"kafka": spark_config.kafka.model_copy(update={
        "port": port, "controller_port": controller})})
    broker = Broker.from_config(cfg, folder=tmp_path / "kafka")
    broker.start()
    try:
        yield cfg, broker
    finally:
        broker.stop()


class Run:
    """``keyshift run`` in a subprocess, its stderr lines collected as they come."""

    def __init__(self, cfg, topic: str, run_id: str, *extra: str) -> None:
        env = job_env(cfg)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic",
             topic, "--engines", "2", "--run-id", run_id, "--available-now", "--json", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(x.startswith(prefix) for x in self.lines):
                return True
            time.sleep(0.2)
        return any(x.startswith(prefix) for x in self.lines)

    def finish(self, timeout_s: float = 600) -> dict:
        # stdout alone: communicate() would also read stderr, racing the reader thread for
        # lines (a run once lost its "is back" line that way)
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        assert self.proc.returncode == 0, "\n".join(self.lines[-40:])
        return json.loads(out.strip().splitlines()[-1])


def _outputs(spark, cfg, run_id: str) -> Counter:
    return Counter((r.key, r.ts, r.kind, r.detail, r.event_id)
                   for r in table_rows(spark, cfg, "events_out", run_id))


def test_broker_down_mid_run_is_said_and_loses_nothing(own_broker, spark) -> None:
    """The broker stops after the first batch for 35 s: the job says within its grace that it
    waits for the broker (while it is still down), says when it is back, and ends with every
    event processed once and the complex events of a run that never saw the outage."""
    cfg, broker = own_broker
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 3000, "zipf:1.0")
    faulty = Run(cfg, topic, "broker-down", "--max-offsets", "300")
    assert faulty.wait_for("batch ", 300), "\n".join(faulty.lines[-40:])
    broker.stop()
    stopped = time.monotonic()
    waited = faulty.wait_for("keyshift: waiting for the Kafka broker", 30)
    while time.monotonic() - stopped < 35:
        time.sleep(0.5)
    broker.start()
    summary = faulty.finish()
    assert waited, "\n".join(faulty.lines[-40:])
    assert any(x.startswith("keyshift: the Kafka broker at") and "is back" in x
               for x in faulty.lines), "\n".join(faulty.lines[-40:])
    assert summary["events_in"] == 3000 and summary["dead_letter"] == 0

    reference = Run(cfg, topic, "broker-up").finish()
    assert reference["events_in"] == 3000
    got, want = _outputs(spark, cfg, "broker-down"), _outputs(spark, cfg, "broker-up")
    assert got and got == want  # the same complex events, none of them twice
    assert max(got.values()) == 1


def test_sigkill_at_random_points_of_a_batch_then_restart_gives_the_reference(
        spark, platform_config, tmp_path) -> None:
    """Ten kill points drawn at random (seed printed; KEYSHIFT_FAULT_SEED replays one), each
    a phase of a batch (keyshift.streaming.faults), hit one after the other by restarts of the same
    run: DLB-H with migrations on a skew that shifts, so kills land before, during and after
    engines, migrations, the controller and the writes. The restarted run ends with every
    record once and exactly the complex events of one uninterrupted operator."""
    import random

    from engines_support import job_config, outputs, reference

    from keyshift.streaming.faults import ENV, PHASES

    seed = int(os.environ.get("KEYSHIFT_FAULT_SEED", random.SystemRandom().randrange(10**6)))
    print(f"kill points drawn with KEYSHIFT_FAULT_SEED={seed}")
    rng = random.Random(seed)
    points = sorted(((rng.randrange(0, 12), rng.choice(PHASES)) for _ in range(10)))
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    total, bad = 1500, 4
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total,
                            skew="zipf:0.2@0,1.5@300", keys=300, malformed=bad)
    run_id = f"kills-{topic}"
    env = job_env(cfg)
    log = tmp_path / "job.log"

    def run(fault: str | None) -> int:
        with open(log, "a") as out:
            out.write(f"\n=== {fault or 'no fault'} ===\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--policy",
             "dlb-h", "--run-id", run_id, "--topic", topic, "--engines", "4",
             "--max-offsets", "100", "--params", '{"window_s": 1.0}', "--available-now"],
            env={**env, **({ENV: fault} if fault else {})}, stdout=open(log, "a"),
            stderr=subprocess.STDOUT, start_new_session=True)  # its own group: killpg
        return proc.wait(timeout=900)

    killed = []
    for batch, phase in points:
        rc = run(f"{phase}@{batch}")
        assert rc in (0, -9), log.read_text()[-3000:]
        if rc == -9:
            killed.append(f"{phase}@{batch}")
    assert run(None) == 0, log.read_text()[-3000:]
    print(f"killed at {killed}")
    assert len(killed) >= 5, (points, killed)  # most points fall inside the input

    metrics = table_rows(spark, cfg, "metrics", run_id)
    batch_ids = [r.batch_id for r in metrics]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was recorded twice"
    assert sum(r.events_in for r in metrics) == total - bad
    assert sum(r.dead_letter for r in metrics) == bad
    mig = table_rows(spark, cfg, "migrations", run_id)
    started = {r.migration_id for r in mig if r.status == "started"}
    completed = [r.migration_id for r in mig if r.status == "completed"]
    assert started == set(completed) and len(completed) == len(set(completed))
    assert outputs(spark, cfg, run_id) == reference("wordcount", events, cfg.groups.count,
                                                    {"window_s": 1.0})


def test_an_unwritable_table_mid_run_stops_cleanly_and_a_restart_resumes(
        spark, platform_config, tmp_path) -> None:
    """After the first batch, ``events_out``'s log directory becomes a regular file (the test
    runs as root, so file modes would not stop a write): the batch that appends to it fails,
    the job stops with one line naming the table's path and how to resume, and once the
    table is back a restart of the same run id ends with every record once and the complex
    events of one uninterrupted operator."""
    from engines_support import outputs, reference

    cfg = platform_config.model_copy(update={"home": str(tmp_path / "home")})
    total = 1200
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total, skew="zipf:1.0",
                            keys=200)
    args = ["--max-offsets", "200", "--params", '{"window_s": 1.0}']
    broken = Run(cfg, topic, "unwritable", *args)
    assert broken.wait_for("batch ", 300), "\n".join(broken.lines[-40:])
    log_dir = cfg.warehouse_path / "events_out" / "_delta_log"
    assert log_dir.is_dir(), cfg.table_path("events_out")
    log_dir.rename(log_dir.with_name("_delta_log.aside"))
    log_dir.write_text("not a directory")
    broken.proc.wait(timeout=600)
    assert broken.proc.returncode not in (0, None)
    said = [x for x in broken.lines if x.startswith("keyshift run:")]
    assert len(said) == 1 and "events_out" in said[0] and "--run-id" in said[0], broken.lines
    assert not any(x.lstrip().startswith(("at org.apache", "Traceback")) for x in broken.lines)

    log_dir.unlink()
    log_dir.with_name("_delta_log.aside").rename(log_dir)
    summary = Run(cfg, topic, "unwritable", *args).finish()
    assert summary["events_in"] + summary["dead_letter"] <= total  # the rest, not all again
    metrics = table_rows(spark, cfg, "metrics", "unwritable")
    assert len({r.batch_id for r in metrics}) == len(metrics)
    assert sum(r.events_in for r in metrics) == total
    assert outputs(spark, cfg, "unwritable") == reference("wordcount", events,
                                                          cfg.groups.count, {"window_s": 1.0})
