"""The local KRaft broker: life cycle, health, topics, clear failures (real broker)."""

from __future__ import annotations

import json
import socket
import uuid

import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.lakehouse.jars import JarResolutionError, resolve
from keyshift.streaming.broker import Broker, free_port
from keyshift.streaming.kafka_client import BrokerError, TopicEnds, create_topic, metadata


def _broker(tmp_path, port=None, controller=None) -> Broker:
    cfg = load_config(env={}, home=str(tmp_path), kafka={
        "port": port or free_port(), "controller_port": controller or free_port()})
    return Broker.from_config(cfg, folder=tmp_path / "kafka")


@pytest.mark.integration
@pytest.mark.slow
def test_start_is_idempotent_status_is_real_and_stop_is_clean(tmp_path):
    b = _broker(tmp_path)
    assert not b.healthy(timeout_s=1)
    try:
        assert b.start().startswith("started")
        pid = b.pid()
        assert pid is not None
        again = b.start()
        assert again.startswith("already running") and str(pid) in again
        st = b.status()
        assert st["healthy"] and st["brokers"] == 1 and st["pid"] == pid
    finally:
        stopped = b.stop()
    assert stopped.startswith("stopped")
    assert b.pid() is None and not b.pid_file.exists()
    assert not b.status(timeout_s=1)["healthy"]
    assert b.stop() == "not running"


@pytest.mark.integration
def test_topic_create_with_partitions_and_existing_topic(kafka_broker):
    name = f"t-{uuid.uuid4().hex[:8]}"
    assert "created" in create_topic(kafka_broker.bootstrap, name, 3)
    assert "already exists" in create_topic(kafka_broker.bootstrap, name, 3)
    with pytest.raises(BrokerError, match="already exists with 3 partitions"):
        create_topic(kafka_broker.bootstrap, name, 5)
    assert name in metadata(kafka_broker.bootstrap)["topics"]


@pytest.mark.integration
def test_produce_and_consume_round_trip(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer

    name = f"rt-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, name, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    sent = [json.dumps({"id": f"e{i}", "key": f"k{i % 7}", "ts": i}).encode() for i in range(50)]
    for i, v in enumerate(sent):
        producer.send(name, key=f"k{i % 7}".encode(), value=v)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(name, bootstrap_servers=kafka_broker.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    got = [m.value for m in consumer]
    consumer.close()
    assert sorted(got) == sorted(sent)
    ends = TopicEnds(kafka_broker.bootstrap, name, security={}).offsets()
    assert set(ends) == {0, 1} and sum(ends.values()) == len(sent)
    with pytest.raises(BrokerError, match="end offsets of 'x' at 127.0.0.1:"):
        TopicEnds(f"127.0.0.1:{free_port()}", "x", security={}, timeout_s=1).offsets()


@pytest.mark.integration
def test_cli_status_and_topic_create(kafka_broker, monkeypatch, capsys):
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(kafka_broker.port))
    monkeypatch.setenv("KEYSHIFT_KAFKA__CONTROLLER_PORT", str(kafka_broker.controller_port))
    assert main(["kafka", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["healthy"] is True
    assert main(["kafka", "topic", "create", "cli-topic", "--partitions", "2"]) == 0
    assert "cli-topic" in capsys.readouterr().out


def test_cli_bad_partitions_exit_2(capsys):
    assert main(["kafka", "topic", "create", "x", "--partitions", "0"]) == 2
    assert "--partitions" in capsys.readouterr().err


def test_status_when_nobody_listens_is_unhealthy_not_a_hang(tmp_path, monkeypatch, capsys):
    b = _broker(tmp_path)
    st = b.status(timeout_s=1)
    assert st["healthy"] is False and "no Kafka broker answers" in st["error"]
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(b.port))
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    assert main(["kafka", "status"]) == 1
    assert "not healthy" in capsys.readouterr().err


def test_port_taken_by_another_process_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        b = _broker(tmp_path, port=s.getsockname()[1])
        with pytest.raises(BrokerError, match=r"kafka\.port .* already taken"):
            b.start()


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("keyshift.streaming.broker.shutil.which", lambda name: None)
    with pytest.raises(BrokerError, match="Java 17"):
        _broker(tmp_path).start()


def test_missing_maven_without_cache_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("keyshift.lakehouse.jars.shutil.which", lambda name: None)
    with pytest.raises(JarResolutionError, match="Maven"):
        resolve(["org.example:nothing:1.0"], tmp_path / "jars")


@pytest.mark.integration
def test_unreachable_maven_fails_fast_with_a_message(tmp_path):
    # A coordinate that does not exist stands in for an unreachable repository: Maven gives
    # up and the message names what could not be fetched.
    with pytest.raises(JarResolutionError, match="could not fetch org.example.keyshift"):
        resolve(["org.example.keyshift:does-not-exist:0.0.1"], tmp_path / "jars", timeout_s=120)
    with pytest.raises(JarResolutionError, match="did not finish"):
        resolve(["org.example.keyshift:does-not-exist:0.0.2"], tmp_path / "jars2",
                timeout_s=0.01)


def test_cluster_ids_never_look_like_an_option():
    """Regression: a random id starting with '-' made `kafka-storage format -t ID` fail."""
    from keyshift.streaming.broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(c) == 22 and not c.startswith("-") for c in ids)
    assert len(set(ids)) == len(ids)
