"""The query's lifecycle (streaming/query_lifecycle.py) without Spark, with a fixed clock:
when batches run at all (the stop's gate and its order), what a restart in place keeps (the
watches), which failures are ridden out and for how long. The real query's start, stop and
ride-out run end to end in tests/streaming/test_run_stop_failure.py (``keyshift run``'s own
loop, fakes for Spark) and the storage-outage integration tests."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from keyshift.streaming.query_lifecycle import (
    JobStopping,
    QueryLifecycle,
    QueryShape,
)
from keyshift.streaming.storage_watch import StorageWatch

READ_ONLY = OSError(30, "Read-only file system", "/wh/_runs/r/started")


class Watch:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def start(self) -> None:
        self.log.append(f"{self.name} start")

    def stop(self) -> None:
        self.log.append(f"{self.name} stop")


class Query:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.isActive = True
        self.recentProgress = [{"batchId": 0, "numInputRows": 5,
                                "durationMs": {"triggerExecution": 1500, "addBatch": 900}}]

    def stop(self) -> None:
        self.log.append("query stop")
        self.isActive = False

    def exception(self):
        return None


class Frame:
    """A DataFrame's ``writeStream`` chain, recording what the query is started with."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.writeStream = self
        self.options: dict = {}

    def queryName(self, name):
        self.options["name"] = name
        return self

    def foreachBatch(self, fn):
        self.options["process"] = fn
        return self

    def option(self, key, value):
        self.options[key] = value
        return self

    def trigger(self, **trigger):
        self.options["trigger"] = trigger
        return self

    def start(self):
        self.log.append("query start")
        return Query(self.log)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lifecycle(log: list[str], outage_s: float = 60.0, clock: Clock | None = None,
              available_now: bool = False) -> QueryLifecycle:
    watch = StorageWatch("/wh", outage_s, say=lambda line: log.append(line.split(" (")[0]),
                         clock=clock or Clock(), first_pause_s=0.0)
    return QueryLifecycle(QueryShape("keyshift-r", "/ck/r", 2.0, available_now), watch,
                          Watch(log, "broker"), Watch(log, "heartbeat"))


def test_the_query_starts_as_shaped_and_the_watches_only_with_the_first_attempt() -> None:
    log: list[str] = []
    life = lifecycle(log)
    frame = Frame(log)

    def process(df, batch_id):
        return None

    query = life.start(frame, process)
    assert life.query is query
    assert frame.options == {"name": "keyshift-r", "process": process,
                             "checkpointLocation": "/ck/r",
                             "trigger": {"processingTime": "2.0 seconds"}}
    life.start(Frame(log), process)  # a restart in place
    assert log == ["query start", "broker start", "heartbeat start", "query start"]
    assert lifecycle([], available_now=True).shape.trigger() == {"availableNow": True}


def test_a_stopping_job_refuses_the_next_batch_uncommitted() -> None:
    log: list[str] = []
    life = lifecycle(log)
    with life.batch(0):
        log.append("batch 0")
    life.stopping.set()
    with pytest.raises(JobStopping, match="batch 1 not started.*same run id"):
        with life.batch(1):
            log.append("batch 1")
    assert log == ["batch 0"]


def test_stop_lets_the_running_batch_finish_then_stops_the_query(tmp_path: Path) -> None:
    log: list[str] = []
    life = lifecycle(log)
    life.start(Frame(log), lambda df, b: None)
    inside, release = threading.Event(), threading.Event()

    def run_batch() -> None:
        with life.batch(3):
            inside.set()
            release.wait(5)
            log.append("batch 3 done")

    worker = threading.Thread(target=run_batch)
    worker.start()
    assert inside.wait(5)
    stopper = threading.Thread(target=life.stop, args=(5.0, tmp_path / "progress.jsonl",
                                                       lambda: log.append("flush")))
    stopper.start()
    for _ in range(500):  # the stop has begun: it waits for the batch now
        if "broker stop" in log:
            break
        threading.Event().wait(0.01)
    release.set()
    worker.join(5)
    stopper.join(5)
    assert log[3:] == ["broker stop", "batch 3 done", "query stop", "flush", "heartbeat stop"]
    line = json.loads((tmp_path / "progress.jsonl").read_text())
    assert line == {"batch_id": 0, "input_rows": 5, "trigger_s": 1.5, "add_batch_s": 0.9}


