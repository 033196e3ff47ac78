"""Scaling events on Kafka (keyshift.streaming.events): every decision of the control loop
as a JSON record on ``[events] topic``; a broker that is away never stops the job.

Pure: the records of a window's decisions rows; the bounded buffer against a port nobody
listens on (said once, oldest dropped and counted, publish never blocks). Integration: the
one-hot-key run of the control loop published to a real broker and read back."""

from __future__ import annotations

import json
import socket
import time
import uuid

import numpy as np
import pytest

from keyshift.config import load_config
from keyshift.control import (
    ControlLoop,
    GuardSettings,
    LoopSettings,
    MemoryControlStore,
    ScalerStep,
    ScalingGuard,
    WindowStats,
)
from keyshift.elastic.baselines import ThresholdScaler
from keyshift.plan import Plan
from keyshift.streaming.events import (
    EVENT_SCHEMA,
    EVENT_VERSION,
    EventPublisher,
    events_of,
    kafka_sender,
    publisher_for,
)

GROUPS, WINDOW_S = 64, 10.0
KEYS = {"schema", "version", "kind", "run_id", "window", "batch_id", "decided_at", "realized",
        "component", "policy", "engines_before", "engines_after", "plan_version",
        "moved_groups", "moved_state", "rstd_before", "rstd_after", "hot_group",
        "hot_group_share", "effectiveness", "hold_until_window", "reason"}


def hot_key_run(windows: int = 6):
    """The control loop on one hot key (60 % of the input): scale-out, then ineffective."""
    loads = np.full(GROUPS, 4000.0 / (GROUPS - 1))
    loads[0] = 6000.0
    step = ScalerStep(ThresholdScaler(max_engines=16), None, WINDOW_S, keep_on_error=False)
    loop = ControlLoop(MemoryControlStore(), LoopSettings(window_s=WINDOW_S), None, "kg", step,
                       run_id="run-hot", guard=ScalingGuard(GuardSettings(effectiveness=0.1)))
    loop.start(Plan.hashed(GROUPS, 4))
    return [loop.step(WindowStats.measured(j, loads, loads.sum(), 0.002, j * WINDOW_S))
            for j in range(windows)]


def all_events(decisions) -> list[dict]:
    return [e for d in decisions for e in events_of(d.rows, "run-hot", d.window, d.realized)]


def test_every_decision_but_none_is_an_event_of_the_documented_schema() -> None:
    events = all_events(hot_key_run())
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "scale_out" and "ineffective" in kinds and "declined" in kinds
    assert "none" not in kinds
    for e in events:
        assert set(e) == KEYS, set(e) ^ KEYS
        assert (e["schema"], e["version"]) == (EVENT_SCHEMA, EVENT_VERSION)
        json.dumps(e, allow_nan=False)  # plain JSON: no NaN, no numpy, dates as text
    first = events[0]
    assert first["realized"] and first["engines_after"] == 5 and first["plan_version"] == 1
    bad = next(e for e in events if e["kind"] == "ineffective")
    assert bad["effectiveness"] < 0.1 and bad["hold_until_window"] > bad["window"]
    assert bad["reason"].startswith("ineffective scale-out")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nobody listens once closed


def test_a_broker_that_is_away_is_said_once_and_the_buffer_is_bounded() -> None:
    cfg = load_config(env={}, kafka={"port": _closed_port()},
                      events={"topic": "keyshift-scaling", "buffer": 3})
    said: list[str] = []
    pub = EventPublisher(cfg.events.topic, kafka_sender(cfg, timeout_s=0.5), 3, said.append,
                         retry_s=0.2)
    try:
        t0 = time.monotonic()
        for i in range(10):
            pub.publish([{"run_id": "r", "kind": "scale_out", "i": i}])
        assert time.monotonic() - t0 < 0.5 * 10  # publish never waits for the broker
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # several retries: still one line
        assert len(said) == 1 and "cannot send to topic 'keyshift-scaling'" in said[0]
        assert pub.pending == 3 and pub.dropped == 7 and pub.sent == 0
    finally:
        pub.close(timeout_s=1.0)
    assert pub.dropped == 10 and pub.pending == 0


