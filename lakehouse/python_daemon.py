"""The executors' Python daemon: PySpark's own (``pyspark.daemon``), started with pyspark and
py4j imported from the interpreter's installed, byte-compiled packages instead of the zips
Spark puts first on the workers' path (``spark.python.daemon.module``, set by
:func:`keyshift.lakehouse.session.get_spark`).

Why: Spark starts each executor's Python daemon with ``$SPARK_HOME/python/lib/pyspark.zip``
and py4j's source zip ahead of everything on ``PYTHONPATH``. A module imported from a zip has
no bytecode cache, so every daemon compiled pyspark from source before the first task of a
run could start (0.8 s here, against 0.13 s from site-packages), and every new worker's
``importlib.invalidate_caches()`` re-read the 1,377 entries of pyspark.zip's directory
(70-80 ms each; docs/platform.md). With a pip-installed pyspark the zips are copies of
the packages already installed: Spark's home is the installed package, and the zips live
inside it. Only such zips are dropped, so a Spark home of its own (a cluster's) keeps the
zips it ships.
"""

from __future__ import annotations

import importlib.machinery
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


def main() -> None:
    drop = set(zips_to_drop(sys.path))
    sys.path[:] = [p for p in sys.path if p not in drop]
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
