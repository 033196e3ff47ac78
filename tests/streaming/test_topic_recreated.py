"""A topic deleted and created again is not records deleted (issue 46 item 3): the resume
refuses it with what happened and the way on that loses nothing (a new run), never the
advice to accept a loss, which skipped every record of the new topic; records that Kafka
did delete unread and ``kafka.fail_on_data_loss = false`` skips are said per partition and
kept in the run's summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keyshift.streaming.kafka_client import TopicOffsets
from keyshift.streaming.source_resume import (
    TopicRecreated,
    checkpoint_offsets,
    classify_resume,
    resume_source,
)

# -- the classification, with fake offsets and topic ids --------------------------------------


def _now(earliest: dict[int, int], latest: dict[int, int], topic_id: str = "id-1"):
    return TopicOffsets(topic_id, earliest, latest)


def test_a_topic_that_kept_what_the_run_had_not_read_is_fine() -> None:
    check = classify_resume({0: 100, 1: 80}, {0: 120, 1: 80},
                            _now({0: 0, 1: 50}, {0: 400, 1: 80}), "id-1")
    assert check.kind == "fine" and not check.skipped


def test_records_deleted_past_the_run_are_truncated_with_the_offsets_skipped() -> None:
    check = classify_resume({0: 100, 1: 80}, {0: 100, 1: 80},
                            _now({0: 250, 1: 10}, {0: 400, 1: 90}), "id-1")
    assert check.kind == "truncated"
    assert check.skipped == {0: (100, 250)}


def test_another_topic_id_is_a_recreated_topic_even_when_its_offsets_look_fine() -> None:
    # the new topic already holds more records than the old one had: only its id tells
    check = classify_resume({0: 100}, {0: 100}, _now({0: 0}, {0: 1000}, "id-2"), "id-1")
    assert check.kind == "recreated" and "id-2" in check.why and "id-1" in check.why


def test_end_offsets_back_below_the_run_are_a_recreated_topic_not_a_loss() -> None:
    # no id recorded (a run started before ids were): the log went back to 0 and ends
    # below what the run had read, which deleted records never do
    check = classify_resume({0: 1500}, {0: 1500}, _now({0: 0}, {0: 1000}), None)
    assert check.kind == "recreated"
    assert "partition 0 ends at offset 1000, below offset 1500" in check.why


def test_a_partition_gone_is_a_recreated_topic() -> None:
    check = classify_resume({0: 5, 1: 5, 2: 5}, {0: 5, 1: 5, 2: 5},
                            _now({0: 0, 1: 0}, {0: 9, 1: 9}), None)
    assert check.kind == "recreated" and "partition 2" in check.why


def _checkpoint(root: Path, topic: str, offsets: dict[int, dict], commits: list[int],
                start: dict | None = None) -> str:
    """A folder shaped as Spark's checkpoint of a Kafka source."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, ends in offsets.items():
        (root / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
            + json.dumps({topic: {str(p): o for p, o in ends.items()}}))
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in commits:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    if start is not None:
        (root / "sources" / "0").mkdir(parents=True)
        (root / "sources" / "0" / "0").write_bytes(
            b"\0v1\n" + json.dumps({topic: {str(p): o for p, o in start.items()}}).encode())
    return str(root)


def test_the_checkpoint_gives_the_last_committed_end_and_the_last_planned_end(
        tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path / "cp", "t", {0: {0: 40}, 1: {0: 90}, 2: {0: 130}}, [0, 1],
                     start={0: 0})
    assert checkpoint_offsets(cp, "t") == ({0: 90}, {0: 130})
    assert checkpoint_offsets(cp, "other") is None


def test_a_checkpoint_with_no_batch_committed_goes_on_from_its_start(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path / "cp", "t", {0: {0: 40, 1: 7}}, [], start={0: 3, 1: 0})
    assert checkpoint_offsets(cp, "t") == ({0: 3, 1: 0}, {0: 40, 1: 7})
    assert checkpoint_offsets(str(tmp_path / "none"), "t") is None


def _cfg(tmp_path: Path, fail_on_data_loss: bool = True):
    from keyshift.config import load_config

    return load_config(env={}, home=str(tmp_path / "home"),
                       kafka={"fail_on_data_loss": fail_on_data_loss})


def _broker_says(monkeypatch, now: TopicOffsets | None) -> None:
    import keyshift.streaming.kafka_client as client

    monkeypatch.setattr(client, "topic_offsets", lambda *a, **k: now)