def test_a_failed_flush_still_stops_the_heartbeat(tmp_path: Path) -> None:
    log: list[str] = []
    life = lifecycle(log)

    def flush() -> None:
        raise PermissionError(13, "Permission denied")

    with pytest.raises(PermissionError):
        life.stop(1.0, tmp_path / "progress.jsonl", flush)
    assert log == ["broker stop", "heartbeat stop"]
    assert not (tmp_path / "progress.jsonl").exists()  # no query ever started


def test_a_warehouse_outage_is_ridden_out_until_a_restart_takes() -> None:
    log: list[str] = []
    life = lifecycle(log)
    restarts: list[int] = []

    def restart() -> None:
        restarts.append(1)
        if len(restarts) < 3:
            raise READ_ONLY  # the start marker's write is refused again
        log.append("restarted")

    assert life.ride_out(READ_ONLY, restart) is None
    assert len(restarts) == 3
    assert log == ["keyshift: waiting for the warehouse at /wh", "restarted"]
    with life.batch(7):  # the restarted query's first batch ends the outage
        pass
    assert log[-1].startswith("keyshift: the warehouse at /wh answers again")


def test_an_outage_past_outage_s_reports_the_first_cause() -> None:
    clock = Clock()
    life = lifecycle([], outage_s=30.0, clock=clock)

    def restart() -> None:
        clock.now += 20.0
        raise OSError(30, "Read-only file system", "/wh/again")

    assert life.ride_out(READ_ONLY, restart) is READ_ONLY


def test_other_failures_are_not_ridden_out() -> None:
    life = lifecycle([])
    bug = ValueError("a bug in the operator")
    assert life.ride_out(bug, lambda: pytest.fail("restarted on a logic error")) is bug

    def restart() -> None:  # the outage is over, but the restart fails for its own reason
        raise RuntimeError("the checkpoint is gone")

    got = life.ride_out(READ_ONLY, restart)
    assert isinstance(got, RuntimeError) and "checkpoint" in str(got)


def test_a_stop_during_the_wait_returns_the_failure_without_restarting() -> None:
    stop = threading.Event()
    stop.set()
    life = lifecycle([])
    assert life.ride_out(READ_ONLY, lambda: pytest.fail("restarted after stop"),
                         stop) is READ_ONLY


def test_a_source_restart_waits_for_the_running_batch_and_refuses_the_next() -> None:
    """Admission's new read limit: the query restarts in place between batches; a batch
    Spark planned meanwhile is refused before it runs and its planned offsets dropped; the
    replaced query's failure is not the run's."""
    log: list[str] = []
    life = lifecycle(log)
    life.start(Frame(log), lambda df, b: None)
    entered, release = threading.Event(), threading.Event()

    def long_batch() -> None:
        with life.batch(7):
            entered.set()
            release.wait(5)
            log.append("batch 7 done")

    t = threading.Thread(target=long_batch)
    t.start()
    entered.wait(5)
    dropped: list[str] = []
    swap = threading.Thread(target=lambda: life.swap_source(
        lambda: Frame(log), lambda df, b: None, lambda: dropped.append("offsets/8") or [8]))
    swap.start()
    for _ in range(100):  # the swap waits for batch 7
        if life.swapping.is_set():
            break
        threading.Event().wait(0.01)
    assert life.swapping.is_set() and life.running() and life.failure() is None
    assert "query stop" not in log
    release.set()
    t.join(5)
    swap.join(5)
    assert log[-3:] == ["batch 7 done", "query stop", "query start"]
    assert dropped == ["offsets/8"] and life.swaps == 1
    assert not life.swapping.is_set() and life.running() and life.failure() is None
    with life.batch(8):  # the new query's batches run
        log.append("batch 8 done")
    life.swapping.set()  # a batch Spark plans while the swap runs is refused, unrun
    with pytest.raises(JobStopping, match="new read limit"):
        with life.batch(9):
            log.append("batch 9 ran")
    assert "batch 9 ran" not in log


def test_a_source_restart_that_cannot_start_is_the_runs_failure() -> None:
    log: list[str] = []
    life = lifecycle(log)
    life.start(Frame(log), lambda df, b: None)

    def broken() -> Frame:
        raise RuntimeError("broker unreachable")

    assert not life.swap_source(broken, lambda df, b: None, lambda: [])
    assert life.failure() == "restarting the Kafka source failed: broker unreachable"
    stopped = lifecycle([])
    stopped.stopping.set()  # a stopping job starts nothing new
    assert not stopped.swap_source(lambda: Frame([]), lambda df, b: None, lambda: [])
