"""Spark's log lines go to a file, not to the terminal: a person running ``keyshift run`` reads
one line per batch and, when something fails, one line saying what failed and where the full
log is. ``-v`` or ``--log-level LEVEL`` (:func:`keyshift.cli.add_log_options`) bring Spark's
lines back to the terminal instead.

The driver JVM reads its log4j2 configuration once, at start, so the level goes in before
the session exists: ``SPARK_SUBMIT_OPTS`` reaches the JVM that PySpark launches (in client
mode the driver *is* that JVM) without touching any Spark setting a user may have set. Not
everything the JVM prints passes through log4j (its own warnings, a thread's uncaught
exception, the Python workers' stderr, which Spark copies to the JVM's), so when quiet the
JVM's stderr itself is the log file: :func:`keyshift.lakehouse.session.get_spark` launches it so.
The Python side's loggers of py4j and the Kafka client write to the same file.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from keyshift.cli import LOG_LEVELS, UsageError
from keyshift.config import Config

_LINE_LOCK = threading.Lock()


def say(*parts: object, file=None) -> None:
    """Write one whole line (flushed) to ``file`` (stderr by default).

    A running job speaks from several threads at once: the batch callback, the broker watch,
    the bookkeeping committer. ``print`` writes the text and its newline as two writes, so
    two threads' lines could run together and a reader splitting on newlines lost one; one
    write of the whole line under a lock cannot."""
    out = file if file is not None else sys.stderr
    with _LINE_LOCK:
        out.write(" ".join(str(p) for p in parts) + "\n")
        out.flush()
from keyshift.errors import ConfigError, FieldError

_LOG4J2 = """\
# written by keyshift (lakehouse/logs.py): Spark's driver log for keyshift commands
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{{date}}} %p %c{{1}}: %m%n%ex
# the Kafka clients and Delta are the chattiest at WARN; keep their errors
logger.kafka.name = org.apache.kafka
logger.kafka.level = {kafka}
logger.netty.name = io.netty
logger.netty.level = ERROR
# PySpark counts as Spark's interpreter: the class that first initializes logging lends its
# logger's level to the console (WARN unless configured) and says so on stderr; give the
# candidates ours
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
logger.context.name = org.apache.spark.SparkContext
logger.context.level = {level}
"""
FILE_LEVEL = "WARN"  # what the log file keeps when the terminal shows nothing
_PYTHON_LOGGERS = ("py4j", "pyspark", "kafka")


class _State:
    """This process's log file while the libraries' lines go there (None: to the terminal),
    the driver JVM's stderr and the terminal's level: one per process, as the JVM is."""

    log_file: Path | None = None
    jvm_stderr: Path | None = None
    level: str | None = None
    relay: str | None = None  # a logger's name: the JVM's stderr lines go to it by level


def log_file(cfg: Config, command: str, run_id: str | None = None) -> Path:
    """Where a command's Spark log goes: a run's folder (beside its batches and report) for
    the commands that run the job, ``<home>/logs/<command>.log`` for the others. Each
    invocation appends under a header line, so a resumed run keeps one log."""
    return cfg.run_dir(run_id) / "spark.log" if run_id else cfg.home_path / "logs" / f"{command}.log"


def configure_spark_logging(log_file: Path, level: str | None = None) -> Path:
    """Point the next driver JVM and the Python-side loggers at ``log_file`` (level None,
    the default) or at the terminal from ``level`` up; returns the log4j2 file written.

    Call it before the session starts; a session already running keeps its output (only
    its level changes, :func:`set_session_level`)."""
    level = level or None  # a caller's 0 or "" means the default, as None does
    if level is not None and level not in LOG_LEVELS:
        raise ValueError(f"log level: one of {', '.join(LOG_LEVELS)}, got {level!r}")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    jvm_level = level or FILE_LEVEL
    props = log_file.parent / f"log4j2-{(level or 'file').lower()}.properties"
    props.write_text(_LOG4J2.format(
        level=jvm_level, date="yyyy-MM-dd HH:mm:ss" if level is None else "HH:mm:ss",
        kafka="WARN" if jvm_level in ("INFO", "DEBUG") else "ERROR"))
    opt = f"-Dlog4j2.configurationFile=file:{props}"
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j2.configurationFile" not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {opt}".strip()
    configure_python_logging(log_file, level)
    _State.level = level
    _State.jvm_stderr = None if level else log_file
    return props


def configure_python_logging(log_file: Path, level: str | None = None) -> None:
    """py4j's, PySpark's and the Kafka client's Python loggers: to ``log_file`` from WARN
    up (level None), or to the terminal from ``level`` up. The commands that drive only a
    Kafka client (``keyshift produce``) use just this."""
    level = level or None
    for name in _PYTHON_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if getattr(h, "_keyshift", False)]:
            logger.removeHandler(handler)
            handler.close()
    if level is None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} keyshift "
                    f"{' '.join(sys.argv[1:])} (pid {os.getpid()})\n")
        handler = logging.FileHandler(log_file, encoding="utf-8", delay=True)
        handler._keyshift = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in _PYTHON_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.setLevel(logging.WARNING)
            logger.propagate = False
        warnings.filterwarnings("ignore", module="pyspark")
        _State.log_file = log_file
    else:
        for name in _PYTHON_LOGGERS:
            logging.getLogger(name).setLevel(logging.getLevelName(
                "WARNING" if level == "WARN" else level))
            logging.getLogger(name).propagate = True
        _State.log_file = None


def jvm_stderr() -> Path | None:
    """Where the driver JVM's stderr goes when this process starts one (None: the terminal)."""
    return _State.jvm_stderr


