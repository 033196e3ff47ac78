"""A user's operator code on the executors: shipped with the job, and checked before it runs.

Why: ``keyshift run --app fraudops:CardFraud`` from the user's own folder on a 2-worker
cluster imported ``fraudops`` on the driver but not on the executors, whose Python workers
run in their own work dirs; the run failed after ~70 s of task retries with "module
'fraudops' is not importable", without saying it was the executors that could not. Spark's
answer is ``spark-submit --py-files``; ``keyshift run`` does the same on its own:

- :func:`operator_code` finds the operator's top-level module or package on the driver. Code
  of an installed distribution (site-packages, an editable install) is the executors' own,
  as it is for every other dependency; code from ``--py-files`` is shipped as given; anything
  else (a module or package in the user's folder) is zipped, content-addressed under
  ``<home>/pyfiles`` (:func:`zip_code`), and added with ``SparkContext.addPyFile`` before any
  task runs (:func:`ship`).
- ``--py-files a.py,lib.zip`` (:func:`driver_py_files`) adds the user's other code, as
  spark-submit's option does: on the driver's path at once (the operator resolves before
  Spark starts) and on every executor's.
- :func:`check_executors_import` runs one task per executor that imports the operator's
  module, and fails in seconds naming the executors that could not, the module and the fix.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
import threading
import uuid
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshift.cli import UsageError

PY_FILE_SUFFIXES = (".py", ".zip", ".egg")
MAX_SHIPPED_BYTES = 200 * 1024 * 1024  # a "package" this big is a folder, not code
CHECK_TIMEOUT_S = 120.0
_SKIPPED_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache",
                 ".ruff_cache", ".venv", "node_modules"}
FIX = ("ship the code it needs with --py-files (comma-separated .py, .zip or .egg files, as "
       "for spark-submit), or install it in the executors' Python")


class ShippingError(UsageError):
    """The operator's code cannot be shipped or a --py-files entry is unusable: one line,
    exit status 2 (the fix is in what the user gave)."""


class ExecutorImportError(UsageError):
    """An executor cannot import the operator's module: one line naming the executors and
    the fix, exit status 2, before the stream starts."""


@dataclass(frozen=True)
class OperatorCode:
    """Where the operator's code comes from on the driver, and what must travel.

    ``kind``: ``keyshift`` (keyshift's own), ``installed`` (a distribution or site-packages:
    the executors' Python has it, as any dependency), ``py-files`` (inside a --py-files entry,
    shipped with it), ``local`` (anything else: ``source`` is zipped and shipped)."""

    module: str
    top: str
    kind: str
    source: Path | None = None
    distribution: str | None = None

    @property
    def needs_check(self) -> bool:
        """keyshift's own modules are on every executor that runs the job's engines at all."""
        return self.kind != "keyshift"


def _installed_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    return [Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")
            if paths.get(k)]


def _distribution_of(top: str) -> str | None:
    """The installed distribution that provides top-level ``top`` (editable ones too)."""
    names = importlib.metadata.packages_distributions().get(top)
    return names[0] if names else None


def top_level_source(top: str) -> Path:
    """The file (a module) or folder (a package) of the top-level module ``top`` as the driver
    imports it; for a namespace package, its first folder that exists."""
    module = sys.modules.get(top)
    spec = getattr(module, "__spec__", None) or importlib.util.find_spec(top)
    if spec is None:
        raise ShippingError(f"module {top!r} is not importable on the driver")
    if spec.submodule_search_locations:
        if spec.origin and spec.origin not in ("namespace", None) and \
                Path(spec.origin).name.startswith("__init__."):
            return Path(spec.origin).resolve().parent
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location).resolve()
        raise ShippingError(f"package {top!r} has no folder to ship")
    if not spec.origin or spec.origin in ("built-in", "frozen"):
        raise ShippingError(f"module {top!r} has no file to ship ({spec.origin})")
    return Path(spec.origin).resolve()  # a module in a zip: a path inside it


def operator_code(module: str, py_files: Sequence[str | Path] = ()) -> OperatorCode:
    """Where ``module`` (the operator class's ``__module__``) comes from, and so whether its
    top-level module or package must be shipped (``kind == "local"``)."""
    top = module.split(".")[0]
    if top == "keyshift":
        return OperatorCode(module, top, "keyshift")
    source = top_level_source(top)
    for entry in py_files:
        entry_path = Path(entry).resolve()
        if source == entry_path or source.is_relative_to(entry_path):
            return OperatorCode(module, top, "py-files", source)
    if any(source.is_relative_to(root) for root in _installed_roots()):
        return OperatorCode(module, top, "installed", source)
    dist = _distribution_of(top)
    if dist is not None:
        return OperatorCode(module, top, "installed", source, dist)
    if not source.exists():
        raise ShippingError(f"module {top!r} is imported from {source}, which keyshift cannot "
                            f"ship; {FIX}")
    return OperatorCode(module, top, "local", source)


def _files(source: Path) -> list[tuple[str, Path]]:
    """(name in the zip, file) of a module file or a package folder, sorted, without
    bytecode, caches and hidden folders; a package keeps its folder name."""
    if source.is_file():
        return [(source.name, source)]
    out = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(folder, name)
            out.append((path.relative_to(source.parent).as_posix(), path))
    return out


def zip_code(sources: Iterable[Path], folder: Path, name: str) -> Path:
    """The modules and packages ``sources`` in one zip under ``folder``, named by ``name`` and
    a digest of its content: the same code is the same path (Spark refuses a second file of
    the same name from another path in one application), new code a new one."""
    files = sorted(item for source in sources for item in _files(source))
    digest = hashlib.sha256()
    total = 0
    for arcname, path in files:
        data = path.read_bytes()
        total += len(data)
        if total > MAX_SHIPPED_BYTES:
            raise ShippingError(
                f"{name}: more than {MAX_SHIPPED_BYTES // 2**20} MB to ship from "
                f"{', '.join(str(s) for s in sources)}; ship only its code with --py-files, "
                "or install it in the executors' Python")
        digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
    target = folder / f"{name}-{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{target.name}.{uuid.uuid4().hex[:8]}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, path in files:
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    os.replace(partial, target)
    return target


def driver_py_files(value: str | None, folder: Path) -> list[Path]:
    """``--py-files``: the comma-separated .py, .zip and .egg files, checked, and put on this
    (the driver's) path as spark-submit does, so the operator resolves before Spark starts.
    The .py files travel as one zip (under ``folder``), so a module is imported from the same
    place on the driver and the executors and nothing else of its folder comes along.
    ShippingError (one line) for a missing file or another kind."""
    if not value or not value.strip():
        return []
    singles, archives = [], []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        path = Path(item).expanduser()
        if path.suffix not in PY_FILE_SUFFIXES:
            raise ShippingError(f"--py-files: {item}: expected a .py, .zip or .egg file")
        if not path.is_file():
            raise ShippingError(f"--py-files: {item}: no such file")
        if path.suffix == ".py":
            singles.append(path.resolve())
        else:
            if not zipfile.is_zipfile(path):
                raise ShippingError(f"--py-files: {item}: not a zip archive")
            archives.append(path.resolve())
    names = [p.stem for p in singles]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ShippingError(f"--py-files: more than one module named {', '.join(twice)}")
    shipped = ([zip_code(singles, folder, "py-files")] if singles else []) + archives
    for path in reversed(shipped):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    importlib.invalidate_caches()
    return shipped


def ship(spark: Any, code: OperatorCode, py_files: Sequence[Path], folder: Path) -> list[Path]:
    """Add ``py_files`` and, when it is the user's own (``local``), the operator's zipped
    top-level module or package to the application (``SparkContext.addPyFile``): every
    executor's Python workers then have them on their path. What was added."""
    added = list(py_files)
    if code.kind == "local" and code.source is not None:
        added.append(zip_code([code.source], folder, code.top))
    for path in added:
        spark.sparkContext.addPyFile(str(path))
    return added


def _probe(module: str):
    """The task of the import check (a closure that cloudpickle ships by value). ``module``
    is the ``__module__`` of the operator class the driver already imported from the
    command line's ``--app``, never a name read from a table, a file or a message."""
    def probe(_rows: Iterable[Any]) -> Iterable[tuple[str, str, str | None]]:
        import importlib as imp
        import os as _os
        import socket
        import traceback

        from keyshift.streaming.executors import executor_of

        where = (socket.gethostname(), executor_of(_os.getcwd()))
        try:
            imp.import_module(module)
        except BaseException as exc:  # noqa: BLE001 -- a module may raise anything at import
            last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            at = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
            yield (*where, f"{type(exc).__name__}: {exc}{at}")
            return
        yield (*where, None)
    return probe


def import_failures(rows: Iterable[tuple[str, str, str | None]], module: str) -> str | None:
    """The one line of a failed import check (None: every executor asked imported it)."""
    failed: dict[str, list[str]] = {}
    for host, executor, error in rows:
        if error is not None:
            who = f"executor {executor} on {host}" if executor else f"an executor on {host}"
            failed.setdefault(error, [])
            if who not in failed[error]:
                failed[error].append(who)
    if not failed:
        return None
    error, who = next(iter(failed.items()))
    return (f"the executors cannot import the operator's module {module!r}: "
            f"{', '.join(who)} failed with {error}; {FIX}")


def executor_count(spark: Any) -> int:
    """Executors registered now (1 on a local master: the driver is the executor)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(1, len(infos) - 1)


def check_executors_import(spark: Any, module: str, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """One task per executor imports ``module`` before the stream starts: an executor that
    cannot is an :class:`ExecutorImportError` naming it, in seconds, not after the first
    batch's task retries. A task reports its failure as data (no retries), and the check
    is cancelled when no executor answers within ``timeout_s``."""
    sc = spark.sparkContext
    n = executor_count(spark)
    group = f"keyshift-import-check-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, f"can the executors import {module}?", True)
            result["rows"] = sc.parallelize(range(n), n).mapPartitions(_probe(module)).collect()
        except Exception as exc:  # noqa: BLE001 -- reported below in one line
            result["error"] = exc

    worker = threading.Thread(target=run, name="keyshift-import-check", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        sc.cancelJobGroup(group)
        raise ExecutorImportError(
            f"no executor ran the import check of the operator's module {module!r} within "
            f"{timeout_s:g}s (is the cluster short of free cores? see its web UI)")
    if "error" in result:
        from keyshift.lakehouse.logs import failure_line

        raise ExecutorImportError(
            f"the import check of the operator's module {module!r} failed on the executors: "
            f"{failure_line(result['error'])}")
    line = import_failures(result["rows"], module)
    if line is not None:
        raise ExecutorImportError(line)


def prepare_executors(spark: Any, operator_class: type, py_files: Sequence[Path],
                      folder: Path) -> OperatorCode:
    """The job's one call, before any task runs: ship what the operator needs, then check
    that an executor imports it."""
    code = operator_code(operator_class.__module__, py_files)
    ship(spark, code, py_files, folder)
    if code.needs_check:
        check_executors_import(spark, code.module)
    return code


__all__ = ["ExecutorImportError", "OperatorCode", "ShippingError", "check_executors_import",
           "driver_py_files", "import_failures", "operator_code", "prepare_executors", "ship",
           "top_level_source", "zip_code"]
