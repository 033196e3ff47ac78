"""No silent loss (issue 16, item 2): records that Kafka deleted before the job read them stop
``keyshift run`` with one line saying so and how to accept the loss; with
``kafka.fail_on_data_loss = false`` the same restart skips them and goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from engines_support import new_topic, produce_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _env(cfg, **extra: str) -> dict[str, str]:
    return {**os.environ, "KEYSHIFT_HOME": str(cfg.home_path),
            "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
            "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
            "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "PYSPARK_PYTHON": sys.executable,
            **extra}


def _run(cfg, topic: str, run_id: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic", topic,
         "--engines", "2", "--run-id", run_id, "--available-now", "--json"],
        env=_env(cfg, **env), capture_output=True, text=True, timeout=600)


def test_records_deleted_before_they_were_read_stop_the_run_unless_accepted(
        platform_config) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=1)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 100, "uniform")
    run_id = f"loss-{topic}"
    first = _run(cfg, topic, run_id)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1])["events_in"] == 100

    # 100 more arrive, and retention (here: an explicit delete) removes them unread
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 100, "uniform", seed=2)
    admin = KafkaAdminClient(bootstrap_servers=cfg.kafka.bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 200})
    finally:
        admin.close()
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 50, "uniform", seed=3)

    refused = _run(cfg, topic, run_id)
    assert refused.returncode == 3, refused.stderr[-2000:]
    lines = [x for x in refused.stderr.splitlines() if x.startswith("records of topic")]
    assert lines and "KEYSHIFT_KAFKA__FAIL_ON_DATA_LOSS=false" in lines[0], refused.stderr[-2000:]
    assert topic in lines[0]

    accepted = _run(cfg, topic, run_id, KEYSHIFT_KAFKA__FAIL_ON_DATA_LOSS="false")
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    summary = json.loads(accepted.stdout.strip().splitlines()[-1])
    # the run's counts are all its processes' (100 + 50); this one read the 50 left
    assert summary["events_in"] == 150 and summary["this_process"]["events_in"] == 50
    # the skip is never silent (issue 46 item 3): a warning line per run, and the summary
    assert summary["skipped_offsets"] == {"0": 100}
    warned = [x for x in accepted.stderr.splitlines() if "WARNING: skipping" in x]
    assert len(warned) == 1 and "partition 0 offsets 100-199 (100)" in warned[0], \
        accepted.stderr[-2000:]
