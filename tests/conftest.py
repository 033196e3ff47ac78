"""Shared fixtures. Integration fixtures (broker, Spark session) live in the layers' own
conftest modules so the pure-core tests import nothing heavy."""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from suite_budget import budget_line, machine_cpu_seconds

# Broker and Spark fixtures (session-scoped, imported lazily by the tests that use them).
pytest_plugins = ["platform_fixtures", "cluster_fixtures"]

ROOT = Path(__file__).resolve().parents[1]

# Every Python process of the suite writes and reuses the project's bytecode, as on a
# developer's machine. A host that sets PYTHONDONTWRITEBYTECODE (this one does) left the
# suite's few hundred processes (CLI calls, `keyshift run`, Spark's Python workers, Airflow
# tasks) compiling keyshift's modules from source at each import: 0.2 s a process.
# The caches are git-ignored (__pycache__/); site-packages was compiled at install.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# UDF workers must start this interpreter, not the system one.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Every Spark driver the suite starts (its session, `keyshift run` subprocesses, the demo)
# compiles with C1 alone: a test's driver lives seconds to minutes on tiny data, and the C2
# compiler's CPU never paid back, about half a driver's CPU (docs/platform.md). C1 alone
# also shrinks the JIT's code cache to 48 MB, which a driver filled in ~35 s ("CodeCache is
# full. Compiler has been disabled."): everything after ran interpreted. 240 MB is the
# cache's size with both compilers.
TEST_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault("KEYSHIFT_SPARK__DRIVER_JAVA_OPTIONS", TEST_DRIVER_JAVA_OPTIONS)


def import_bench(name: str) -> ModuleType:
    """A script of bench/ imported as `python -m bench` runs it (bench/ on sys.path), for the
    tests of its pure helpers."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module(name)


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The folder of the real data sets (data/ of the checkout, or $KEYSHIFT_DATA), resolved
    as every loader resolves it (keyshift.datasets)."""
    from keyshift.datasets import DataMissingError, data_dir

    try:
        return data_dir()
    except DataMissingError as exc:
        pytest.fail(str(exc))


@pytest.fixture()
def ks_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private KEYSHIFT home for one test; the jar cache stays shared across tests."""
    home = tmp_path / "ks"
    monkeypatch.setenv("KEYSHIFT_HOME", str(home))
    monkeypatch.setenv("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    return home


FAST_TIER = "not integration and not slow"  # pyproject's addopts: what a bare pytest runs
FAST_WORKERS = 2  # the fast tier's workers, at most the machine's cores


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A bare ``pytest`` (the fast tier over the test paths, no ``-n``) runs on two workers.
    Its tests are pure Python: in one process they keep one core of two busy (1,696 tests
    in 4 min 28 s here, 2026-12-06; on two workers 2 min 24 s). The whole suite stays in one
    process unless asked (the Makefile's TEST_WORKERS says why); a file or test named on
    the command line runs in this process, where a worker's start would cost more than it."""
    bare = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if (bare and config.option.markexpr == FAST_TIER
            and getattr(config.option, "numprocesses", 0) is None
            and not config.getoption("usepdb", False) and not config.option.collectonly
            and not os.environ.get("PYTEST_XDIST_WORKER")):
        config.option.numprocesses = min(FAST_WORKERS, os.cpu_count() or 1)
        config.option.dist = "worksteal"
_STARTED = pytest.StashKey[tuple[float, float | None]]()  # (monotonic, machine CPU s)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = (time.monotonic(), machine_cpu_seconds())


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """After the 15 slowest tests, the CPU the run took and the wall-time floor it sets
    (tests/suite_budget.py); the controller's line only under parallel workers."""
    if config.option.markexpr == FAST_TIER:
        terminalreporter.write_line(
            "fast tier only (a bare pytest): the integration and slow tests were left out; "
            "`make test` (or `pytest -m ''`) runs everything, as CI does")
    began, cpu0 = config.stash.get(_STARTED, (0.0, None))
    cpu1 = machine_cpu_seconds()
    if os.environ.get("PYTEST_XDIST_WORKER") or cpu0 is None or cpu1 is None:
        return
    terminalreporter.write_line(budget_line(cpu1 - cpu0, time.monotonic() - began,
                                            os.cpu_count() or 1))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under parallel workers (``make test TEST_WORKERS=N``), slow tests first, then the
    other integration tests, then the pure core (each group in collection order). Each
    worker starts on its share of this order and an idle one takes half of the longest
    queue left (pytest-xdist's ``--dist worksteal``); a long test started last would run
    alone at the end while the other workers idle."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: collection order, as always

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.get_closest_marker("integration") else 2

    items.sort(key=rank)
