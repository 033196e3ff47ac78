"""The streaming query's life: its Kafka source, its start with the run's watches, the gate
every micro-batch passes, an outage of the warehouse ridden out by a restart in place, and a
stop between batches.

Apart from :class:`keyshift.streaming.job.StreamJob`, which owns what a batch does, because
these are the rules of when batches run at all, and they hold whatever a batch does: a
stopping job refuses the next batch but lets the running one finish; only the warehouse's
outage is waited out, and only for ``warehouse.outage_s``; the heartbeat stops even when
everything before it failed. Each is tested here with fakes
(``tests/streaming/test_query_lifecycle.py``), in milliseconds. The job hands over what is
its own: the frame to run, its batch function, how to start a new attempt, how to flush.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .storage_watch import StorageWatch, storage_failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from keyshift.config import Config


class JobStopping(RuntimeError):
    """A micro-batch refused because the job is stopping; it is not committed, and a restart
    with the same run id takes it."""


class SourceRestart(JobStopping):
    """A micro-batch refused because the query is being restarted with a new read limit
    (:meth:`QueryLifecycle.swap_source`); Spark planned it with the old limit and the swap
    takes its entry out of the checkpoint, so the new query plans it again."""


class Watch(Protocol):
    """A thread that watches the run while it lives: the broker watch, the heartbeat."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def kafka_stream(spark: SparkSession, cfg: Config, topic: str, *, starting_offsets: str,
                 max_offsets: int, min_partitions: int | None = None) -> DataFrame:
    """The topic as Spark's Kafka source, with the client's security options (docs/kafka.md).

    ``min_partitions``: a hot key's events all sit in one Kafka partition (producers
    partition by key); cutting large partitions' offset ranges into at least this many
    input tasks lets the tasks that summarize a split key share its events (``dc``/``wc``).
    Records deleted before they were read stop the query unless ``kafka.fail_on_data_loss``
    is false (``keyshift run`` says so in one line)."""
    from keyshift.streaming.kafka_client import spark_options

    reader = spark.readStream.format("kafka")
    if min_partitions is not None:
        reader = reader.option("minPartitions", str(min_partitions))
    return (reader
            .option("kafka.bootstrap.servers", cfg.kafka.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", str(cfg.kafka.fail_on_data_loss).lower())
            .option("maxOffsetsPerTrigger", max_offsets)
            .options(**spark_options(cfg.kafka))
            .load())


def drop_planned_batches(spark: SparkSession, checkpoint: str, done: int) -> list[int]:
    """Take out of the query's checkpoint the offsets of batches after ``done`` that Spark
    planned but never committed (``offsets/<id>`` without ``commits/<id>``); their ids.

    Only for a query stopped by :meth:`QueryLifecycle.swap_source`: with the batch gate
    closed, keyshift ran nothing of such a batch, so the new query may plan it again with
    its new read limit. Without this Spark re-executes a planned batch with the offsets it
    logged, the old limit's."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    root = jvm.org.apache.hadoop.fs.Path(checkpoint)
    fs = root.getFileSystem(conf)
    offsets = jvm.org.apache.hadoop.fs.Path(root, "offsets")
    if not fs.exists(offsets):
        return []
    dropped = []
    for st in fs.listStatus(offsets):
        name = st.getPath().getName()
        if not name.isdigit() or int(name) <= done:
            continue
        commit = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(root, "commits"),
                                               name)
        if not fs.exists(commit):
            fs.delete(st.getPath(), False)
            dropped.append(int(name))
    return sorted(dropped)


def wait_committed(spark: SparkSession, checkpoint: str, batch_id: int,
                   timeout_s: float = 60.0, poll_s: float = 0.05) -> bool:
    """Wait until the query's checkpoint holds ``commits/<batch_id>`` (False: it did not
    come within ``timeout_s``)."""
    import time

    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/commits/{batch_id}")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    deadline = time.monotonic() + timeout_s
    while not fs.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


@dataclass(frozen=True)
class QueryShape:
    """What the query is started with, the same for every attempt of a run."""

    name: str
    checkpoint: str
    trigger_s: float
    available_now: bool  # process what the topic holds, then stop

    def trigger(self) -> dict[str, Any]:
        return ({"availableNow": True} if self.available_now
                else {"processingTime": f"{self.trigger_s} seconds"})


class QueryLifecycle:
    """One run's query across its attempts: ``start`` it, let batches through ``batch``,
    ``ride_out`` a failure, ``stop`` it."""

    def __init__(self, shape: QueryShape, storage_watch: StorageWatch, broker_watch: Watch,
                 heartbeat: Watch) -> None:
        self.shape = shape
        # waits out a warehouse that refuses writes, and says so (streaming/storage_watch.py)
        self.storage_watch = storage_watch
        # says when the job waits for a broker that went away, and when it is back; and that
        # the job is alive (keyshift status) until it stops: started with the first attempt,
        # kept across restarts in place
        self.broker_watch, self.heartbeat = broker_watch, heartbeat
        self.query: StreamingQuery | None = None
        # held by a running batch (and by a flush behind the stream, streaming/flush.py)
        self.batch_lock = threading.Lock()
        self.stopping = threading.Event()
        self._watching = False
        # a restart of the source with a new read limit (swap_source): batches that start
        # meanwhile are refused, and the failure of the query it replaces is not the run's
        self.swapping = threading.Event()
        self._swap_lock = threading.Lock()
        self.swap_error: BaseException | None = None
        self.swaps = 0

    def start(self, frame: DataFrame,
              process: Callable[[DataFrame, int], None]) -> StreamingQuery:
        """Start the query over ``frame``, each micro-batch through ``process``; the watches
        with the first attempt only (a restart in place keeps them)."""
        self.query = (frame.writeStream.queryName(self.shape.name)
                      .foreachBatch(process)
                      .option("checkpointLocation", self.shape.checkpoint)
                      .trigger(**self.shape.trigger())
                      .start())
        if not self._watching:
            self._watching = True
            self.broker_watch.start()
            self.heartbeat.start()
        return self.query

    @contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Hold the batch lock while a batch runs, unless the job is stopping (then the batch
        is refused, uncommitted); a batch that went through ends a warehouse outage."""
        with self.batch_lock:
            if self.stopping.is_set():
                raise JobStopping(f"batch {batch_id} not started: the job is stopping; "
                                  "a restart with the same run id takes it")
            if self.swapping.is_set():
                raise SourceRestart(f"batch {batch_id} not started: the source restarts "
                                    "with a new read limit and plans it again")
            yield
            self.storage_watch.resumed()

    def swap_source(self, frame: Callable[[], DataFrame],
                    process: Callable[[DataFrame, int], None],
                    drop_planned: Callable[[], list[int]],
                    committed: Callable[[], None] = lambda: None) -> bool:
        """Restart the query in place over a new ``frame()`` (the source with another read
        limit), between batches: Spark reads ``maxOffsetsPerTrigger`` once, when the query
        starts. The running batch finishes; a batch Spark planned meanwhile is refused
        before keyshift touches anything of it (:class:`SourceRestart`) and
        ``drop_planned`` takes its offsets out of the checkpoint, so the new query plans it
        with the new limit. False when the job is stopping (nothing started) or the new
        query failed to start (:attr:`swap_error`, which :meth:`failure` reports).
        ``committed`` waits for Spark to commit the batch that just ended: the batch
        function returns before Spark writes its commit, and a query stopped in between
        runs that batch again."""
        with self._swap_lock:
            if self.stopping.is_set() or self.query is None:
                return False
            self.swapping.set()
            try:
                with self.batch_lock:  # the running batch ends; none starts after it
                    pass
                committed()
                self.stop_query()
                drop_planned()
                if self.stopping.is_set():
                    return False
                self.query = (frame().writeStream.queryName(self.shape.name)
                              .foreachBatch(process)
                              .option("checkpointLocation", self.shape.checkpoint)
                              .trigger(**self.shape.trigger())
                              .start())
                self.swaps += 1
                return True
            except Exception as exc:  # noqa: BLE001 -- the run reports it as its failure
                self.swap_error = exc
                return False
            finally:
                self.swapping.clear()

    def running(self) -> bool:
        """The query runs, or is being restarted with a new read limit."""
        if self.swapping.is_set():
            return True
        q = self.query
        return q is not None and bool(q.isActive)

    def failure(self) -> str | None:
        """The run's failure as one string (None: none): the query's exception, unless the
        query was stopped by a restart of its source; a restart that could not start the
        new query."""
        if self.swap_error is not None:
            return f"restarting the Kafka source failed: {self.swap_error}"
        if self.swapping.is_set():
            return None
        q = self.query
        exc = q.exception() if q is not None else None
        return None if exc is None else str(exc)

    def ride_out(self, error: BaseException | str, restart: Callable[[], None],
                 stop: threading.Event | None = None) -> BaseException | str | None:
        """After the query failed with ``error``: while it is the warehouse's and the outage
        is younger than ``warehouse.outage_s``, wait and ``restart`` (None: the query runs
        again). A restart in place is exactly a restarted process's recovery
        (:mod:`keyshift.streaming.storage_watch` says why); it fails fast while the
        warehouse still refuses writes (the start marker), and is tried again after a
        backoff. Otherwise returns the failure to report: the query's (the first cause) when
        the outage outlasted ``outage_s``, a restart's own when it failed for another
        reason."""
        first = error
        while self.storage_watch.failed(error):
            self.storage_watch.pause(stop)
            if stop is not None and stop.is_set():
                return first
            try:
                restart()
                return None
            except Exception as exc:  # noqa: BLE001 -- the outage goes on, or a new cause
                error = exc
        return first if storage_failure(error) is not None else error

    def stop_query(self) -> None:
        """Stop a failed attempt's query, which may be half gone."""
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        except Exception:  # noqa: BLE001 -- a query that failed may be half gone
            pass

    def stop(self, timeout_s: float, progress: Path, flush: Callable[[], None]) -> None:
        """Stop between micro-batches: let the running batch finish, refuse the next one,
        append Spark's progress to ``progress``, then ``flush`` the job's staged rows.

        ``query.stop()`` alone interrupts a batch wherever it is (mid Delta commit, mid
        engine task): recovery makes that safe, but it fills the log with the interrupted
        jobs' errors. The batch lock is only waited for, never held across ``query.stop()``:
        the JVM's stop waits for a Python callback in flight, so holding it would deadlock.
        The flush comes last: a failed commit (the warehouse gone read-only) raises, and its
        caller reports it after the query's own failure, if any (commands/run.py stop_job).
        """
        self.stopping.set()
        with self._swap_lock:  # a restart of the source under way ends first
            pass
        try:
            self.broker_watch.stop()
            if self.batch_lock.acquire(timeout=timeout_s):
                self.batch_lock.release()
            if self.query is not None and self.query.isActive:
                self.query.stop()
            self.write_progress(progress)
            flush()
        finally:
            self.heartbeat.stop()  # stopped however the rest went: no longer alive

    def write_progress(self, path: Path) -> None:
        """Spark's own account of the batches (``triggerExecution`` covers offsets, the
        foreachBatch and the commit), beside the job's in the run folder: the measure the
        plain Spark peers of ``bench/bench_stream.py`` are timed by."""
        if self.query is None:
            return
        try:
            progress = self.query.recentProgress
        except Exception:  # the query is gone with its session: nothing to add
            return
        with open(path, "a") as f:
            for p in progress:
                f.write(json.dumps({
                    "batch_id": p["batchId"], "input_rows": p["numInputRows"],
                    "trigger_s": p["durationMs"].get("triggerExecution", 0) / 1000,
                    "add_batch_s": p["durationMs"].get("addBatch", 0) / 1000}) + "\n")
