"""Issue 26 item 5, third bullet: a run whose query failed and whose stop then fails too (a
warehouse gone read-only fails the batch's writes first, then the stop's commit of the
staged bookkeeping) reports the query's failure, the first cause, with the advice to resume
and the ``--json`` summary; the stop's failure is its second clause. Without Spark: the
real :class:`StreamJob.stop` / ``flush`` / ``summary`` on a job whose query failed and whose
staged commit raises, driven by ``keyshift run``'s own ``run``."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

import pytest

from keyshift.config import load_config
from keyshift.streaming.commands import run as run_cmd
from keyshift.streaming.executors import RunResources
from keyshift.streaming.flush import Flush
from keyshift.streaming.job import JobOptions, StreamJob, Totals
from keyshift.streaming.query_lifecycle import QueryLifecycle, QueryShape
from keyshift.streaming.storage_watch import StorageWatch

QUERY_ERROR = (
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in "
    "foreach batch sink.\n"
    "Traceback (most recent call last):\n"
    '  File "/work/main/lakehouse/delta.py", line 120, in append_frame\n'
    "    frame.write.format('delta').save(uri)\n"
    "OSError: [Errno 30] Read-only file system: '/wh/events_out/_delta_log'\n")


class _Query:
    def __init__(self, error: str | None) -> None:
        self.error = error
        self.isActive = False  # ended: failed, or done (availableNow)
        self.recentProgress: list = []
        self.stopped = False

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self.stopped = True


class _Staging:
    """Staged bookkeeping whose commit fails like a read-only warehouse's."""

    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.pending = True
        self.commits = 0

    def commit(self) -> int:
        self.commits += 1
        if self.fails:
            raise PermissionError(13, "Permission denied", "/wh/_runs/ro/staged/metrics")
        self.pending = False
        return 1


class _Stoppable:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:  # the controller's: sends its buffered scaling events
        self.stopped = True

    def plan_for(self, batch_id: int):  # the controller's: no batch ran in these runs
        raise AssertionError(f"no plan asked for: batch {batch_id} never ran")


def fake_job(tmp_path: Path, query_error: str | None, commit_fails: bool) -> StreamJob:
    """A StreamJob without Spark: the fields stop(), flush() and summary() use."""
    job = StreamJob.__new__(StreamJob)
    job.opt = JobOptions(app="wordcount", policy="dlb-h", run_id="ro", topic="words")
    job.run_id, job.app, job.topic, job.workload = "ro", "wordcount", "words", "wordcount.words"
    job.run_dir = tmp_path / "runs" / "ro"
    job.run_dir.mkdir(parents=True)
    job.checkpoint = str(tmp_path / "checkpoint")
    job.totals = Totals(batches=3, records=300, events_in=300, processed=300,
                        durations=[0.5, 0.6, 0.7])
    job.staging = _Staging(commit_fails)
    job.controller = _Stoppable()
    job._lock = threading.Lock()
    # warehouse.outage_s = 0: these runs stop at the first refused write, as before
    job.lifecycle = QueryLifecycle(QueryShape("keyshift-ro", job.checkpoint, 1.0, True),
                                   StorageWatch("/wh", 0.0), _Stoppable(), _Stoppable())
    job.lifecycle.query = _Query(query_error)
    job.flushes = Flush(job.staging, job.lifecycle.storage_watch, job.lifecycle.batch_lock,
                        1.0)
    job.resources = RunResources("fixed", None, None, executor_cores=1, local_cores=2)
    job.skipped_offsets = {}  # a resume's records kafka.fail_on_data_loss=false skipped
    job.groups, job.per_window = 64, 2  # what the run's cost reads (no batches.jsonl here)
    job.admission, job.admission_restarts = None, []  # max_offsets_per_trigger as given
    job.startup = None  # not timed here
    job.cfg = load_config(env={})
    return job


def run_with(job: StreamJob, monkeypatch, tmp_path, capsys) -> tuple[int, dict, str]:
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(run_cmd, "check_topic", lambda cfg, topic: None)
    monkeypatch.setattr(run_cmd, "start_job",
                        lambda cfg, opts, level=None, say=None, ledger=None, startup=None: job)
    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    args = p.parse_args(["--app", "wordcount", "--topic", "words", "--run-id", "ro",
                         "--available-now", "--json"])
    if not hasattr(args, "config"):  # --config may come from the CLI's global options
        args.config = None
    code = run_cmd.run(args)
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err.strip().splitlines()[-1]


