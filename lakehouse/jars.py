"""Jars from Maven Central, resolved once and cached so that later starts need no network.

Two consumers: the Kafka broker (``kafka_2.13`` with its runtime dependencies, run with
``java -cp``) and the Spark session (the Kafka connector and Delta, handed to Spark as
``spark.jars``). Both go through :func:`resolve` which writes a generated minimal pom and
runs ``mvn dependency:copy-dependencies`` with a timeout, so an unreachable Maven Central
becomes a one-line :class:`JarResolutionError` instead of a hang. A ``.complete`` marker is
written last: a half-finished download is never mistaken for a cache hit.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyspark

MARKER = ".complete"
DEFAULT_TIMEOUT_S = 600.0

SCALA = "2.13"


class JarResolutionError(RuntimeError):
    """Maven is missing, offline or timed out, or an artifact does not exist."""


def spark_packages(delta_version: str) -> list[str]:
    """Maven coordinates the Spark session needs beyond pyspark's own jars.

    The connector follows the installed pyspark (its jars must match Spark exactly); Delta's
    jar version comes from config because delta-spark's PyPI patch releases can be ahead of
    Maven Central, which breaks delta's own ``configure_spark_with_delta_pip``.
    """
    spark_version = pyspark.__version__
    spark_mm = ".".join(spark_version.split(".")[:2])
    return [
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{spark_version}",
        f"io.delta:delta-spark_{spark_mm}_{SCALA}:{delta_version}",
    ]


def _pom(coords: Sequence[str], excludes: Sequence[str]) -> str:
    deps = []
    for c in coords:
        parts = c.split(":")
        if len(parts) != 3 or not all(parts):
            raise JarResolutionError(f"maven coordinate {c!r}: expected group:artifact:version")
        g, a, v = parts
        excl = "".join(
            f"<exclusion><groupId>{e.split(':')[0]}</groupId>"
            f"<artifactId>{e.split(':')[1]}</artifactId></exclusion>"
            for e in excludes
        )
        deps.append(
            f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
            f"<version>{v}</version><exclusions>{excl}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">'
        "<modelVersion>4.0.0</modelVersion><groupId>keyshift</groupId>"
        "<artifactId>jar-fetch</artifactId><version>1</version><packaging>pom</packaging>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def cache_dir(root: Path, name: str, coords: Sequence[str]) -> Path:
    """Folder of one resolved set, keyed by the coordinates so a version change refetches."""
    digest = hashlib.sha1("\n".join(sorted(coords)).encode()).hexdigest()[:10]
    return root / f"{name}-{digest}"


def cached(dest: Path) -> list[Path] | None:
    """The jars of a completed resolution in ``dest``, or None when it must be fetched."""
    if not (dest / MARKER).is_file():
        return None
    return sorted(dest.glob("*.jar"))


def resolve(
    coords: Sequence[str],
    dest: Path,
    *,
    excludes: Sequence[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Path]:
    """Jars of ``coords`` and their runtime dependencies in ``dest`` (fetched on first use).

    ``excludes`` (``group:artifact``) drops dependencies that the consumer already has,
    e.g. Spark's own artifacts, which pyspark ships.
    """
    hit = cached(dest)
    if hit is not None:
        return hit
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            f"jars for {', '.join(coords)} are not cached in {dest} and Maven ('mvn') is not "
            "on PATH to fetch them (apt-get install maven)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="keyshift-mvn-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_pom(coords, excludes))
        cmd = [
            mvn, "-q", "-B", "-f", str(pom),
            "-Dmaven.wagon.http.retryHandler.count=2",
            "-Dmaven.wagon.httpconnectionManager.ttlSeconds=30",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={dest}", "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise JarResolutionError(
                f"Maven did not finish fetching {', '.join(coords)} within {timeout_s:.0f}s "
                "(is Maven Central reachable?)"
            ) from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
        why = lines[0].strip() if lines else f"exit status {proc.returncode}"
        raise JarResolutionError(
            f"Maven could not fetch {', '.join(coords)} (is Maven Central reachable?): {why[:300]}"
        )
    jars = sorted(dest.glob("*.jar"))
    if not jars:
        raise JarResolutionError(f"Maven fetched no jars for {', '.join(coords)} into {dest}")
    (dest / MARKER).write_text("\n".join(coords) + "\n")
    return jars


def pyspark_jars() -> list[Path]:
    """The jars pyspark ships: the driver's class path as spark-submit builds it."""
    return sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def spark_jars(
    cache_root: Path, delta_version: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Path]:
    """The Kafka connector and Delta jars for the installed pyspark, minus Spark itself.

    Spark's own artifacts and the Scala library come with pyspark; fetching them again would
    put two copies of the same classes on the classpath.
    """
    coords = spark_packages(delta_version)
    jar_names = {p.name for p in pyspark_jars()}
    dest = cache_dir(cache_root, "spark-jars", coords)
    hit = cached(dest)
    if hit is None:
        resolve(
            coords, dest, timeout_s=timeout_s,
            excludes=[
                "org.apache.spark:spark-sql_2.13", "org.apache.spark:spark-core_2.13",
                "org.apache.spark:spark-tags_2.13", "org.scala-lang:scala-library",
                "org.slf4j:slf4j-api", "com.google.code.findbugs:jsr305",
            ],
        )
        hit = cached(dest) or []
    # An artifact pyspark already ships, in any version, stays out: Spark was built and
    # tested against its own copy (jackson, parquet, log4j, compression codecs ...).
    shipped = {artifact_of(n) for n in jar_names}
    return [j for j in hit if artifact_of(j.name) not in shipped]


_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")


def artifact_of(jar_name: str) -> str:
    """``jackson-core-2.13.5.jar`` → ``jackson-core`` (the artifact without its version)."""
    m = _VERSIONED.match(jar_name)
    return m.group("artifact") if m else jar_name.removesuffix(".jar")
