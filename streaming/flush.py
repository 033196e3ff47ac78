"""When a run's staged bookkeeping is committed (its flush): behind the stream once a
batch makes it due, when the input pauses, and at stop.

Why its own piece: the staged rows (``metrics``, the control store's, ``migrations``,
``key_loads``) wait for one commit per ``warehouse.commit_interval_s``
(:mod:`keyshift.streaming.staging`). Spark runs no empty batches, so without a timer the
tables would lag a stream that paused until its next record; and the stop's commit must
wait out a warehouse outage, since the batches it records have run. Each flush takes the
job's batch lock, so it never runs beside a batch's own writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from keyshift.lakehouse.logs import say


class Flush:
    """The flushes of one job attempt's :class:`keyshift.streaming.staging.StagedAppends`."""

    def __init__(self, staging: Any, watch: Any, batch_lock: threading.Lock,
                 idle_after_s: float,
                 timer: Callable[[float, Callable[[], None]], Any] = threading.Timer) -> None:
        self.staging = staging
        self.watch = watch  # the job's StorageWatch: waits out an outage, says it once
        self.batch_lock = batch_lock
        self.idle_after_s = idle_after_s
        self._timer_of = timer
        self._idle: Any = None

    def after_batch(self, batch_id: int) -> dict[str, float]:
        """A batch ended: the commit that ran behind it (table → seconds, if it finished),
        and the next one started behind the stream when due (the next batch need not
        wait for it)."""
        committed = self.staging.finished()
        if self.staging.due(batch_id):
            self.staging.commit_behind(batch_id)
        return committed

    def when_idle(self) -> None:
        """Commit the staged rows if no batch starts within ``idle_after_s`` (the input has
        paused); a batch that has started meanwhile commits them when they are due."""
        self.cancel()

        def flush_if_idle() -> None:
            if self.batch_lock.acquire(blocking=False):
                try:
                    if self.staging.pending:
                        self.staging.commit()
                except Exception as exc:  # the next batch or the stop retries; say why
                    if not self.watch.failed(exc):  # an outage is said once there
                        say(f"keyshift: bookkeeping rows not committed yet ({exc})")
                finally:
                    self.batch_lock.release()

        self._idle = self._timer_of(self.idle_after_s, flush_if_idle)
        self._idle.daemon = True
        self._idle.start()

    def cancel(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def now(self) -> float:
        """Commit what is staged now, waiting out an outage (a commit is safe to repeat:
        rows land once by key); returns its seconds. The stop's flush."""
        self.cancel()
        with self.batch_lock:
            t0 = time.perf_counter()
            if self.staging.pending:
                self.watch.call(self.staging.commit)
            # the stop's commit went through, but the job stops: it does not "go on"
            self.watch.resumed(announce=False)
            return time.perf_counter() - t0

    def abandon(self) -> None:
        """A failed attempt: no idle commit, and its commit behind the stream waited for
        (the files stay staged; the next attempt commits them by row key)."""
        self.cancel()
        try:
            self.staging.wait()
        except Exception:  # noqa: BLE001 -- what it found is found again by the next attempt
            pass