def test_the_query_failure_wins_over_the_failed_stop_commit(tmp_path, monkeypatch, capsys):
    job = fake_job(tmp_path, QUERY_ERROR, commit_fails=True)
    code, summary, line = run_with(job, monkeypatch, tmp_path, capsys)
    assert code == 1
    # the stop was tried, once
    assert job.staging.commits == 1 and job.lifecycle.heartbeat.stopped
    # first cause first, with the advice; the stop's failure as the second clause
    assert line.startswith("keyshift run: the streaming query failed: OSError: [Errno 30] "
                           "Read-only file system"), line
    assert "--run-id ro to resume" in line
    assert line.index("Read-only") < line.index("Stopping the run failed too")
    assert "Permission denied" in line
    assert summary["failed"] is True and summary["events_in"] == 300
    assert summary["error"].startswith("OSError: [Errno 30] Read-only file system")
    assert "Permission denied" in summary["stop_error"]
    assert (job.run_dir / "progress.jsonl").exists()  # written before the failing commit


def test_a_failed_stop_alone_is_reported_with_the_summary(tmp_path, monkeypatch, capsys):
    job = fake_job(tmp_path, None, commit_fails=True)
    code, summary, line = run_with(job, monkeypatch, tmp_path, capsys)
    assert code == 1
    assert line.startswith("keyshift run: stopping the run failed: PermissionError"), line
    assert "--run-id ro" in line and "stays staged" in line
    assert summary["failed"] is True and "Permission denied" in summary["error"]
    assert "stop_error" not in summary


def test_a_clean_run_says_not_failed(tmp_path, monkeypatch, capsys):
    job = fake_job(tmp_path, None, commit_fails=False)
    code, summary, _ = run_with(job, monkeypatch, tmp_path, capsys)
    assert code == 0 and job.staging.commits == 1
    assert summary["failed"] is False and summary["error"] is None


def test_a_query_that_fails_as_the_loop_ends_is_a_failure(tmp_path):
    """The loop reads ``exception()`` before ``isActive``: a query failing between the two
    is inactive with its exception set, and must be reported, not taken for done."""

    class Racy(_Query):
        calls = 0

        def exception(self):
            self.calls += 1
            return None if self.calls == 1 else QUERY_ERROR

    job = fake_job(tmp_path, None, commit_fails=False)
    job.lifecycle.query = Racy(None)
    ending = run_cmd.wait_and_stop(job, None, lambda *a: None)
    assert ending.failed == QUERY_ERROR and ending.stop_failed is None


@pytest.mark.parametrize("failed", [QUERY_ERROR, None])
def test_stop_job_returns_the_stop_failure_as_one_line(tmp_path, failed):
    job = fake_job(tmp_path, failed, commit_fails=True)
    said = run_cmd.stop_job(job)
    assert said.startswith("PermissionError") and "\n" not in said


def test_a_storage_outage_shorter_than_outage_s_is_ridden_out(tmp_path, monkeypatch):
    """Issue 26 item 3: the query fails on a read-only warehouse; the job says once that it
    waits, starts the query again in place (a restart's recovery) while the warehouse still
    refuses the start, and goes on when it answers; the run ends clean."""
    said: list[str] = []
    job = fake_job(tmp_path, QUERY_ERROR, commit_fails=False)
    job.lifecycle.storage_watch = StorageWatch("/wh", 60.0, say=said.append,
                                               first_pause_s=0.0)
    attempts: list[int] = []
    monkeypatch.setattr(job, "_new_attempt", lambda: None)

    def start():
        attempts.append(1)
        if len(attempts) < 3:  # the start marker's write is refused twice
            raise OSError(30, "Read-only file system", "/wh/_runs/ro/started")
        job.lifecycle.query = _Query(None)  # this attempt runs to its end (availableNow)
        job.lifecycle.storage_watch.resumed()  # what its first batch does

    monkeypatch.setattr(job, "start", start)
    ending = run_cmd.wait_and_stop(job, None, lambda *a: None)
    assert ending.failed is None and ending.stop_failed is None and len(attempts) == 3
    assert [x.split(" (")[0] for x in said] == ["keyshift: waiting for the warehouse at /wh",
                                                 said[1]]
    assert said[1].startswith("keyshift: the warehouse at /wh answers again")


def test_a_logic_error_is_not_ridden_out(tmp_path, monkeypatch):
    job = fake_job(tmp_path, "ValueError: a bug in the operator", commit_fails=False)
    job.lifecycle.storage_watch = StorageWatch("/wh", 60.0, say=lambda s: pytest.fail(s))
    monkeypatch.setattr(job, "start", lambda: pytest.fail("restarted on a logic error"))
    ending = run_cmd.wait_and_stop(job, None, lambda *a: None)
    assert ending.failed == "ValueError: a bug in the operator"
