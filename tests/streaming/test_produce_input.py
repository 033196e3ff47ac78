"""Producing test input (issue 46 item 10): ``produce --from F --raw`` sends lines as they are,
a typo'd topic is refused with the topics there are and never created (the local broker
creates none on first use), Ctrl-C says how many records went out, and ``--json`` on
produce, kafka and stream prints one JSON object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from engines_support import consume

from keyshift.cli import main
from keyshift.streaming.producer import produce, send_lines
from keyshift.workloads import make_generator


class _Sink:
    """A KafkaProducer's surface: records what is sent, flushed and closed."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.flushed = self.closed = False

    def send(self, topic, key=None, value=None):
        self.sent.append((topic, key, value))

        class Done:
            def add_errback(self, fn):
                return self

        return Done()

    def flush(self, timeout=None):
        self.flushed = True

    def close(self, timeout=None):
        self.closed = True


def test_raw_lines_go_out_byte_for_byte_without_a_key() -> None:
    sink = _Sink()
    lines = [b'{not json\n', b'{"id": "x", "key": "k"}\r\n', b"\xff\xfe\n", b"\n", b"last"]
    stats = send_lines(sink, "t", iter(lines), rate=1e9)
    assert [v for _, _, v in sink.sent] == [b'{not json', b'{"id": "x", "key": "k"}',
                                            b"\xff\xfe", b"", b"last"]
    assert {k for _, k, _ in sink.sent} == {None}
    assert (stats.sent, stats.good, stats.bad_total, stats.skipped) == (5, 0, 0, 0)
    assert sink.flushed and sink.closed


def test_ctrl_c_ends_a_producer_with_what_it_sent_flushed() -> None:
    sink = _Sink()
    gen = make_generator("wordcount", seed=1)
    calls = []

    class Interrupted:
        def batch(self, n, t_s, now_ms):
            calls.append(n)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return gen.batch(n, t_s, now_ms)

    stats = produce(sink, "t", Interrupted(), rate=1e6, count=10**6)
    assert stats.interrupted and stats.sent == len(sink.sent) == calls[0] + calls[1]
    assert sink.flushed and sink.closed
    assert stats.as_json()["interrupted"] is True and stats.as_json()["sent"] == stats.sent


def test_the_local_broker_creates_no_topic_on_first_use(tmp_path: Path) -> None:
    from keyshift.config import load_config
    from keyshift.streaming.broker import Broker

    broker = Broker.from_config(load_config(env={}, home=str(tmp_path)), folder=tmp_path / "k")
    broker.folder.mkdir(parents=True)
    broker._write_config()
    props = broker.properties_file.read_text().splitlines()
    assert "auto.create.topics.enable=false" in props


