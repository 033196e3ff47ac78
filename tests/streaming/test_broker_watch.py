"""The broker watch (streaming/broker_watch.py): one line when the broker has been away for
a while, one when it is back, nothing for a blip, and a real probe of a real socket."""

from __future__ import annotations

import socket

import pytest

from keyshift.streaming.broker_watch import BrokerWatch, nobody_listens, reachable


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_an_outage_is_said_once_after_the_grace_and_its_end_once() -> None:
    up = {"v": True}
    said: list[str] = []
    clock = Clock()
    w = BrokerWatch("h:9092", after_s=10, say=said.append, probe=lambda _b: up["v"],
                    clock=clock)
    w.check()
    up["v"] = False
    for t in (2, 6, 11, 15, 40):  # unreachable from t=2: said at 12 s, then silence
        clock.t = t
        w.check()
    assert said == ["keyshift: waiting for the Kafka broker at h:9092 (unreachable for 13 s); "
                    "the job resumes when it is back, and nothing is lost meanwhile"]
    up["v"] = True
    clock.t = 44
    w.check()
    w.check()
    assert said[1] == ("keyshift: the Kafka broker at h:9092 is back after 42 s; the job "
                       "goes on where it was") and len(said) == 2


def test_a_blip_shorter_than_the_grace_says_nothing() -> None:
    up = {"v": False}
    said: list[str] = []
    clock = Clock()
    w = BrokerWatch("h:9092", after_s=10, say=said.append, probe=lambda _b: up["v"],
                    clock=clock)
    for t in (0, 4, 8):
        clock.t = t
        w.check()
    up["v"] = True
    clock.t = 9
    w.check()
    assert said == [] and w.down_since is None


def test_reachable_probes_each_bootstrap_server() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert reachable(f"127.0.0.1:{port}")
        assert reachable(f"nohost-x:1,127.0.0.1:{port}", timeout_s=0.5)
    assert not reachable(f"127.0.0.1:{port}", timeout_s=0.5)  # closed now
    assert not reachable("not-a-port", timeout_s=0.5)


def test_nobody_listens_only_when_every_server_refuses() -> None:
    """A refused connection is a broker that is not there, said at once; a server that
    answers, or one whose fate is not known (no such host, nothing parsable), is left to the
    Kafka client's own timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not nobody_listens(f"127.0.0.1:{port}")
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            closed = other.getsockname()[1]  # bound, never listening: refused
        assert not nobody_listens(f"127.0.0.1:{closed},127.0.0.1:{port}")
    assert nobody_listens(f"127.0.0.1:{port}")
    assert nobody_listens(f"127.0.0.1:{port},127.0.0.1:{closed}")
    assert not nobody_listens(f"nohost-x.invalid:1,127.0.0.1:{port}")
    assert not nobody_listens("not-a-port") and not nobody_listens("")


def test_clients_give_up_at_once_when_nobody_listens() -> None:
    """Health check, topic creation and the producer say "nothing listens" instead of
    waiting out a bootstrap timeout (a minute here, which the test would otherwise show as
    its own time)."""
    from keyshift.streaming.kafka_client import BrokerError, create_topic, metadata
    from keyshift.streaming.producer import ProducerError, connect

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(BrokerError, match=r"no Kafka broker answers at .*connection refused"):
        metadata(bootstrap, timeout_s=60, security={})
    with pytest.raises(BrokerError, match=r"keyshift kafka start.*connection refused"):
        create_topic(bootstrap, "t", 1, timeout_s=60, security={})
    with pytest.raises(ProducerError, match=r"no Kafka broker answers.*connection refused"):
        connect(bootstrap, timeout_s=60, security={})