def test_events_are_off_by_default_and_the_keys_are_checked() -> None:
    assert publisher_for(load_config(env={})) is None
    with pytest.raises(Exception, match="events.buffer"):
        load_config(env={}, events={"buffer": 0})
    with pytest.raises(Exception, match="events.topic"):
        load_config(env={}, events={"topic": "bad topic!"})


@pytest.mark.integration
def test_decisions_reach_a_real_broker_and_read_back(platform_config) -> None:
    from kafka import KafkaConsumer

    from keyshift.streaming.kafka_client import create_topic

    topic = f"scaling-{uuid.uuid4().hex[:8]}"
    create_topic(platform_config.kafka.bootstrap, topic, 1)  # the broker creates none on use
    cfg = platform_config.model_copy(update={"events": platform_config.events.model_copy(
        update={"topic": topic})})
    said: list[str] = []
    pub = publisher_for(cfg, say=said.append)
    assert pub is not None
    decisions = hot_key_run()
    expected = all_events(decisions)
    for d in decisions:
        pub.publish(events_of(d.rows, "run-hot", d.window, d.realized))
    pub.close(timeout_s=30)
    assert (pub.sent, pub.dropped) == (len(expected), 0), said
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg.kafka.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        got = [(m.key, json.loads(m.value)) for m in consumer]
    finally:
        consumer.close()
    assert [e for _, e in got] == expected  # one partition per run: in order
    assert {k for k, _ in got} == {b"run-hot"}
    assert any(e["kind"] == "ineffective" for _, e in got)


def test_the_job_hands_the_window_its_lag() -> None:
    from types import SimpleNamespace

    from engines_support import MemoryControlLog

    from keyshift.streaming.controller import Controller, progress_lag

    progress = {"sources": [{"endOffset": {"t": {"0": 10, "1": 5}},
                             "latestOffset": {"t": {"0": 30, "1": 5}}}]}
    assert progress_lag(SimpleNamespace(lastProgress=progress)) == 20.0
    assert progress_lag(None) is None and progress_lag(SimpleNamespace(lastProgress=None)) is None

    class Stopping:
        @property
        def lastProgress(self):
            raise RuntimeError("query stopped")

    assert progress_lag(Stopping()) is None
    cfg = load_config(env={}, groups={"count": GROUPS})
    c = Controller(cfg, "run-lag", "kg", GROUPS, 2, 1, MemoryControlLog())
    c.recover(0)
    seen = []
    c.loop.step = lambda w: seen.append(w.lag) or None  # what the loop is handed
    c.collect(0, np.ones(GROUPS), np.zeros(GROUPS))
    c.end_of_batch(0, lag=20.0)
    assert seen == [20.0]


@pytest.mark.integration
def test_the_jobs_controller_publishes_its_decisions(platform_config) -> None:
    """The job's adapter (streaming/controller.py, in-memory store, no Spark) with
    [events] topic set: its window decisions reach the real broker; close() flushes."""
    from engines_support import MemoryControlLog
    from kafka import KafkaConsumer

    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.controller import Controller

    topic = f"scaling-job-{uuid.uuid4().hex[:8]}"
    create_topic(platform_config.kafka.bootstrap, topic, 1)  # the broker creates none on use
    cfg = platform_config.model_copy(update={"events": platform_config.events.model_copy(
        update={"topic": topic})})
    c = Controller(cfg, "run-job", "dlb-h", GROUPS, 4, 1, MemoryControlLog())
    c.recover(0)
    skewed = 100.0 / np.arange(1, GROUPS + 1)  # imbScore 29 % > θ 15 %: DLB-H rebalances
    decisions = []
    for b in range(3):
        c.collect(b, skewed, np.ones(GROUPS))
        decisions.append(c.end_of_batch(b))
    c.close(timeout_s=30)
    assert c.events.dropped == 0
    expected = [e for d in decisions for e in events_of(d.rows, "run-job", d.window,
                                                       d.realized)]
    assert any(e["kind"] == "rebalance" for e in expected)
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg.kafka.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        got = [json.loads(m.value) for m in consumer]
    finally:
        consumer.close()
    assert [(e["kind"], e["batch_id"], e["plan_version"]) for e in got] == \
        [(e["kind"], e["batch_id"], e["plan_version"]) for e in expected]
