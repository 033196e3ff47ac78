"""The storage watch (streaming/storage_watch.py, issue 26 item 3): which failures are the
warehouse's, and how an outage is waited for and said: once that the job waits, once that it
goes on, never past ``warehouse.outage_s``, never for a logic error."""

from __future__ import annotations

import errno
import threading

import pytest

from keyshift.streaming.storage_watch import StorageWatch, storage_failure

# the texts of real failures, trimmed: a Delta append onto a log folder that became a file,
# an engine task's write in a read-only warehouse, Spark's checkpoint on a full disk
DELTA_PARENT = (
    "keyshift.lakehouse.delta.TableWriteError: cannot append to table events_out at /wh/"
    "events_out: ParentNotDirectoryException: Parent path is not a directory: file:/wh/"
    "events_out/_delta_log")
TASK_READ_ONLY = (
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.\n"
    "org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 7.0 "
    "failed 1 times: org.apache.spark.api.python.PythonException: Traceback (most recent "
    "call last):\n  File \"/work/main/streaming/engine_state.py\", line 300, in write\n"
    "OSError: [Errno 30] Read-only file system: '/wh/_engine_state/r/engine-1/cl-7.kss'\n")
CHECKPOINT_FULL = (
    "org.apache.spark.sql.streaming.StreamingQueryException: No space left on device\n"
    "=== Streaming Query ===\nCaused by: java.io.IOException: No space left on device\n"
    "\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)")
S3_GONE = ("py4j.protocol.Py4JJavaError: An error occurred while calling o91.save.\n"
           ": org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on s3a://b/wh: "
           "com.amazonaws.SdkClientException: Unable to execute HTTP request")


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EROFS, "Read-only file system"),
    PermissionError(errno.EACCES, "Permission denied"),
    OSError(errno.EIO, "Input/output error"),
    DELTA_PARENT, TASK_READ_ONLY, CHECKPOINT_FULL, S3_GONE,
])
def test_the_warehouse_s_failures_are_storage_failures(error) -> None:
    why = storage_failure(error)
    assert why and "\n" not in why


def test_a_wrapped_storage_error_is_found_through_its_causes() -> None:
    class TableWriteError(RuntimeError):
        pass

    try:
        try:
            raise OSError(errno.EROFS, "Read-only file system", "/wh/metrics")
        except OSError as exc:
            raise TableWriteError("cannot append to table metrics") from exc
    except TableWriteError as exc:
        assert storage_failure(exc) is not None


@pytest.mark.parametrize("error", [
    ValueError("engines: run r started with 4 engines"),
    KeyError("group"),
    FileNotFoundError(errno.ENOENT, "No such file or directory"),
    "[STREAM_FAILED] ... KAFKA_DATA_LOSS ... Some data may have been lost",
    "org.apache.spark.sql.AnalysisException: [UNRESOLVED_COLUMN] `grp` cannot be resolved",
    # a damaged file is read the same way again: it stops, it is not waited for
    "keyshift.streaming.staging.StagedFileError: /wh/_runs/r/staged/metrics/b000000000003-"
    "driver.parquet: damaged, truncated or torn ([Errno 5] Input/output error)",
    "DamagedStateFileError: /wh/_engine_state/r/engine-0/cl-9.kss: checksum mismatch",
])
def test_logic_errors_and_damage_are_not(error) -> None:
    assert storage_failure(error) is None


def test_a_staged_file_error_object_is_damage_even_with_a_storage_word() -> None:
    from keyshift.streaming.staging import StagedFileError

    assert storage_failure(StagedFileError("x: damaged (Permission denied)", "x")) is None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def watch(outage_s: float = 60.0) -> tuple[StorageWatch, Clock, list[str]]:
    clock, said = Clock(), []
    return StorageWatch("/wh", outage_s, say=said.append, clock=clock), clock, said


