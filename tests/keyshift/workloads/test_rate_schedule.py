"""A rate that changes over time (``keyshift produce --rate 100@0,800@60,100@180``): parsed
with errors that name the option, integrated for the event count, and followed by the
producer's pacing, checked against a fake clock and a fake Kafka producer."""

from __future__ import annotations

import pytest

from keyshift.cli import main
from keyshift.workloads import WorkloadInputError, make_generator
from keyshift.workloads.rate import RateSchedule


def test_parse_and_read_a_ramp() -> None:
    r = RateSchedule.parse("100@0,800@60,100@180")
    assert r.steps == ((0.0, 100.0), (60.0, 800.0), (180.0, 100.0)) and not r.constant
    assert [r.at(t) for t in (0, 59.9, 60, 179, 180, 1e6)] == [100, 100, 800, 800, 100, 100]
    assert r.events(240) == 100 * 60 + 800 * 120 + 100 * 60
    assert r.events(30) == 3000 and r.peak == 800 and r.last_start == 180
    assert RateSchedule.parse("2000").constant and RateSchedule.parse(2000.0).at(5) == 2000


@pytest.mark.parametrize("text, why", [
    ("", "is not EVENTS_PER_S"), ("fast", "is not EVENTS_PER_S"),
    ("100@5,200@10", "must start at 0 s"), ("100@0,200@10,50@10", "must increase"),
    ("100@0,200", "needs @SECONDS"), ("0", "positive"), ("100@0,0@60", "positive"),
])
def test_a_bad_schedule_names_the_option(text: str, why: str) -> None:
    with pytest.raises(WorkloadInputError, match=why) as err:
        RateSchedule.parse(text)
    assert str(err.value).startswith("rate")


def test_produce_refuses_a_bad_rate_in_one_line(capsys) -> None:
    assert main(["produce", "--rate", "100@5", "--duration", "1"]) == 2
    assert "--rate" in capsys.readouterr().err


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Sent:
    """A KafkaProducer stand-in that notes when each record was sent."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def send(self, topic, key=None, value=None, **kw):
        self.times.append(self.clock.now)

        class Done:
            def add_errback(self, fn):
                return self

            def add_callback(self, fn):
                return self
        return Done()

    def flush(self, timeout=None):
        return None

    def close(self, timeout=None):
        return None


def test_the_producer_follows_the_steps() -> None:
    from keyshift.streaming.producer import produce

    clock = Clock()
    kafka = Sent(clock)
    ramp = RateSchedule.parse("100@0,800@10,100@20")
    gen = make_generator("wordcount", keys=50, seed=1)
    stats = produce(kafka, "t", gen, rate=ramp, duration_s=30, clock=clock, sleep=clock.sleep)
    assert stats.sent == ramp.events(30) == 10_000
    per_s = [sum(1 for t in kafka.times if s <= t < s + 1) for s in range(30)]
    # each second sends its step's rate, within one chunk (a twentieth of a second of the
    # step before: the chunk paced at the old rate lands at the step's first instant)
    for s, n in enumerate(per_s[:-1]):
        want = ramp.at(s)
        assert abs(n - want) <= max(want, ramp.at(s - 1)) / 20 + 6, (s, n, want)
    assert per_s[15] == 800 and per_s[25] == 100
