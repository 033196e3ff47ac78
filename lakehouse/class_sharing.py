"""The driver JVM's class-data-sharing archive: a driver that starts maps Spark's and Delta's
classes ready-made instead of loading and verifying them again.

Why: a ``keyshift run`` spends about 10 s from its command to its "running" line, and
py-spy shows Python idle for most of it: the JVM loads, verifies and links some 20,000
classes, the same ones every start. A restart after a crash, each nightly task's driver and
every test that starts a job pay that again. A dynamic CDS archive of a driver that has run
a representative workload (``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile``
after) took 4 s off that start here (docs/platform.md; the runs:
bench/results/spark_driver_startup.md).

An archive fits one JDK and one class path exactly, so it is named by a key of both (the
``java`` binary and its ``libjvm.so``, pyspark's jars and keyshift's Maven jars): a new JDK or Spark
finds no archive under its key and starts as before until :func:`build_archive` runs again
(the bootstrap does, and so does the test suite). The JVM writes an archive when it exits,
so it is built in a child process into a temporary file, checked by a JVM that must map it
(``-Xshare:on``), and only then renamed into place: a start never reads a half-written one.
A JVM that cannot use an archive after all (a changed jar) starts without it, silently.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from keyshift.config import Config, load_config

from .jars import pyspark_jars, spark_jars

ARCHIVE_FOLDER = "cds"
WORKLOAD = "keyshift.lakehouse.class_workload"  # run by name: it imports the session
BUILD_TIMEOUT_S = 600.0
# Off: the JVM's notes about an archive it cannot map (they go to stdout, the user's terminal).
QUIET = "-Xlog:cds=off,cds+dynamic=off,class+path=off"


class ArchiveBuildError(RuntimeError):
    """The workload that writes the archive failed, or its archive does not map."""


def java_binary() -> str:
    """The ``java`` that spark-submit starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java").resolve())
    found = shutil.which("java")
    if found is None:
        raise ArchiveBuildError("no java on PATH and no JAVA_HOME: Spark needs Java 17")
    return str(Path(found).resolve())


def archive_key(jars: Sequence[Path]) -> str:
    """What the archive must match: the JDK (path, size and time of its ``libjvm``) and every
    jar of the driver, pyspark's and ``jars`` (``spark.jars``; names, sizes, times)."""
    java = Path(java_binary())
    parts = [str(java)]
    for libjvm in sorted(java.parent.parent.glob("lib/server/libjvm.so")):
        stat = libjvm.stat()
        parts.append(f"{libjvm}:{stat.st_size}:{stat.st_mtime_ns}")
    for jar in [*pyspark_jars(), *jars]:
        stat = Path(jar).stat()
        parts.append(f"{Path(jar).name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(cfg: Config, jars: Sequence[Path]) -> Path:
    """Where this JDK's and class path's archive lives (it may not exist yet)."""
    return cfg.cache_path / ARCHIVE_FOLDER / f"driver-{archive_key(jars)}.jsa"


def driver_options(cfg: Config, jars: Sequence[Path]) -> list[str]:
    """The driver's JVM options that map the archive, or none when it is off or not built;
    ``jars`` are the session's ``spark.jars``, already resolved. Never raises: a driver
    without an archive only starts slower."""
    if not cfg.spark.class_data_sharing:
        return []
    try:
        path = archive_path(cfg, jars)
    except Exception:  # noqa: BLE001 - no java: the driver's start says so itself
        return []
    return archive_options(path)


def archive_options(archive: Path) -> list[str]:
    """The options that map ``archive``, or none unless it is whole (its recorded size)."""
    return [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", QUIET] if _whole(archive) else []


def _whole(path: Path) -> bool:
    """The archive exists and has the size it was built with. A truncated archive does not
    fall back: the JVM dies of SIGBUS while mapping it, so a driver never gets one."""
    try:
        return path.stat().st_size == int(_size_stamp(path).read_text())
    except (OSError, ValueError):
        return False


def _size_stamp(path: Path) -> Path:
    return path.with_suffix(".size")


def build_archive(cfg: Config | None = None, force: bool = False,
                  timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Build this JDK's and class path's archive unless it exists (``force``: again).

    Runs the workload (:mod:`keyshift.lakehouse.class_workload`) in a child Python whose
    driver writes the archive at exit, checks it maps, and renames it into place. One
    builder at a time per cache (a file lock): a second caller waits and then finds the
    archive built. Older archives of other keys in the folder are removed (some 200 MB
    each)."""
    cfg = cfg or load_config()
    target = archive_path(cfg, spark_jars(cfg.cache_path / "jars", cfg.spark.delta_version))
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _whole(target) and not force:
            return target
        with tempfile.TemporaryDirectory(prefix="cds-", dir=target.parent) as tmp:
            partial = Path(tmp) / target.name
            _run_workload(partial, Path(tmp), cfg.cache_path, timeout_s)
            _check_maps(partial, Path(tmp), cfg.cache_path)
            _size_stamp(target).write_text(str(partial.stat().st_size))
            os.replace(partial, target)
        for old in target.parent.glob("driver-*"):
            if old.stem != target.stem:
                old.unlink(missing_ok=True)
    return target


def _run_workload(archive: Path, home: Path, cache: Path, timeout_s: float) -> None:
    """Run the workload in a child Python whose driver writes ``archive`` when it exits."""
    done = _child("--workload", f"-XX:ArchiveClassesAtExit={archive}", home, cache, timeout_s)
    if done.returncode != 0 or not archive.is_file():
        raise ArchiveBuildError("the archive's workload failed (exit "
                                f"{done.returncode}): " + _tail(done))


def _check_maps(archive: Path, home: Path, cache: Path) -> None:
    """A driver started as every driver is must map the archive: with ``-Xshare:on`` the
    JVM refuses to start when it cannot, so the session fails."""
    done = _child("--check", f"-XX:SharedArchiveFile={archive} -Xshare:on", home, cache, 120.0)
    if done.returncode != 0:
        raise ArchiveBuildError(f"the archive {archive.name} does not map: " + _tail(done))


def _child(mode: str, java_options: str, home: Path, cache: Path,
           timeout_s: float) -> subprocess.CompletedProcess:
    folder = home / mode.strip("-")
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSHIFT_")}
    env.update({"KEYSHIFT_HOME": str(folder), "KEYSHIFT_CACHE": str(cache),
                "KEYSHIFT_SPARK__CLASS_DATA_SHARING": "false",
                "KEYSHIFT_SPARK__DRIVER_JAVA_OPTIONS": java_options})
    try:
        return subprocess.run([sys.executable, "-m", WORKLOAD, mode],
                              env=env, cwd=folder, capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # cwd: a JVM's crash file
    except subprocess.TimeoutExpired as exc:
        raise ArchiveBuildError(f"the archive's {mode.strip('-')} took over "
                                f"{timeout_s:.0f} s") from exc


def _tail(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return " | ".join(line[:300] for line in lines[-3:]) or "no output"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    start = time.monotonic()
    try:
        path = build_archive(force="--force" in args)
    except ArchiveBuildError as exc:
        print(f"class archive: not built ({exc}); drivers start without it", file=sys.stderr)
        return 1
    print(f"class archive: {path} ({path.stat().st_size / 1e6:.0f} MB, "
          f"{time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
