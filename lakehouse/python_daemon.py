"""The executors' Python daemon: PySpark's own (``pyspark.daemon``), started with pyspark and
py4j imported from the interpreter's installed, byte-compiled packages instead of the zips
Spark puts first on the workers' path (``spark.python.daemon.module``, set by
:func:`keyshift.lakehouse.session.get_spark`).

Why: Spark starts each executor's Python daemon with ``$SPARK_HOME/python/lib/pyspark.zip``
and py4j's source zip ahead of everything on ``PYTHONPATH``. A module imported from a zip has
no bytecode cache, so every daemon compiled pyspark from source before the first task of a
run could start (0.8 s here, against 0.13 s from site-packages), and every new worker's
``importlib.invalidate_caches()`` re-read the 1,377 entries of pyspark.zip's directory
(70-80 ms each; bench/results/spark_driver_startup.md). With a pip-installed pyspark
the zips are copies of the packages already installed: Spark's home is the installed
package, and the zips live inside it. Only such zips are dropped, so a Spark home of its
own (a cluster's) keeps the zips it ships.

The folder the daemon starts in is not on its path either. ``python -m`` puts it first, and
so does a relative or empty ``PYTHONPATH`` entry; on a local master that folder is the
driver's current folder, so a ``msgpack.py`` lying there was imported by every Python worker
in place of the installed package. ``spark.executorEnv.PYTHONSAFEPATH`` (set by the session)
keeps ``-m`` from adding it; :func:`cwd_entries` drops what is left. A user's code reaches the
workers shipped (``SparkContext.addPyFile``, :mod:`keyshift.streaming.code_shipping`), never
through a current folder.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

SPARK_ZIPS = ("pyspark.zip", "py4j-")
"""Names (or their start) of the zips Spark adds to a Python worker's path."""


def installed_dir(package: str, path: list[str]) -> Path | None:
    """The directory of ``package`` as found on ``path`` without its zips, or None."""
    spec = importlib.machinery.PathFinder.find_spec(
        package, [p for p in path if not p.endswith(".zip")])
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def zips_to_drop(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark's pyspark and py4j zips inside the installed
    pyspark package, when that package and py4j are importable without them."""
    pyspark_dir = installed_dir("pyspark", path)
    if pyspark_dir is None or installed_dir("py4j", path) is None:
        return []
    drop = []
    for entry in path:
        p = Path(entry)
        if (p.suffix == ".zip" and p.name.startswith(SPARK_ZIPS)
                and p.resolve().is_relative_to(pyspark_dir)):
            drop.append(entry)
    return drop


def cwd_entries(path: list[str], cwd: str, pythonpath: str) -> list[str]:
    """The entries of ``path`` that are the folder the process started in (``cwd``), or a
    folder a relative ``PYTHONPATH`` entry names relative to it (Python has made them
    absolute by now): how a file lying in the folder a run starts from gets imported."""
    def where(entry: str) -> str:
        return os.path.realpath(os.path.join(cwd, entry))

    unsafe = {where("")} | {where(e) for e in pythonpath.split(os.pathsep)
                            if not os.path.isabs(e)}
    return [entry for entry in path if where(entry) in unsafe]


def main() -> None:
    drop = set(zips_to_drop(sys.path))
    drop |= set(cwd_entries(sys.path, os.getcwd(), os.environ.get("PYTHONPATH", "")))
    sys.path[:] = [p for p in sys.path if p not in drop]
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
