"""The executors' Python daemon imports the installed pyspark and py4j, not the zips Spark puts
first on a worker's path: zips have no bytecode cache, so every daemon compiled pyspark from
source (keyshift.lakehouse.python_daemon). Only zips inside the installed pyspark package
are dropped; a Spark home of its own keeps its zips."""

from __future__ import annotations

from pathlib import Path

import pytest

from keyshift.lakehouse.python_daemon import zips_to_drop


def _package(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    return root / name


def _zips(lib: Path) -> list[str]:
    lib.mkdir(parents=True, exist_ok=True)
    paths = [lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"]
    for p in paths:
        p.write_bytes(b"")
    return [str(p) for p in paths]


def test_the_zips_inside_the_installed_pyspark_are_dropped(tmp_path) -> None:
    site = tmp_path / "site-packages"
    zips = _zips(_package(site, "pyspark") / "python" / "lib")
    _package(site, "py4j")
    assert zips_to_drop([*zips, str(tmp_path / "app"), str(site)]) == zips


def test_a_spark_home_of_its_own_keeps_its_zips(tmp_path) -> None:
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    _package(site, "py4j")
    zips = _zips(tmp_path / "opt" / "spark" / "python" / "lib")
    assert zips_to_drop([*zips, str(site)]) == []


def test_without_an_installed_py4j_the_zips_stay(tmp_path) -> None:
    site = tmp_path / "site-packages"
    zips = _zips(_package(site, "pyspark") / "python" / "lib")
    assert zips_to_drop([*zips, str(site)]) == []


def test_without_an_installed_pyspark_the_zips_stay(tmp_path) -> None:
    site = tmp_path / "site-packages"
    _package(site, "py4j")
    zips = _zips(tmp_path / "spark" / "python" / "lib")
    assert zips_to_drop([*zips, str(site)]) == []


@pytest.mark.integration
def test_the_session_s_python_workers_import_the_installed_pyspark(spark) -> None:
    """A task's pyspark is the site-packages one and no Spark zip is on its path."""
    from keyshift.lakehouse.session import PYTHON_DAEMON

    assert spark.conf.get("spark.python.daemon.module") == PYTHON_DAEMON

    def where(_rows):
        import sys

        import pyspark

        yield (pyspark.__file__, [p for p in sys.path if p.endswith(".zip")
                                  and ("pyspark" in p or "py4j" in p)])

    (module, zips), = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert ".zip" not in module and module.endswith("pyspark/__init__.py")
    assert zips == []