@pytest.mark.parametrize("argv, field", [
    (["--raw"], "--raw"),  # lines of what? --from is needed
    (["--from", "x.jsonl", "--raw", "--app", "wordcount"], "--raw"),
    (["--from", "/nonexistent/lines.txt", "--raw"], "--from"),
])
def test_raw_input_mistakes_are_one_line_exit_2(argv, field, capsys, ks_home) -> None:
    assert main(["produce", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_kafka_json_answers_one_object(capsys, ks_home, monkeypatch) -> None:
    from keyshift.streaming.broker import free_port

    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(free_port()))
    assert main(["kafka", "stop", "--json"]) == 0  # nothing listens: not running
    out = json.loads(capsys.readouterr().out)
    assert out == {"action": "stop", "ok": True, "result": "not running",
                   "bootstrap": out["bootstrap"]}
    assert main(["kafka", "topic", "create", "t", "--json"]) == 1  # no broker
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["action"] == "topic create" and out["ok"] is False
    assert "no Kafka broker answers" in out["error"] and captured.err.count("\n") == 1


# -- the real broker ----------------------------------------------------------------------------


def _env(bootstrap_broker) -> dict[str, str]:
    return {"KEYSHIFT_KAFKA__PORT": str(bootstrap_broker.port),
            "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(bootstrap_broker.controller_port)}


@pytest.mark.integration
def test_raw_sends_malformed_lines_byte_for_byte(kafka_broker, ks_home, tmp_path, monkeypatch,
                                                 capsys) -> None:
    from keyshift.streaming.kafka_client import create_topic

    topic = f"raw-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, 1)
    for k, v in _env(kafka_broker).items():
        monkeypatch.setenv(k, v)
    lines = [b'{"id": "a", "key": "k", "ts": 1}', b"{not json", b'{"id": "b", "ts": "soon"}',
             b"\xff\xfe not utf-8", b"", b'"just a string"']
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["produce", "--from", str(path), "--raw", "--topic", topic, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["topic"], out["sent"], out["delivered"], out["failed"]) == (topic, 6, 6, 0)
    got = consume(kafka_broker.bootstrap, topic)
    assert [m.value for m in got] == lines and {m.key for m in got} == {None}


@pytest.mark.integration
def test_a_missing_topic_is_refused_with_the_topics_there_are_and_not_created(
        kafka_broker, ks_home, monkeypatch, capsys) -> None:
    from kafka.errors import KafkaTimeoutError

    from keyshift.streaming.kafka_client import create_topic, metadata
    from keyshift.streaming.producer import connect

    there = f"there-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, there, 1)
    typo = f"{there}x"  # a typo of it: named first even among a suite's hundreds of topics
    for k, v in _env(kafka_broker).items():
        monkeypatch.setenv(k, v)
    assert main(["produce", "--app", "wordcount", "--count", "5", "--topic", typo]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no topic '{typo}'" in err and there in err
    assert f"keyshift kafka topic create {typo}" in err
    # nor does the broker create it for a client that sends to it anyway
    producer = connect(kafka_broker.bootstrap, timeout_s=2)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send(typo, b"x").get(timeout=5)
    finally:
        producer.close(timeout=5)
    assert typo not in metadata(kafka_broker.bootstrap)["topics"]


@pytest.mark.integration
def test_ctrl_c_on_produce_says_how_many_it_sent_all_of_them_in_the_topic(
        kafka_broker, ks_home) -> None:
    from keyshift.streaming.kafka_client import TopicEnds, create_topic

    topic = f"sigint-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, 2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "keyshift.cli", "produce", "--app", "wordcount", "--topic",
         topic, "--rate", "300", "--count", "1000000", "--json"],
        env={**os.environ, **_env(kafka_broker)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    ends = TopicEnds(kafka_broker.bootstrap, topic)
    try:
        while sum(ends.offsets().values()) < 100:  # it is sending
            assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    in_topic = sum(ends.offsets().values())
    lines = [x for x in err.splitlines() if "interrupted after sending" in x]
    assert lines == [f"keyshift produce: interrupted after sending {in_topic:,} records to "
                     f"{topic} (flushed)"], err[-2000:]
    summary = json.loads(out)
    assert summary["interrupted"] is True and summary["sent"] == summary["delivered"] == in_topic


@pytest.mark.integration
def test_kafka_topic_create_and_status_answer_json(kafka_broker, ks_home, monkeypatch,
                                                   capsys) -> None:
    for k, v in _env(kafka_broker).items():
        monkeypatch.setenv(k, v)
    topic = f"json-{uuid.uuid4().hex[:8]}"
    assert main(["kafka", "topic", "create", topic, "--partitions", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"action": "topic create", "ok": True, "topic": topic, "partitions": 2,
                   "result": f"created topic {topic} with 2 partitions"}
    assert main(["kafka", "status", "--json"]) == 0
    assert topic in json.loads(capsys.readouterr().out)["topics"]


@pytest.mark.integration
@pytest.mark.slow
def test_stream_json_prints_the_runs_summary(platform_config) -> None:
    from engines_support import new_topic, produce_events

    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=1)
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", 40, "uniform")
    done = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "stream", "--app", "wordcount", "--topic", topic,
         "--run-id", f"json-{topic}", "--duration", "15", "--json"],
        env={**os.environ, "KEYSHIFT_HOME": str(cfg.home_path),
             "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "PYSPARK_PYTHON": sys.executable,
             **_env(SimpleBroker(cfg))},
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)  # the whole of stdout: one object, no table
    assert summary["run_id"] == f"json-{topic}" and summary["topic"] == topic
    assert summary["failed"] is False and summary["interrupted"] is False
    assert 0 <= summary["events_in"] <= 40 and summary["skipped_offsets"] == {}


class SimpleBroker:
    """The ports of the test broker from a config (for :func:`_env`)."""

    def __init__(self, cfg) -> None:
        self.port, self.controller_port = cfg.kafka.port, cfg.kafka.controller_port


def test_a_missing_topic_names_the_nearest_ones_first_among_many(monkeypatch) -> None:
    """A broker with hundreds of topics (a shared one, a test suite's): the refusal names the
    ones nearest the typo first, twenty in all, and how many more there are."""
    import keyshift.streaming.kafka_client as broker
    from keyshift.cli import UsageError
    from keyshift.config import load_config
    from keyshift.streaming.commands.produce import connect_at_start

    topics = [f"t-{i:03d}" for i in range(300)] + ["payments-eu"]
    monkeypatch.setattr(broker, "metadata", lambda *a, **k: {"topics": topics})
    with pytest.raises(UsageError) as err:
        connect_at_start(load_config(env={}), "payments-ue")
    text = str(err.value)
    assert "it has payments-eu, " in text and "and 281 more" in text
