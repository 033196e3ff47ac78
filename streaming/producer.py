"""Kafka producers: synthetic events at a controlled rate with a changing key skew, and
time-compressed replays of the real data sets.

Rate control is a token bucket refilled at ``rate`` events/s and drained in chunks of about
1/20 s of traffic, so the producer keeps the rate over any window longer than a chunk without
a sleep per event. Events are keyed by their ``key`` (Kafka partitions by it), their value is
one JSON object. Bad records are mixed in on request, spread evenly over the run, so a test
knows exactly how many the ingestion job must reject; :func:`send_lines` sends a file's lines
as they are, so any bad record can be sent on purpose.

Ctrl-C stops a producer between records: what was sent is flushed, and the stats it returns
say it was interrupted, so the command can say how many went out (issue 46 item 10).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from keyshift.workloads import BAD_KINDS, EventGenerator, bad_record
from keyshift.workloads.rate import RateSchedule


class ProducerError(RuntimeError):
    """The broker cannot be reached or refuses the records; the message says which."""


@dataclass
class ProduceStats:
    """What a producer run did: counts by outcome and kind, and how long it took."""

    sent: int = 0
    good: int = 0
    bad: Counter = field(default_factory=Counter)
    failed: int = 0
    elapsed_s: float = 0.0
    first_error: str | None = None
    skipped: int = 0  # records of a user's file that failed their schema, not sent
    interrupted: bool = False  # Ctrl-C stopped the run; what was sent is flushed

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        """The counts as one JSON-able object (``keyshift produce --json``): ``delivered`` is
        what the broker acknowledged, ``sent`` minus ``failed``."""
        return {"sent": self.sent, "delivered": self.sent - self.failed, "valid": self.good,
                "bad": self.bad_total, "bad_kinds": dict(sorted(self.bad.items())),
                "skipped": self.skipped, "failed": self.failed,
                "first_error": self.first_error, "seconds": round(self.elapsed_s, 3),
                "per_s": round(self.rate, 1), "interrupted": self.interrupted}


class TokenBucket:
    """Allows ``rate`` tokens per second with bursts up to ``burst`` tokens."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0
        self._last = clock()

    def retune(self, rate: float, burst: float) -> None:
        """A new rate from now on (a schedule's next step); tokens saved at the old rate are
        kept up to a twentieth of a second at the new one, so a drop sends no burst of the
        old rate."""
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._tokens = min(self._tokens, self.burst, rate / 20)

    def take(self, n: float) -> None:
        """Block until ``n`` tokens are available, then spend them."""
        while True:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            need = min(n, self.burst)
            if self._tokens >= need - 1e-9:  # tolerance: float refills land a hair short
                self._tokens -= n
                return
            self._sleep(max((need - self._tokens) / self.rate, 1e-4))


