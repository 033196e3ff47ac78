"""Ride out a warehouse that refuses writes or reads for a while (issue 26 item 3).

A transient outage of the storage under the warehouse is routine: an object store out of
reach, an HDFS name node failing over, a volume gone read-only or full until someone frees
it. Before this, the first refused write failed the batch, the query and the job. The broker's
outage was already ridden out (:mod:`keyshift.streaming.broker_watch`); this is storage's.

Where the retry happens, and why there: every write the job makes lands under the warehouse
(the Delta tables and their logs, the engines' durable state, the staged bookkeeping, and
Spark's own checkpoint, which Spark writes between our batches), in the driver, in executor
tasks and in Spark's own code. A retry around each of them would miss Spark's, and a batch
retried in place would append blind to tables it had already written. So the one retry is
the one the job already knows to be exactly-once: a failed query is started again in place,
as a restarted process would be (its first batch looks for its rows before appending, the
engines read their state as of the batch before, the controller replays its decisions, what
was staged is committed by row key). :class:`StorageWatch` decides whether a failure is the
warehouse's and still young enough to wait for, paces the attempts, and says once that the
job waits and once that it goes on, like the broker's watch. Past ``warehouse.outage_s`` it
gives up and the job stops with its usual one line; a logic error never waits.
"""

from __future__ import annotations

import errno
import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from keyshift.lakehouse.logs import failure_line
from keyshift.lakehouse.logs import say as say_line

T = TypeVar("T")

# what a refused write or read of the storage sets as errno (Python, pyarrow, a task's trace)
STORAGE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EDQUOT,
    errno.ENOTDIR, errno.ESTALE, errno.ENOTCONN, errno.ETIMEDOUT, errno.ECONNREFUSED,
    errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH,
})
# the same in a failure's text: the OS's words (Python and the JVM both print them), the
# Python errno form inside an executor's traceback, and Hadoop's, Delta's, the object
# stores' and the JVM's IO exception classes as Spark nests them
_STORAGE_TEXT = re.compile(
    r"No space left on device|Read-only file system|Permission denied|Operation not permitted"
    r"|Input/output error|Disk quota exceeded|Not a directory|Stale file handle"
    r"|Transport endpoint is not connected"
    r"|\[Errno (?:" + "|".join(str(e) for e in sorted(STORAGE_ERRNOS)) + r")\]"
    r"|AccessDeniedException|ReadOnlyFileSystemException|java\.nio\.file\.FileSystemException"
    r"|ParentNotDirectoryException|DeltaIOException|PathIOException|Mkdirs failed"
    r"|SafeModeException|StandbyException|RetriableException"
    r"|AWSClientIOException|SdkClientException|AWS Error NETWORK_CONNECTION"
    r"|HDFS connection failed|java\.net\.(?:Connect|UnknownHost|SocketTimeout|NoRouteToHost)"
    r"Exception")
# a damaged file is not an outage: reading it again reads the same bytes
_DAMAGE_TEXT = re.compile(r"StagedFileError|DamagedStateFileError|StateFormatError")


def storage_failure(error: BaseException | str) -> str | None:
    """Why ``error`` is the storage's (one line), or None when it is anything else: a
    logic error, bad input, a damaged file, Kafka's loss of records."""
    seen: list[BaseException] = []
    e: BaseException | None = error if isinstance(error, BaseException) else None
    while e is not None and e not in seen:  # the exception and its causes
        seen.append(e)
        e = e.__cause__ or e.__context__
    if any(_is_damage(x) for x in seen):
        return None
    for x in seen:
        if isinstance(x, OSError) and x.errno in STORAGE_ERRNOS:
            return failure_line(x)
    text = "\n".join(str(x) for x in seen) if seen else str(error)
    if _DAMAGE_TEXT.search(text) or not _STORAGE_TEXT.search(text):
        return None
    return failure_line(error)


def _is_damage(exc: BaseException) -> bool:
    return type(exc).__name__ in ("StagedFileError", "DamagedStateFileError",
                                  "StateFormatError", "PickledStateFileError")


class StorageWatch:
    """One outage of the warehouse at ``where`` at a time: when it began, whether it was
    said, how long to wait before the next attempt. Thread-safe (a commit behind the
    stream and the job's own thread both report to it)."""

    def __init__(self, where: str, outage_s: float, say: Callable[[str], None] = say_line,
                 clock: Callable[[], float] = time.monotonic, first_pause_s: float = 1.0,
                 max_pause_s: float = 10.0) -> None:
        self.where = where
        self.outage_s = outage_s
        self.say = say
        self.clock = clock
        self.first_pause_s = first_pause_s
        self.max_pause_s = max_pause_s
        self.down_since: float | None = None  # the first failure of this outage
        self.said = False
        self.attempts = 0  # pauses taken in this outage (the backoff doubles with each)
        self._lock = threading.Lock()

    def failed(self, error: BaseException | str) -> bool:
        """Note a failure: True when it is the storage's and the outage is younger than
        ``outage_s`` (wait, then try again; said once per outage), False when the caller
        must give up (not the storage's, or waited long enough; 0 = never wait)."""
        why = storage_failure(error)
        if why is None:
            return False
        with self._lock:
            now = self.clock()
            if self.down_since is None:
                self.down_since, self.attempts = now, 0
            if now - self.down_since >= self.outage_s:
                return False
            if not self.said:
                self.said = True
                self.say(f"keyshift: waiting for the warehouse at {self.where} ({why}); the "
                         f"job goes on when it answers, for up to {self.outage_s:g} s "
                         "(warehouse.outage_s), and nothing is lost meanwhile")
            return True

    def pause(self, stop: threading.Event | None = None) -> None:
        """Wait before the next attempt: 1, 2, 4 ... s up to ``max_pause_s``, never past the
        outage's deadline; ``stop`` (Ctrl-C, SIGTERM) ends the wait at once."""
        with self._lock:
            delay = min(self.max_pause_s, self.first_pause_s * 2 ** self.attempts)
            self.attempts += 1
            if self.down_since is not None:
                left = self.down_since + self.outage_s - self.clock()
                delay = max(0.0, min(delay, left))
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)

    def resumed(self, announce: bool = True) -> None:
        """The warehouse took a write again: say so once if the outage was said (unless
        ``announce`` is off: a job that stops does not go on), and end it."""
        with self._lock:
            if self.down_since is None:
                return
            if self.said and announce:
                self.say(f"keyshift: the warehouse at {self.where} answers again; the job "
                         f"goes on where it was, {self.clock() - self.down_since:.0f} s after "
                         "the first refused write")
            self.down_since, self.said, self.attempts = None, False, 0

    def call(self, attempt: Callable[[], T], stop: threading.Event | None = None) -> T:
        """``attempt()`` until it succeeds, while its failures are an outage younger than
        ``outage_s``; for operations that are safe to repeat (a commit by row key)."""
        while True:
            try:
                result = attempt()
            except Exception as exc:
                if not self.failed(exc) or (stop is not None and stop.is_set()):
                    raise
                self.pause(stop)
                if stop is not None and stop.is_set():
                    raise
                continue
            self.resumed()
            return result