def test_a_resume_on_a_recreated_topic_is_refused_without_the_advice_to_accept_a_loss(
        tmp_path: Path, monkeypatch) -> None:
    cp = _checkpoint(tmp_path / "cp", "t", {0: {0: 1500}}, [0], start={0: 0})
    run_uri = str(tmp_path / "run")
    said: list[str] = []
    _broker_says(monkeypatch, _now({0: 0}, {0: 2000}, "id-1"))
    # the first start records the topic's id
    assert resume_source(_cfg(tmp_path), "r1", "t", cp, run_uri, said.append) == {}
    assert json.loads((tmp_path / "run" / "source.json").read_text()) == \
        {"topic_ids": {"t": "id-1"}}
    # deleted and created again: a new id, and more records than before
    _broker_says(monkeypatch, _now({0: 0}, {0: 2000}, "id-2"))
    for fail_on_data_loss in (True, False):
        with pytest.raises(TopicRecreated) as refused:
            resume_source(_cfg(tmp_path, fail_on_data_loss), "r1", "t", cp, run_uri,
                          said.append)
        why = str(refused.value)
        assert "topic t was deleted and created again since run r1" in why
        assert "another --run-id" in why
        assert "fail_on_data_loss" not in why.lower()
    assert not said


def test_records_skipped_on_request_are_said_per_partition_and_returned(
        tmp_path: Path, monkeypatch) -> None:
    cp = _checkpoint(tmp_path / "cp", "t", {0: {0: 100, 1: 60}}, [0])
    _broker_says(monkeypatch, _now({0: 200, 1: 75}, {0: 250, 1: 90}, "id-1"))
    said: list[str] = []
    # the default refuses the loss through Spark (keyshift run: exit 3): nothing to say here
    assert resume_source(_cfg(tmp_path), "r1", "t", cp, str(tmp_path / "run"),
                         said.append) == {}
    assert not said
    skipped = resume_source(_cfg(tmp_path, fail_on_data_loss=False), "r1", "t", cp,
                            str(tmp_path / "run"), said.append)
    assert skipped == {"0": 100, "1": 15}
    assert len(said) == 1 and said[0].startswith("keyshift: WARNING: skipping 115 records")
    assert "partition 0 offsets 100-199 (100); partition 1 offsets 60-74 (15)" in said[0]


# -- the real broker and `keyshift run` ---------------------------------------------------------


def _run(cfg, topic: str, run_id: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic", topic,
         "--engines", "2", "--run-id", run_id, "--available-now", "--json"],
        env={**os.environ, "KEYSHIFT_HOME": str(cfg.home_path),
             "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
             "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
             "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "PYSPARK_PYTHON": sys.executable,
             **env},
        capture_output=True, text=True, timeout=600)


def _recreate(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient

    from keyshift.streaming.kafka_client import BrokerError, create_topic, metadata

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    for _ in range(300):  # the deletion completes in the background
        if topic not in metadata(bootstrap)["topics"]:
            break
        time.sleep(0.1)
    for _ in range(300):
        try:
            create_topic(bootstrap, topic, 1)
            return
        except BrokerError as exc:  # still marked for deletion
            if "marked for deletion" not in str(exc).lower() and "exists" not in str(exc):
                raise
            time.sleep(0.1)
    raise AssertionError(f"topic {topic} could not be created again")


@pytest.mark.integration
@pytest.mark.slow
def test_a_recreated_topic_refuses_the_resume_and_a_new_run_reads_all_of_it(
        platform_config) -> None:
    from engines_support import new_topic, produce_events

    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=1)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 1500, "uniform")
    run_id = f"recreated-{topic}"
    first = _run(cfg, topic, run_id)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1])["events_in"] == 1500

    _recreate(cfg.kafka.bootstrap, topic)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 1000, "uniform", seed=2)

    for env in ({}, {"KEYSHIFT_KAFKA__FAIL_ON_DATA_LOSS": "false"}):
        refused = _run(cfg, topic, run_id, **env)
        assert refused.returncode == 2, (env, refused.stderr[-2000:])
        lines = [x for x in refused.stderr.splitlines() if "deleted and created again" in x]
        assert lines and f"topic {topic}" in lines[0], refused.stderr[-2000:]
        assert "another --run-id" in lines[0]
        assert "FAIL_ON_DATA_LOSS" not in refused.stderr and "fail_on_data_loss" not in \
            refused.stderr

    # the way the refusal gives: a new run reads the new topic from its start
    again = _run(cfg, topic, f"{run_id}-new")
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["events_in"] == 1000 and summary["skipped_offsets"] == {}