def connect(bootstrap: str, timeout_s: float = 10.0,
            security: Mapping[str, Any] | None = None, **config: Any):
    """A KafkaProducer, or a ProducerError within ``timeout_s`` when no broker answers or the
    broker refuses the credentials. ``security``: kafka-python security settings
    (:func:`keyshift.streaming.kafka_client.client_options`; default: those of the environment's
    configuration, so a secured cluster works wherever only a bootstrap string is at hand)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from keyshift.streaming.kafka_client import (
        START_HINT,
        BrokerError,
        auth_hint,
        check_listening,
        environment_security,
    )

    try:
        security = environment_security() if security is None else dict(security)
        check_listening(bootstrap, START_HINT)
    except BrokerError as exc:
        raise ProducerError(str(exc)) from None
    try:
        return KafkaProducer(
            bootstrap_servers=bootstrap,
            bootstrap_timeout_ms=int(timeout_s * 1000),
            max_block_ms=int(timeout_s * 1000),
            linger_ms=5, batch_size=256 * 1024, acks=1,
            max_request_size=2 * 1024 * 1024,
            **{**security, **config},
        )
    except (KafkaError, OSError) as exc:
        raise ProducerError(
            f"no Kafka broker answers at {bootstrap} within {timeout_s:g}s"
            f"{START_HINT}: {auth_hint(exc, bootstrap, security)}"
        ) from None


def _bad_slots(total: int, bad: int) -> Callable[[int], bool]:
    """Is record i bad? ``bad`` of ``total`` records, evenly spread (Bresenham)."""
    if bad <= 0 or total <= 0:
        return lambda i: False
    return lambda i: i < total and (i + 1) * bad // total > i * bad // total


class _Sender:
    """Sends records and counts deliveries; async errors are counted, not raised mid-run."""

    def __init__(self, producer, topic: str, stats: ProduceStats) -> None:
        self.producer = producer
        self.topic = topic
        self.stats = stats

    def _failed(self, exc: BaseException) -> None:
        self.stats.failed += 1
        if self.stats.first_error is None:
            self.stats.first_error = repr(exc)

    def send(self, key: str | None, value: bytes) -> None:
        from kafka.errors import KafkaError

        try:
            fut = self.producer.send(
                self.topic, key=key.encode() if key is not None else None, value=value)
        except KafkaError as exc:
            raise ProducerError(f"sending to topic {self.topic} failed: {exc!r}") from None
        fut.add_errback(self._failed)
        self.stats.sent += 1

    def send_event(self, event: Mapping[str, Any]) -> None:
        """One good event as compact JSON, keyed by its ``key``."""
        self.send(str(event["key"]), json.dumps(event, separators=(",", ":")).encode())
        self.stats.good += 1

    def close(self, timeout_s: float) -> None:
        from kafka.errors import KafkaError

        try:
            self.producer.flush(timeout=timeout_s)
        except KafkaError as exc:
            raise ProducerError(f"flushing to topic {self.topic} failed: {exc!r}") from None
        finally:
            self.producer.close(timeout=timeout_s)


@contextmanager
def _sending(sender: _Sender, stats: ProduceStats) -> Iterator[None]:
    """Around a producer's loop: Ctrl-C ends the loop (``stats.interrupted``), and what was
    sent is flushed either way before the producer closes."""
    try:
        yield
    except KeyboardInterrupt:
        stats.interrupted = True
    finally:
        sender.close(timeout_s=30)


def produce(
    producer,
    topic: str,
    generator: EventGenerator,
    *,
    rate: float | RateSchedule,
    duration_s: float | None = None,
    count: int | None = None,
    malformed: int = 0,
    bad_fraction: float = 0.0,
    seed: int = 0,
    progress: Callable[[ProduceStats], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceStats:
    """Send ``count`` events (or what the rate sends in ``duration_s``) at ``rate`` events/s,
    a number or a :class:`~keyshift.workloads.rate.RateSchedule` (a ramp).

    ``malformed`` exact bad records are spread evenly over the run, or each record is bad
    with probability ``bad_fraction``; bad kinds cycle through :data:`BAD_KINDS`.
    """
    if not isinstance(rate, RateSchedule):
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        rate = RateSchedule.parse(float(rate))
    total = count if count is not None else rate.events(duration_s or 0)
    if total <= 0:
        raise ValueError("nothing to send: give a count or a positive duration")
    stats = ProduceStats()
    bad = _BadRecords(_bad_slots(total, malformed), bad_fraction, seed, stats)

    # a second of tokens: a sleep that overshoots (5 ms per 50 ms on a loaded host) is made
    # up by the next chunks; a bucket of one chunk dropped it, 6-10 % under the rate
    now_rate = rate.at(0.0)
    bucket = TokenBucket(now_rate, burst=max(_chunk_at(now_rate), now_rate), clock=clock,
                         sleep=sleep)
    sender = _Sender(producer, topic, stats)
    start = clock()
    i = 0
    with _sending(sender, stats):
        while i < total:
            r = rate.at(clock() - start)
            if r != bucket.rate:  # the schedule's next step: a second of its tokens at most
                bucket.retune(r, max(_chunk_at(r), r))
            n = min(_chunk_at(r), total - i)
            bucket.take(n)
            now = clock()
            events = generator.batch(n, now - start, int(time.time() * 1000))
            for e, kind in zip(events, bad.kinds(i, len(events)), strict=True):
                if kind is None:
                    sender.send_event(e)
                else:
                    sender.send(e["key"], bad_record(kind, e))
            i += n
            stats.elapsed_s = clock() - start
            if progress is not None:
                progress(stats)
    stats.elapsed_s = clock() - start
    return stats


def _chunk_at(rate: float) -> int:
    """Records sent per bucket take at ``rate``: ~20 takes a second, 1 to 2,000."""
    return max(1, min(int(rate / 20) or 1, 2000))


class _BadRecords:
    """Which records of a run go out bad, and of which kind (:data:`BAD_KINDS` in turn):
    the exact slots spread over the run, or each with probability ``fraction`` (one draw
    per record of a chunk, from ``seed``); each counted in ``stats.bad``."""

    def __init__(self, is_bad: Callable[[int], bool], fraction: float, seed: int,
                 stats: ProduceStats) -> None:
        import numpy as np

        self._is_bad, self._fraction, self._stats = is_bad, fraction, stats
        self._rng = np.random.default_rng(seed)
        self._sent = 0

    def kinds(self, first: int, n: int) -> list[str | None]:
        """The bad kind of records ``first`` .. ``first + n - 1`` (None: a good one)."""
        coin = self._rng.random(n) < self._fraction if self._fraction > 0 else None
        out: list[str | None] = []
        for j in range(n):
            if self._is_bad(first + j) or (coin is not None and coin[j]):
                kind = BAD_KINDS[self._sent % len(BAD_KINDS)]
                self._sent += 1
                self._stats.bad[kind] += 1
                out.append(kind)
            else:
                out.append(None)
        return out


def replay(
    producer,
    topic: str,
    events: Iterable[dict[str, Any]],
    *,
    speedup: float = 60.0,
    limit: int | None = None,
    keep_ts: bool = False,
    progress: Callable[[ProduceStats], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceStats:
    """Send real events with their gaps compressed ``speedup`` times.

    Event times are shifted so the first event happens now (the live job's windows are wall
    clock windows), keeping the gaps; ``keep_ts`` sends the original times instead.
    """
    if speedup <= 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    stats = ProduceStats()
    sender = _Sender(producer, topic, stats)
    start = clock()
    wall0 = int(time.time() * 1000)
    ts0: int | None = None
    with _sending(sender, stats):
        for n, e in enumerate(_limited(events, limit)):
            ts0 = e["ts"] if ts0 is None else ts0
            due = (e["ts"] - ts0) / 1000.0 / speedup
            wait = due - (clock() - start)
            if wait > 0:
                sleep(wait)
            out = e if keep_ts else {**e, "ts": wall0 + int((e["ts"] - ts0) / speedup)}
            sender.send_event(out)
            if progress is not None and n % 200 == 0:
                stats.elapsed_s = clock() - start
                progress(stats)
    stats.elapsed_s = clock() - start
    return stats


def send_records(
    producer,
    topic: str,
    records: Iterable[Any],
    *,
    rate: float,
    limit: int | None = None,
    on_bad: Callable[[Any], None] | None = None,
    progress: Callable[[ProduceStats], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceStats:
    """Send a user's records (``keyshift.workloads.records.read_records``: ``Record`` items
    with ``.event``, ``BadRecord`` items) at ``rate`` records/s, each keyed by its ``key``,
    as they are (``ts`` included). A bad item is not sent: it is counted in ``skipped`` and
    handed to ``on_bad``; ``limit`` caps the records sent."""
    def skip(item: Any, stats: ProduceStats) -> bool:
        if getattr(item, "event", None) is not None:
            return False
        stats.skipped += 1
        if on_bad is not None:
            on_bad(item)
        return True

    return _send_paced(producer, topic, records, lambda s, item: s.send_event(item.event),
                       rate=rate, limit=limit, progress=progress, clock=clock, sleep=sleep,
                       skip=skip)


def send_lines(
    producer,
    topic: str,
    lines: Iterable[bytes],
    *,
    rate: float,
    limit: int | None = None,
    progress: Callable[[ProduceStats], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceStats:
    """Send each line as it is, byte for byte (its line break removed), without a key, at
    ``rate`` records/s: a malformed record, a wrong type, a non-UTF-8 byte go to the topic
    unchanged, as a test of what the job does with them needs (``produce --from F --raw``).
    Nothing is validated, so nothing is counted valid or bad."""
    return _send_paced(
        producer, topic, lines,
        lambda s, line: s.send(None, line.removesuffix(b"\n").removesuffix(b"\r")),
        rate=rate, limit=limit, progress=progress, clock=clock, sleep=sleep)


def _send_paced(producer, topic: str, items: Iterable[Any],
                send: Callable[[_Sender, Any], None], *, rate: float, limit: int | None,
                progress: Callable[[ProduceStats], None] | None,
                clock: Callable[[], float], sleep: Callable[[float], None],
                skip: Callable[[Any, ProduceStats], bool] | None = None) -> ProduceStats:
    """The one paced sending loop of a user's input: ``rate`` items/s (a token bucket),
    ``limit`` items sent at most, ``skip`` items counted but not sent (no token taken),
    progress every 200, Ctrl-C and delivery errors as ``_sending`` records them."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    stats = ProduceStats()
    sender = _Sender(producer, topic, stats)
    bucket = TokenBucket(rate, burst=max(1.0, rate / 20), clock=clock, sleep=sleep)
    start = clock()
    with _sending(sender, stats):
        for item in items:
            if limit is not None and stats.sent >= limit:
                break
            if skip is not None and skip(item, stats):
                continue
            bucket.take(1)
            send(sender, item)
            if progress is not None and stats.sent % 200 == 0:
                stats.elapsed_s = clock() - start
                progress(stats)
    stats.elapsed_s = clock() - start
    return stats


def _limited(events: Iterable[dict[str, Any]], limit: int | None) -> Iterator[dict[str, Any]]:
    for n, e in enumerate(events):
        if limit is not None and n >= limit:
            return
        yield e
