"""A failed run as a person sees it (issue 15 item 3): by default one line naming the root
cause, what to do and the log file, with Spark's ERROR lines, Java stack traces and Python
tracebacks in that file only; ``-v`` puts Spark's log back on the terminal."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from keyshift.lakehouse import logs
from keyshift.lakehouse.logs import failure_line

ROOT = Path(__file__).resolve().parents[2]
STACK = re.compile(r"^\s+at (org\.apache|java\.|py4j\.)|^Traceback \(most recent call last\)",
                   re.MULTILINE)

# the shape of Spark's failures, cut down from real ones (an operator raising inside the engine
# stage of a foreachBatch; Delta failing to create a table on the driver)
QUERY_FAILED = """\
[STREAM_FAILED] Query [id = e892d589, runId = 1dc43ed8] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in \
foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: \
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/work/main/streaming/job.py", line 410, in _process_batch
    .select("tag", "grp", "engine", "n", "size", "task").collect())
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/streaming/engines.py", line 302, in run
    for tag, rec in run_engine(spec, engine, _input_rows(batches)):
  File "/tmp/ops/boom.py", line 6, in _on_event
    raise RuntimeError("boom in the operator")
RuntimeError: boom in the operator

\tat py4j.Protocol.getReturnValue(Protocol.java:476)
\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(ForeachBatchSink.scala:56)
\t... 34 more
"""
DRIVER_FAILED = """\
An error occurred while calling o85.execute.
: org.apache.spark.SparkException: Job aborted.
\tat org.apache.spark.sql.delta.DeltaLog.createDirectory(DeltaLog.scala:412)
Caused by: org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: \
file:/data/afile
\tat org.apache.hadoop.fs.RawLocalFileSystem.mkdirs(RawLocalFileSystem.java:750)
\t... 36 more
"""


def test_the_root_cause_of_a_query_failure_is_the_operators_exception() -> None:
    line = failure_line(QUERY_FAILED)
    assert line == "RuntimeError: boom in the operator (at /tmp/ops/boom.py:6, in _on_event)"


def test_the_root_cause_of_a_jvm_failure_is_its_innermost_cause() -> None:
    line = failure_line(DRIVER_FAILED)
    assert line == ("ParentNotDirectoryException: Parent path is not a directory: "
                    "file:/data/afile")


def test_an_exception_without_a_trace_is_named_by_its_type() -> None:
    assert failure_line(OSError("disk full")) == "OSError: disk full"
    assert failure_line(KeyError()) == "KeyError"
    assert len(failure_line("x" * 5000)) == 400


@pytest.fixture()
def quiet_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """This process's Python-side loggers writing to a log file, as a quiet command's do,
    restored afterwards (the JVM side is not touched: no Spark here)."""
    for name in ("log_file", "jvm_stderr", "level"):
        monkeypatch.setattr(logs._State, name, None)
    path = tmp_path / "logs" / "status.log"
    logs.configure_python_logging(path)
    yield path
    logs.configure_python_logging(path, "WARN")


def test_an_unexpected_failure_is_one_line_and_its_traceback_goes_to_the_log(
        quiet_log: Path, capsys) -> None:
    @logs.one_line_failure("status")
    def run(args: argparse.Namespace) -> int:
        logging.getLogger("py4j.clientserver").error("the gateway went away")
        raise RuntimeError(DRIVER_FAILED)

    assert run(argparse.Namespace(log_level=None)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not STACK.search(err), err
    assert err.startswith("keyshift status: failed: ParentNotDirectoryException: ")
    assert f"Full log: {quiet_log} (-v shows it here)." in err
    text = quiet_log.read_text()
    assert "Traceback (most recent call last)" in text and "the gateway went away" in text
    assert "RawLocalFileSystem.mkdirs" in text


def test_bad_input_and_a_terminal_log_keep_their_own_manners(quiet_log: Path) -> None:
    from keyshift.cli import UsageError

    @logs.one_line_failure("status")
    def bad(args: argparse.Namespace) -> int:
        raise UsageError("--last: must be >= 1, got 0")

    with pytest.raises(UsageError):  # the CLI prints it, exit status 2
        bad(argparse.Namespace(log_level=None))
    logs.configure_python_logging(quiet_log, "WARN")  # -v: no file to point at

    @logs.one_line_failure("status")
    def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        broken(argparse.Namespace(log_level="WARN"))


_OPERATOR = '''
from keyshift.examples.sessions import SessionOperator


class Boom(SessionOperator):
    app = "boom"

    def _on_event(self, state, event):
        raise RuntimeError("boom in the operator")
'''


@pytest.mark.integration
@pytest.mark.slow
def test_a_failing_run_is_one_line_by_default_and_spark_log_with_v(
        platform_config, tmp_path: Path) -> None:
    from engines_support import new_topic

    from keyshift.examples.sessions import generate
    from keyshift.streaming.producer import connect

    cfg = platform_config
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "boom_operator.py").write_text(_OPERATOR)
    topic = new_topic(cfg.kafka.bootstrap)
    producer = connect(cfg.kafka.bootstrap)
    for e in generate(50, keys=5, seed=1, gap_s=2.0):
        producer.send(topic, key=str(e["key"]).encode(), value=json.dumps(e).encode())
    producer.flush()
    producer.close()
    env = {**os.environ, "KEYSHIFT_HOME": str(tmp_path / "home"),
           "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
           "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
           "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "KEYSHIFT_METRICS__PORT": "0",
           "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "ops"), str(ROOT)])}

    def run(*extra: str, **more_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "keyshift.cli", "run", "--app", "boom_operator:Boom",
             "--topic", topic, "--engines", "2", "--available-now", *extra],
            env={**env, **more_env}, cwd=ROOT, capture_output=True, text=True, timeout=600,
            check=False)

    quiet = run("--run-id", "boom")
    assert quiet.returncode == 1, quiet.stderr[-3000:]
    assert not STACK.search(quiet.stderr) and " ERROR " not in quiet.stderr, quiet.stderr[-3000:]
    failed = [x for x in quiet.stderr.splitlines() if x.startswith("keyshift run: ")]
    assert len(failed) == 1, quiet.stderr
    assert "RuntimeError: boom in the operator (at " in failed[0]
    assert "--run-id boom to resume" in failed[0]
    log = Path(failed[0].split("Full log: ")[1].split(" (-v")[0])
    assert log == tmp_path / "home" / "runs" / "boom" / "spark.log"
    text = log.read_text()
    assert STACK.search(text) and "boom in the operator" in text

    # -v, on a failure of the driver itself (the warehouse cannot be created): Spark's
    # log and the traceback on the terminal, as before
    (tmp_path / "afile").write_text("not a folder")
    loud = run("--run-id", "loud", "-v",
               KEYSHIFT_WAREHOUSE__ROOT=str(tmp_path / "afile" / "warehouse"))
    assert loud.returncode == 1
    assert STACK.search(loud.stderr) and " WARN " in loud.stderr, loud.stderr[-3000:]
    assert "ParentNotDirectoryException" in loud.stderr
