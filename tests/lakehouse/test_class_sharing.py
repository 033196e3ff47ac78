"""The driver's class-data-sharing archive (keyshift.lakehouse.class_sharing): a driver maps
it when it is whole, never a truncated one, and a build that fails leaves nothing behind.

Why these: a truncated archive does not fall back, the JVM dies of SIGBUS mapping it (seen
here), so only whole archives may reach a driver; and the archive is what takes ~4 s off
each driver's start, so the suite checks that its own drivers really map it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from keyshift.config import load_config
from keyshift.lakehouse import class_sharing
from keyshift.lakehouse.class_sharing import (
    ArchiveBuildError,
    archive_options,
    build_archive,
    driver_options,
)

ROOT = Path(__file__).resolve().parents[2]


def _archive(folder: Path, size: int, stamp: str | None) -> Path:
    path = folder / "driver-0123456789abcdef.jsa"
    path.write_bytes(b"\0" * size)
    if stamp is not None:
        path.with_suffix(".size").write_text(stamp)
    return path


def test_a_whole_archive_is_mapped_quietly(tmp_path: Path) -> None:
    path = _archive(tmp_path, 100, "100")
    options = archive_options(path)
    assert options[0] == f"-XX:SharedArchiveFile={path}"
    assert "-Xshare:auto" in options  # a mismatched one (a changed jar) is skipped, not fatal
    assert any(o.startswith("-Xlog:cds=off") for o in options)  # its note stays off stdout


@pytest.mark.parametrize("size, stamp", [(99, "100"), (100, None), (100, "x")])
def test_a_truncated_or_unstamped_archive_is_never_mapped(tmp_path: Path, size: int,
                                                          stamp: str | None) -> None:
    assert archive_options(_archive(tmp_path, size, stamp)) == []
    assert archive_options(tmp_path / "missing.jsa") == []


def test_off_in_config_maps_nothing(tmp_path: Path) -> None:
    cfg = load_config(env={}, home=str(tmp_path), spark={"class_data_sharing": False})
    assert driver_options(cfg, []) == []


def test_the_key_follows_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new jar (or a changed one) is a new key, so a driver never maps an archive of
    another class path; the same jars give the same key."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    monkeypatch.setattr(class_sharing, "pyspark_jars", lambda: sorted(jars.glob("*.jar")))
    key = class_sharing.archive_key([])
    assert class_sharing.archive_key([]) == key
    (jars / "b.jar").write_bytes(b"b")
    assert class_sharing.archive_key([]) != key


@pytest.fixture(scope="module")
def suite_archive() -> Path:
    """The archive of the suite's cache, built if missing (the bootstrap builds it)."""
    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    return build_archive(load_config(env={}))


MAPPED = textwrap.dedent('''
    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark

    get_spark(load_config()).range(3).count()
''')


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (as Spark does)")
def test_a_driver_maps_the_built_archive(suite_archive: Path, tmp_path: Path) -> None:
    """The JVM's class-load log names the archive ("shared objects file (top)") as the
    source of Spark's classes: the driver really maps it, with keyshift's options. (The
    lambdas' hidden classes are made at run time, never archived, so they are not counted;
    4,685 of 4,753 named Spark classes came from the archive here, the rest from Delta's
    jars, which Spark loads itself, and classes the archive's workload never used.)"""
    log = tmp_path / "classes.log"
    env = {**os.environ, "KEYSHIFT_HOME": str(tmp_path / "home"),
           "KEYSHIFT_CACHE": str(suite_archive.parent.parent),
           "KEYSHIFT_SPARK__DRIVER_JAVA_OPTIONS": f"-Xlog:class+load=info:file={log}"}
    done = subprocess.run([sys.executable, "-c", MAPPED], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    loads = [line for line in log.read_text().splitlines()
             if "org.apache.spark." in line and "$$Lambda" not in line]
    shared = [line for line in loads if "shared objects file (top)" in line]
    assert loads and len(shared) > 0.9 * len(loads), (len(shared), len(loads))
    assert "cds" not in done.stdout  # no JVM note on the terminal


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (as Spark does)")
def test_a_truncated_archive_fails_the_check_and_is_not_installed(
        suite_archive: Path, tmp_path: Path) -> None:
    """The check a build runs before installing an archive: a driver started with
    ``-Xshare:on`` on a truncated copy does not start, so the build says so."""
    cut = tmp_path / "cut" / suite_archive.name
    cut.parent.mkdir()
    with open(suite_archive, "rb") as whole, open(cut, "wb") as part:
        part.write(whole.read(2_000_000))
    with pytest.raises(ArchiveBuildError, match="does not map"):
        class_sharing._check_maps(cut, tmp_path, suite_archive.parent.parent)


@pytest.mark.integration
def test_a_build_that_fails_leaves_no_archive(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload that cannot finish in time: an error that says so, no archive, no stamp,
    no half-written file in the folder."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "jars").symlink_to(ROOT / ".keyshift" / "cache" / "jars")  # no Maven here
    monkeypatch.setenv("KEYSHIFT_CACHE", str(cache))
    cfg = load_config(env={}, home=str(tmp_path))
    with pytest.raises(ArchiveBuildError, match="took over"):
        build_archive(cfg, timeout_s=0.5)
    assert sorted(p.name for p in (cache / "cds").iterdir()) == [".lock"]
    from keyshift.lakehouse.jars import spark_jars

    assert driver_options(cfg, spark_jars(cache / "jars", cfg.spark.delta_version)) == []