def test_an_outage_is_said_once_waited_for_and_its_end_said_once() -> None:
    w, clock, said = watch(60)
    assert w.failed(OSError(errno.EROFS, "Read-only file system"))
    clock.t += 20
    assert w.failed(CHECKPOINT_FULL)  # the same outage, whatever fails next
    assert len(said) == 1 and said[0].startswith("keyshift: waiting for the warehouse at /wh")
    assert "Read-only file system" in said[0] and "60 s" in said[0]
    clock.t += 5
    w.resumed()
    w.resumed()
    assert len(said) == 2 and said[1].startswith(
        "keyshift: the warehouse at /wh answers again; the job goes on where it was, 25 s")
    # a new outage starts its own clock and is said again
    clock.t += 1000
    assert w.failed(TASK_READ_ONLY) and len(said) == 3


def test_past_outage_s_the_watch_gives_up_and_zero_never_waits() -> None:
    w, clock, said = watch(30)
    assert w.failed(DELTA_PARENT)
    clock.t += 29.9
    assert w.failed(DELTA_PARENT)
    clock.t += 0.1
    assert not w.failed(DELTA_PARENT)
    never, _, said0 = watch(0)
    assert not never.failed(OSError(errno.ENOSPC, "No space left on device")) and not said0


def test_a_logic_error_never_waits_and_is_not_said() -> None:
    w, _, said = watch(300)
    assert not w.failed(ValueError("a bug"))
    assert w.down_since is None and said == []
    w.resumed()
    assert said == []  # nothing was down


def test_the_pause_doubles_up_to_its_cap_and_stops_at_the_deadline() -> None:
    w, clock, _ = watch(12)
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout=None):
            waits.append(timeout)
            return False

    w.max_pause_s = 4
    stop = Stop()
    assert w.failed(CHECKPOINT_FULL)
    for _ in range(4):
        w.pause(stop)
    clock.t += 11
    w.pause(stop)
    assert waits == [1, 2, 4, 4, pytest.approx(1)]  # capped, then only what is left


def test_call_retries_an_outage_and_raises_anything_else() -> None:
    w, clock, said = watch(60)
    w.first_pause_s = 0.0
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        clock.t += 3
        if len(tries) < 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return "committed"

    assert w.call(flaky) == "committed" and len(tries) == 3
    assert [s.split(" at ")[0] for s in said] == ["keyshift: waiting for the warehouse",
                                                  "keyshift: the warehouse"]

    def buggy() -> None:
        raise TypeError("not storage")

    with pytest.raises(TypeError):
        w.call(buggy)

    w2, clock2, _ = watch(5)
    w2.first_pause_s = 0.0

    def down() -> None:
        clock2.t += 2
        raise OSError(errno.EROFS, "Read-only file system")

    with pytest.raises(OSError, match="Read-only"):
        w2.call(down)  # tried until outage_s had passed, then the error itself


def test_outage_s_is_checked_and_comes_from_the_environment(monkeypatch) -> None:
    from keyshift.config import ConfigError, load_config

    assert load_config(None).warehouse.outage_s == 300
    monkeypatch.setenv("KEYSHIFT_WAREHOUSE__OUTAGE_S", "0")
    assert load_config(None).warehouse.outage_s == 0
    monkeypatch.setenv("KEYSHIFT_WAREHOUSE__OUTAGE_S", "-1")
    with pytest.raises(ConfigError, match="warehouse.outage_s"):
        load_config(None)


def test_a_stopping_job_ends_the_outage_without_saying_it_goes_on() -> None:
    """The stop's commit went through after the outage outlasted ``outage_s``: the job
    stops, so no line may say it goes on where it was."""
    w, clock, said = watch(5)
    assert w.failed(OSError(errno.EROFS, "Read-only file system"))
    clock.t += 10
    assert not w.failed(OSError(errno.EROFS, "Read-only file system"))  # past outage_s
    w.resumed(announce=False)
    assert len(said) == 1 and not any("answers again" in x for x in said)
    assert w.down_since is None  # the outage is over: a later one is said again
