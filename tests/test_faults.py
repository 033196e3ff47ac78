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
from engines_support import new_topic, produce_events, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def own_broker(tmp_path, spark_config):
    from streaming.broker import Broker, free_port

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
        env = {**os.environ, "KEYSHIFT_HOME": str(cfg.home_path),
               "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
               "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
               "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "KEYSHIFT_GROUPS__COUNT": "64",
               "PYSPARK_PYTHON": sys.executable}
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
        out, _ = self.proc.communicate(timeout=timeout_s)
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
