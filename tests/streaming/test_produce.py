"""Producers: rate control, bad-record spreading, CLI validation, real round trips."""

from __future__ import annotations

import json
import uuid

import pytest
from engines_support import consume

from keyshift.cli import main
from keyshift.streaming.producer import (
    ProducerError,
    TokenBucket,
    _bad_slots,
    connect,
    produce,
    replay,
)
from keyshift.workloads import make_generator


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_token_bucket_keeps_the_rate():
    clock = FakeClock()
    bucket = TokenBucket(1000, burst=50, clock=clock, sleep=clock.sleep)
    for _ in range(200):
        bucket.take(50)
    assert clock.t == pytest.approx(10.0, rel=0.01)
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(0, 1)


def test_a_bucket_of_a_second_makes_up_for_sleeps_that_overshoot():
    """On a loaded host every sleep overshoots (5 ms per 50 ms measured at load 17): a bucket
    of one chunk drops those tokens and the producer runs ~10 % under its rate; a bucket of a
    second of tokens (what produce() uses) spends them on the next chunks."""

    class LateClock(FakeClock):
        def sleep(self, s: float) -> None:
            self.t += s + 0.005

    def achieved(burst: float) -> float:
        clock = LateClock()
        bucket = TokenBucket(200, burst=burst, clock=clock, sleep=clock.sleep)
        for _ in range(400):  # 4,000 events in chunks of 1/20 s
            bucket.take(10)
        return 4000 / clock.t

    assert achieved(10) < 0.92 * 200
    assert achieved(200) == pytest.approx(200, rel=0.01)


@pytest.mark.parametrize("total, bad", [(200, 8), (10, 10), (7, 3), (1000, 1), (5, 0)])
def test_bad_slots_are_exact_and_spread(total, bad):
    is_bad = _bad_slots(total, bad)
    slots = [i for i in range(total + 5) if is_bad(i)]
    assert len(slots) == bad
    if bad > 1:
        gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
        assert max(gaps) - min(gaps) <= 1


@pytest.mark.parametrize("argv, field", [
    (["--skew", "zipf:1@5"], "--skew"),
    (["--skew", "pareto"], "--skew"),
    (["--rate", "0"], "--rate"),
    (["--duration", "-1"], "--duration"),
    (["--count", "0"], "--count"),
    (["--bad-fraction", "1.5"], "--bad-fraction"),
    (["--malformed", "-2"], "--malformed"),
    (["--speedup", "0"], "--speedup"),
    (["--count", "5", "--malformed", "9"], "--malformed"),
    (["--replay", "/nonexistent/file.csv"], "--replay"),
])
def test_cli_bad_input_exits_2_naming_the_option(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    assert main(["produce", *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_broker_down_is_a_clear_error_not_a_hang(capsys, tmp_path, monkeypatch):
    from keyshift.streaming.broker import free_port

    port = free_port()
    with pytest.raises(ProducerError, match="no Kafka broker answers"):
        connect(f"127.0.0.1:{port}", timeout_s=1)
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(port))
    assert main(["produce", "--count", "3"]) == 2  # a dependency down at start (Exit codes)
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Kafka broker answers" in err


def _consume(bootstrap: str, topic: str) -> list[bytes]:
    return [m.value for m in consume(bootstrap, topic)]


@pytest.mark.integration
def test_produce_sends_exact_counts_with_bad_records(kafka_broker):
    from keyshift.streaming.kafka_client import create_topic

    topic = f"prod-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, 1)  # the broker creates no topic on first use
    stats = produce(connect(kafka_broker.bootstrap), topic,
                    make_generator("traffic", seed=2, producer_id="tp"),
                    rate=20_000, count=300, malformed=12)
    assert (stats.sent, stats.good, stats.bad_total, stats.failed) == (300, 288, 12, 0)
    values = _consume(kafka_broker.bootstrap, topic)
    assert len(values) == 300
    good = []
    for v in values:
        try:
            e = json.loads(v)
        except json.JSONDecodeError:
            continue
        if isinstance(e.get("ts"), int) and "key" in e and len(v) < 65536:
            good.append(e)
    assert len(good) == 288 and len({e["id"] for e in good}) == 288


@pytest.mark.integration
def test_cli_replay_real_file(kafka_broker, real_data, monkeypatch, capsys):
    from keyshift.streaming.kafka_client import create_topic

    topic = f"replay-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, 1)  # produce refuses a missing topic
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(kafka_broker.port))
    monkeypatch.setenv("KEYSHIFT_KAFKA__CONTROLLER_PORT", str(kafka_broker.controller_port))
    rc = main(["produce", "--replay", str(real_data / "dublin_siri_20130131_first10k.csv"),
               "--speedup", "100000", "--limit", "150", "--topic", topic, "--no-progress"])
    assert rc == 0
    assert "150" in capsys.readouterr().out
    events = [json.loads(v) for v in _consume(kafka_broker.bootstrap, topic)]
    assert len(events) == 150 and all(e["key"].startswith("a") for e in events)


def test_replay_compresses_time():
    clock = FakeClock()

    class Sink:
        def __init__(self) -> None:
            self.sent = []

        def send(self, topic, key, value):
            self.sent.append((clock.t, json.loads(value)))

            class F:
                def add_errback(self, fn):
                    return None
            return F()

        def flush(self, timeout=None):
            return None

        def close(self, timeout=None):
            return None

    sink = Sink()
    events = [{"id": str(i), "key": "k", "ts": 1_000_000 + i * 60_000} for i in range(5)]
    stats = replay(sink, "t", events, speedup=60, clock=clock, sleep=clock.sleep)
    assert stats.good == 5
    times = [t for t, _ in sink.sent]
    assert times == pytest.approx([0, 1, 2, 3, 4])
    shifted = [e["ts"] for _, e in sink.sent]
    assert [b - a for a, b in zip(shifted, shifted[1:], strict=False)] == [1000] * 4
