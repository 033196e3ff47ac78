"""Whether a run's job is alive: a heartbeat the job writes beside the warehouse.

Spark runs no micro-batch while the topic has no new records, so the time of a run's last
batch cannot tell an idle job from a stopped one. The job therefore writes
``<warehouse>/_runs/<run>/heartbeat`` when it starts and every :data:`INTERVAL_S` seconds from
a thread of its own (so a batch longer than the bound does not look dead either), and deletes
it when it stops cleanly (Ctrl-C, SIGTERM, ``--duration``, ``availableNow``, a failed query).
A job killed outright leaves its last heartbeat, which ages: a heartbeat older than
:func:`stale_after_s` of the job's trigger (3 × max(trigger, 10 s)) is not alive.

The heartbeat lives beside the warehouse, not in the local run folder, so that ``keyshift
status`` on any host that sees the warehouse says the same. Its body is JSON with the writer's
wall-clock time and the bound it promises to beat within (``stale_after_s``); a reader
compares that time with its own clock, so hosts' clocks must agree to well within the bound.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from keyshift.lakehouse.storage import delete_if_exists, read_if_exists, write_atomically

INTERVAL_S = 5.0
"""Seconds between two heartbeats of a running job."""
NAME = "heartbeat"


def stale_after_s(trigger_s: float) -> float:
    """A heartbeat older than this is a job that is gone: 3 × max(trigger, 10 s), at least
    six of the job's heartbeats."""
    return 3.0 * max(float(trigger_s), 10.0)


def heartbeat_uri(run_uri: str) -> str:
    """The heartbeat of the run whose files are at ``run_uri`` (``Config.runs_uri(run)``)."""
    return f"{run_uri}/{NAME}"


class Heartbeat:
    """The running job's heartbeat: :meth:`start` writes one and starts the thread that
    writes one every ``interval_s``; :meth:`stop` ends the thread and deletes the file."""

    def __init__(self, run_uri: str, trigger_s: float, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.uri = heartbeat_uri(run_uri)
        self.stale_after_s = stale_after_s(trigger_s)
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # the last write that failed (the next one retries)

    def beat(self) -> None:
        """Write the heartbeat now."""
        body = {"time": self.clock(), "stale_after_s": self.stale_after_s,
                "interval_s": self.interval_s, "pid": os.getpid(),
                "host": socket.gethostname()}
        write_atomically(self.uri, json.dumps(body).encode())

    def start(self) -> None:
        self.beat()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="keyshift-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
                self.error = None
            except Exception as exc:  # noqa: BLE001 -- storage blip: the next beat retries
                self.error = str(exc)

    def stop(self) -> None:
        """End the beats and delete the heartbeat: the job stopped cleanly (idempotent; a
        delete that fails leaves a heartbeat that stops being alive within the bound)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
            self._thread = None
        try:
            delete_if_exists(self.uri)
        except Exception as exc:  # noqa: BLE001 -- storage gone too: the heartbeat ages out
            self.error = str(exc)


def read(run_uri: str) -> dict[str, Any] | None:
    """The run's last heartbeat, or None (never written, deleted by a clean stop, or not
    readable JSON: a half-written file cannot exist, the write is atomic)."""
    body = read_if_exists(heartbeat_uri(run_uri))
    if body is None:
        return None
    try:
        beat = json.loads(body)
        return beat if isinstance(beat, dict) and isinstance(beat.get("time"), int | float) \
            else None
    except ValueError:
        return None


def alive(beat: dict[str, Any] | None, now: float, trigger_s: float) -> tuple[bool, float | None]:
    """(alive, the heartbeat's age in seconds) of a run whose last heartbeat is ``beat``:
    alive when there is one no older than the bound it carries (``stale_after_s``; a beat
    without one: :func:`stale_after_s` of ``trigger_s``, the reader's trigger)."""
    if beat is None:
        return False, None
    age = now - float(beat["time"])
    bound = beat.get("stale_after_s")
    if not isinstance(bound, int | float) or bound <= 0:
        bound = stale_after_s(trigger_s)
    return age <= bound, age