def log_hint() -> str:
    """The sentence that ends a failure's line: where the full log is, when it is a file."""
    if _State.log_file is None:
        return ""
    return f" Full log: {_State.log_file} (-v shows it here)."


def session_level() -> str:
    """The driver's log4j level this process asked for (the file's when quiet)."""
    return _State.level or FILE_LEVEL


def set_session_level(spark, level: str | None = None) -> None:
    """The same level on a session that already exists (e.g. started by another command)."""
    spark.sparkContext.setLogLevel(level or FILE_LEVEL)


_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*)(?::\s*(.*))?$")
_PY_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_JAVA_ERROR = re.compile(r"^(?:Caused by: |: )?((?:[a-z_$][\w$]*\.)+([A-Z][\w$]*))(?::\s*(.*))?$")


def failure_line(error: BaseException | str) -> str:
    """The root cause of a failure, as one line: the innermost Python exception of the last
    traceback in the text (with the file and line that raised it), else the innermost Java
    cause, else the first line. A Spark failure's text nests the operator's traceback inside
    py4j's inside the JVM's; a person wants its bottom, not its top."""
    text = error if isinstance(error, str) else str(error)
    lines = [line.rstrip() for line in text.splitlines()]
    start = max((i for i, line in enumerate(lines) if "Traceback (most recent call last)"
                 in line), default=None)
    if start is not None:
        where = ""
        for line in lines[start + 1:]:
            if (frame := _PY_FRAME.match(line)):
                where = f" (at {frame[1]}:{frame[2]}, in {frame[3]})"
            elif line and not line[0].isspace() and (m := _PY_ERROR.match(line)) and m[2]:
                return _short(f"{m[1].rsplit('.', 1)[-1]}: {m[2]}{where}")
    causes = [m for line in lines if (m := _JAVA_ERROR.match(line.strip()))]
    if causes:
        last = causes[-1]
        return _short(f"{last[2]}: {last[3]}" if last[3] else last[2])
    first = next((line.strip() for line in lines if line.strip()), "")
    if isinstance(error, BaseException):
        first = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return _short(first)


def _short(line: str, limit: int = 400) -> str:
    return line if len(line) <= limit else line[:limit - 3] + "..."


