"""Scrapes of the live-metrics endpoint (keyshift.streaming.live_metrics) under load: a burst of
concurrent scrapes is answered in full, and neither a burst nor a client that holds a
connection open without a request holds up what the batch path does.

Why: 200 concurrent scrapes of a running job left ~100 timed out after 30 s (each scrape
rendered the registry and asked the broker for the topic's end offsets, one after the other)
and slowed a batch from ~1.7 s to 3.95 s. The assertions are on answers and completion only."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import pytest

from keyshift.streaming import live_metrics
from keyshift.streaming.live_metrics import LiveMetrics, close_endpoints, endpoint

SCRAPES = 200
CLIENT_TIMEOUT_S = 5.0  # each scraper's socket timeout: a few seconds, as a scraper sets


@dataclass
class Report:  # the fields of keyshift.streaming.job.BatchReport
    batch_id: int = 0
    events: int = 100
    dead_letter: int = 0
    complex_events: int = 1
    rstd: float = 10.0
    engines: int = 2
    plan_version: int = 1
    moved_groups: int = 0
    moved_bytes: int = 0
    duration_s: float = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, timeout: float = CLIENT_TIMEOUT_S) -> bytes:
    """One scrape over a raw socket (HTTP/1.0: the server closes when it has answered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(b"GET /metrics HTTP/1.0\r\nHost: keyshift\r\n\r\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def served():
    """A job's live metrics on a fresh endpoint, its lag gauge asking a broker that takes a
    while to answer (as a real one does: each ask opens a Kafka consumer)."""
    port = _free_port()
    ep = endpoint("127.0.0.1", port)
    asked: list[float] = []

    def slow_topic_ends() -> dict[int, int]:
        asked.append(time.monotonic())
        time.sleep(0.25)
        return {0: 40}

    live = LiveMetrics("scraped", ep.families, topic="t", topic_ends=slow_topic_ends,
                       on_change=ep.changed)
    live.observe_batch(Report(events=7))
    live.observe_progress({"sources": [{"endOffset": {"t": {"0": 10}},
                                        "latestOffset": {"t": {"0": 10}}}]})
    try:
        yield port, live, asked
    finally:
        close_endpoints()


def test_two_hundred_concurrent_scrapes_all_get_an_answer(served) -> None:
    port, _live, asked = served
    answers: list[bytes | BaseException] = []
    lock = threading.Lock()

    def scraper() -> None:
        try:
            body = _scrape(port)
        except BaseException as exc:  # noqa: BLE001 -- counted below with its reason
            body = exc
        with lock:
            answers.append(body)

    threads = [threading.Thread(target=scraper) for _ in range(SCRAPES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [a for a in answers if not isinstance(a, bytes) or not a.startswith(b"HTTP/1.")
              or b" 200 " not in a.split(b"\r\n", 1)[0]]
    assert not failed, f"{len(failed)} of {SCRAPES} scrapes got no answer: {failed[:3]!r}"
    assert all(b'keyshift_events_total{run_id="scraped"} 7.0' in a for a in answers)
    assert all(b'keyshift_kafka_lag_records{run_id="scraped"} 30.0' in a for a in answers)
    # one render serves every scrape that arrives while it runs: the broker is not asked
    # once per scrape
    assert len(asked) < SCRAPES // 4


def test_the_batch_side_does_not_wait_on_a_client_that_holds_a_connection(
        served, monkeypatch) -> None:
    port, live, _asked = served
    monkeypatch.setattr(live_metrics._ScrapeHandler, "timeout", 1.0)
    silent = socket.create_connection(("127.0.0.1", port), timeout=30)  # sends nothing
    half = socket.create_connection(("127.0.0.1", port), timeout=30)
    half.sendall(b"GET /metrics HTTP/1.0\r\n")  # a request that never ends
    try:
        done = threading.Event()

        def batch() -> None:
            for i in range(50):
                live.observe_batch(Report(batch_id=i, events=1))
            done.set()

        worker = threading.Thread(target=batch, daemon=True)
        worker.start()
        worker.join(timeout=60)
        assert done.is_set(), "the batch-side update did not return while a client held on"
        # the server still answers others, with what the batch side observed
        assert b'keyshift_events_total{run_id="scraped"} 57.0' in _scrape(port)
        # and a silent client loses its connection (its thread) instead of holding it
        assert silent.recv(1024) == b""
        assert half.recv(1024) == b""
    finally:
        silent.close()
        half.close()


def test_a_scrape_after_an_observation_sees_it(served) -> None:
    """Read-your-writes: the snapshot a scrape gets was rendered after the last change."""
    port, live, _asked = served
    assert b'keyshift_events_total{run_id="scraped"} 7.0' in _scrape(port)
    live.observe_batch(Report(events=5))
    assert b'keyshift_events_total{run_id="scraped"} 12.0' in _scrape(port)
    assert b"404" in _scrape_path(port, "/nothing").split(b"\r\n", 1)[0]


def _scrape_path(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)
