"""Scaling events on Kafka: every decision of the control loop as one JSON record a user can
subscribe to (``[events] topic``; "" = off, the default).

Why: the ``decisions`` table is the durable audit log, but it is read with Spark after the
fact and committed once per ``warehouse.commit_interval_s``. An operator who wants to be told
— page on an ineffective scale-out, count scale-ins, feed another system — subscribes to a
topic instead. The schema is in docs/operations.md ('Scaling events'); :data:`EVENT_SCHEMA`
names it and its version, in every record.

A record per ``decisions`` row whose action is not ``none``: ``scale_out``, ``scale_in``,
``rebalance``, ``declined`` (a veto, or the guardrails holding the scaler) and
``ineffective`` (keyshift.control.guard's verdict on an earlier scale-out). Keyed by run id,
so one run's events stay in order in one partition.

The events must never stop or slow the job: :meth:`EventPublisher.publish` only puts the
records in a bounded buffer (``[events] buffer``); a daemon thread sends them. A broker that
is away is said once (and its return once), the records wait in the buffer, and when it is
full the oldest are dropped and counted (:attr:`EventPublisher.dropped`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

EVENT_SCHEMA = "keyshift.scaling-event"
EVENT_VERSION = 1
KINDS = ("scale_out", "scale_in", "rebalance", "declined", "ineffective")

# decisions columns an event carries as they are (docs/operations.md, 'Scaling events')
_FIELDS = ("component", "policy", "engines_before", "engines_after", "plan_version",
           "moved_groups", "moved_state", "rstd_before", "rstd_after", "hot_group",
           "hot_group_share", "effectiveness", "hold_until_window", "reason")


def _plain(value: Any) -> Any:
    """JSON-safe: numpy scalars as Python numbers, NaN as null, datetimes as ISO-8601."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    item = getattr(value, "item", None)
    if item is not None:
        value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def events_of(rows: Iterable[Mapping[str, Any]], run_id: str, window: int,
              realized: bool) -> list[dict[str, Any]]:
    """The events of one window's ``decisions`` rows (``realized``: the window's decision
    put a new plan version in force)."""
    out = []
    for r in rows:
        kind = r.get("action")
        if kind not in KINDS:
            continue
        event = {"schema": EVENT_SCHEMA, "version": EVENT_VERSION, "kind": kind,
                 "run_id": run_id, "window": int(window), "batch_id": int(r["batch_id"]),
                 "decided_at": _plain(r.get("decided_at")),
                 "realized": bool(realized and r.get("plan_version") is not None)}
        event.update({k: _plain(r.get(k)) for k in _FIELDS})
        out.append(event)
    return out


Send = Callable[[bytes, bytes], None]
"""(key, value) → None once the broker has the record; raises when it does not."""


class EventPublisher:
    """A bounded buffer of events and the thread that sends them (see the module)."""

    def __init__(self, topic: str, connect: Callable[[], Send], buffer: int = 1000,
                 say: Callable[[str], None] = print, retry_s: float = 5.0) -> None:
        if buffer < 1:
            raise ValueError(f"events.buffer: must be >= 1, got {buffer}")
        self.topic = topic
        self.say = say
        self.retry_s = retry_s
        self.sent = 0
        self.dropped = 0
        self._connect = connect
        self._send: Send | None = None
        self._queue: deque[tuple[bytes, bytes]] = deque()
        self._bound = buffer
        self._cv = threading.Condition()
        self._closing = False
        self._down_said = False
        self._thread = threading.Thread(target=self._run, name="keyshift-events",
                                        daemon=True)
        self._thread.start()

    def publish(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Queue ``events``; never blocks on the broker."""
        with self._cv:
            for e in events:
                if len(self._queue) >= self._bound:
                    self._queue.popleft()
                    self.dropped += 1
                self._queue.append((str(e.get("run_id", "")).encode(),
                                    json.dumps(e, separators=(",", ":")).encode()))
            self._cv.notify()

    @property
    def pending(self) -> int:
        with self._cv:
            return len(self._queue)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                key, value = self._queue[0]
            try:
                if self._send is None:
                    self._send = self._connect()
                self._send(key, value)
            except Exception as exc:  # noqa: BLE001 -- the broker's trouble is not the job's
                self._send = None
                if not self._down_said:
                    self._down_said = True
                    self.say(f"scaling events: cannot send to topic {self.topic!r} "
                             f"({_one_line(exc)}); holding up to {self._bound} events, the "
                             "oldest dropped beyond that; the job goes on")
                with self._cv:
                    if self._closing:
                        return
                    self._cv.wait(self.retry_s)
                continue
            with self._cv:
                if self._queue and self._queue[0] == (key, value):
                    self._queue.popleft()
                self.sent += 1
            if self._down_said:
                self._down_said = False
                self.say(f"scaling events: topic {self.topic!r} reachable again; "
                         f"{self.dropped} events dropped so far")

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is buffered for up to ``timeout_s``; what is left is dropped and counted."""
        deadline = time.monotonic() + timeout_s
        while self.pending and self._thread.is_alive() and time.monotonic() < deadline \
                and not self._down_said:
            time.sleep(0.05)
        with self._cv:
            self._closing = True
            self.dropped += len(self._queue)
            self._queue.clear()
            self._cv.notify_all()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        close = getattr(self._send, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 -- closing a client of a broker that is gone
                pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def kafka_sender(cfg: Any, timeout_s: float = 5.0) -> Callable[[], Send]:
    """Connects a kafka-python producer to ``[kafka]`` (its security keys too) on first use;
    each send waits for the broker's acknowledgement up to ``timeout_s``."""

    def connect() -> Send:
        from .kafka_client import client_options
        from .producer import connect as producer

        p = producer(cfg.kafka.bootstrap, timeout_s, client_options(cfg.kafka))
        topic = cfg.events.topic

        def send(key: bytes, value: bytes) -> None:
            p.send(topic, key=key, value=value).get(timeout=timeout_s)

        send.close = lambda: p.close(timeout=timeout_s)  # type: ignore[attr-defined]
        return send

    return connect


def publisher_for(cfg: Any, say: Callable[[str], None] = print) -> EventPublisher | None:
    """The run's publisher, or None when ``[events] topic`` is "" (off)."""
    if not cfg.events.topic:
        return None
    return EventPublisher(cfg.events.topic, kafka_sender(cfg), cfg.events.buffer, say)


__all__ = ["EVENT_SCHEMA", "EVENT_VERSION", "KINDS", "EventPublisher", "events_of",
           "kafka_sender", "publisher_for"]