def log_traceback(what: str, exc: BaseException) -> None:
    """``what:`` and ``exc``'s traceback into this process's log file, the one a failure's
    line points at (:func:`log_hint`); to stderr when the log is on the terminal."""
    if _State.log_file is None:
        print(f"{what}:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        return
    with open(_State.log_file, "a", encoding="utf-8") as f:
        f.write(f"{what}:\n")
        traceback.print_exception(exc, file=f)


def one_line_failure(command: str) -> Callable[[Callable[[argparse.Namespace], int]],
                                               Callable[[argparse.Namespace], int]]:
    """A Spark-backed command's ``run``: once Spark's log goes to a file, an unexpected
    failure prints one line (its root cause and the log's path) and exits 1, its traceback
    in the log. With ``-v``/``--log-level`` (the log is on the terminal) or before Spark's
    log is set up, the traceback shows as usual: there is no file to point at."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(run)
        def guarded(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except (UsageError, ConfigError, FieldError, KeyboardInterrupt):
                raise
            except Exception as exc:
                if _State.log_file is None:
                    raise
                log_traceback(f"keyshift {command} failed", exc)
                print(f"keyshift {command}: failed: {failure_line(exc)}.{log_hint()}",
                      file=sys.stderr, flush=True)
                return 1

        return guarded

    return wrap


# --- The driver JVM's stderr relayed line by line to a Python logger, at each line's level --
#
# An Airflow task's stderr is logged at ERROR by Airflow's supervisor, and the driver JVM that
# PySpark launches inherits it: Spark's own WARN/INFO lines, and the JVM's "WARNING: Using
# incubator modules" at start, showed as ERROR in every task log. A task therefore starts the
# JVM with its stderr piped into this relay, which logs each line at the level it states.

_LOG_LINE = re.compile(
    r"^(?:(?:\d{2,4}[-/]\d{2}[-/]\d{2}[ T])?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+)?"  # a time
    r"\[?(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|SEVERE)\]?[:\s]")
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL, "SEVERE": logging.ERROR}
_ERROR_START = re.compile(r"^(?:Exception in thread |Traceback \(most recent call last\)|"
                          r"Error: )")
_EXCEPTION = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b")
_CONTINUATION = re.compile(r"^(?:\s|Caused by: |Suppressed: |\.\.\. \d+ more)")


def line_level(line: str, previous: int | None = None) -> int:
    """The logging level a JVM stderr line states: log4j's ``%p`` after an optional
    timestamp (``26/11/27 14:04:36 WARN Utils: ...``), the JVM's own ``WARNING: ...``, an
    uncaught exception's ``Exception in thread``. An exception log4j prints under a line
    (its class, stack frames, causes) keeps the level of the line it continues
    (``previous``); a bare exception is an error; anything else (Ivy's progress, banners)
    is INFO."""
    if (m := _LOG_LINE.match(line)):
        return _LEVELS[m[1]]
    if _ERROR_START.match(line):
        return logging.ERROR
    if previous is not None and (_CONTINUATION.match(line) or _EXCEPTION.match(line)):
        return previous
    if _EXCEPTION.match(line):
        return logging.ERROR
    return logging.INFO


def relay_jvm_stderr(logger: str = "keyshift.spark") -> None:
    """The next driver JVM this process starts sends its stderr to ``logger``, each line at
    its own level (:func:`line_level`), instead of to this process's stderr. For hosts that
    rank a process's stderr as errors (Airflow's task runner); a log file configured by
    :func:`configure_spark_logging` takes precedence."""
    _State.relay = logger


def relayed_logger() -> str | None:
    """The logger the driver JVM's stderr goes to, when :func:`relay_jvm_stderr` asked so."""
    return _State.relay if _State.jvm_stderr is None else None


def relay_lines(stream, logger: logging.Logger) -> None:
    """Log every line of ``stream`` (bytes, until EOF) at its level; run in a daemon thread."""
    level: int | None = None
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip()
        if not line:
            continue
        level = line_level(line, level)
        logger.log(level, "%s", line)
    stream.close()
