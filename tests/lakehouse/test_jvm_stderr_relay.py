"""The Spark driver's stderr in an Airflow task log: each line at its own level, not as ERROR
(issue 28 point 5). Airflow ranks everything a task writes to stderr as an error, and the
driver JVM inherits the task's stderr; a task therefore pipes it through
:func:`keyshift.lakehouse.logs.relay_lines` into a logger."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from keyshift.lakehouse.logs import line_level, relay_lines

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("line", "level"), [
    ("WARNING: Using incubator modules: jdk.incubator.vector", logging.WARNING),
    ("26/11/27 14:04:36 WARN Utils: Your hostname, vm, resolves to a loopback address",
     logging.WARNING),
    ("2026-11-27 14:04:36 INFO SparkContext: Running Spark version 4.2.0", logging.INFO),
    ("14:04:36 ERROR Executor: Exception in task 0.0", logging.ERROR),
    ("26/11/27 14:04:36 DEBUG Foo: bar", logging.DEBUG),
    ("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties",
     logging.INFO),
    ('Setting default log level to "WARN".', logging.INFO),
    ("Exception in thread \"main\" java.lang.IllegalStateException: boom", logging.ERROR),
    ("java.io.IOException: No space left on device", logging.ERROR),
])
def test_a_line_is_ranked_by_the_level_it_states(line: str, level: int) -> None:
    assert line_level(line) == level


def test_a_bare_exception_and_its_frames_are_errors() -> None:
    assert line_level("java.io.IOException: gone") == logging.ERROR
    assert line_level("\tat a.B.c(B.java:1)", logging.ERROR) == logging.ERROR
    assert line_level("\tat a.B.c(B.java:1)") == logging.INFO  # nothing to continue


def test_stack_frames_keep_the_level_of_the_line_they_continue() -> None:
    text = ("26/11/27 14:04:36 WARN TaskSetManager: Lost task 0.0\n"
            "java.lang.RuntimeException: flaky\n"
            "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
            "Caused by: java.io.IOException: gone\n"
            "\t... 12 more\n"
            "Ivy Default Cache set to: /x\n")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("keyshift.test.relay")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Keep())
    relay_lines(io.BytesIO(text.encode()), logger)
    # a retried task's exception under a WARN line is part of that warning
    assert [r.levelname for r in records] == [
        "WARNING", "WARNING", "WARNING", "WARNING", "WARNING", "INFO"]
    assert records[2].getMessage() == "\tat org.apache.spark.Foo.bar(Foo.scala:1)"


_DRIVER = r"""
import json, logging, sys
from keyshift.config import load_config
from keyshift.lakehouse.logs import relay_jvm_stderr
from keyshift.lakehouse.session import get_spark

seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append([record.levelname, record.getMessage()])
logging.getLogger("keyshift.spark").addHandler(Keep())
logging.getLogger("keyshift.spark").setLevel(logging.DEBUG)
relay_jvm_stderr()
spark = get_spark(load_config())
assert spark.range(3).count() == 3
spark.stop()
print("SEEN " + json.dumps(seen), flush=True)
"""


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_task_driver_jvm_writes_nothing_to_stderr_and_logs_its_warnings_as_warnings(
    tmp_path: Path,
) -> None:
    import os

    env = dict(os.environ, KEYSHIFT_HOME=str(tmp_path / "ks"),
               KEYSHIFT_CACHE=str(ROOT / ".keyshift" / "cache"), PYSPARK_PYTHON=sys.executable)
    env.pop("KEYSHIFT_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", _DRIVER], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(next(ln[5:] for ln in proc.stdout.splitlines() if ln.startswith("SEEN ")))
    assert ["WARNING", "WARNING: Using incubator modules: jdk.incubator.vector"] in seen, seen
    assert not [m for level, m in seen if level == "ERROR"], seen
    # what the task's stderr (Airflow: ERROR lines) still receives: nothing from the JVM
    assert "incubator" not in proc.stderr and " WARN " not in proc.stderr, proc.stderr[-2000:]
