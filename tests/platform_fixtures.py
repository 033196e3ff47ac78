"""Integration fixtures of the platform: a real Kafka broker and a real Spark session.

Both are session-scoped (starting either costs tens of seconds) and private to the test run:
the broker listens on free ports with its data in a temporary folder, Spark's warehouse lives
in another. Jars come from the shared cache (``.keyshift/cache`` of the checkout, or
$KEYSHIFT_CACHE), so only the very first run on a machine touches Maven Central.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def platform_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    _class_archive()
    return tmp_path_factory.mktemp("platform")


def _class_archive() -> None:
    """The drivers' class archive, built once if the bootstrap did not (about a minute):
    every driver the suite starts after it maps it, ~4 s sooner each. A failed build only
    warns; tests/lakehouse/test_class_sharing.py fails on it."""
    from keyshift.config import load_config
    from keyshift.lakehouse.class_sharing import ArchiveBuildError, build_archive

    try:
        build_archive(load_config(env={}))
    except ArchiveBuildError as exc:
        import warnings

        warnings.warn(f"no class archive, drivers start slower: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def kafka_broker(platform_home: Path) -> Iterator:
    """A running single-node broker on free ports; stopped at the end of the session."""
    from keyshift.config import load_config
    from keyshift.streaming.broker import Broker, free_port

    port = free_port()
    controller = free_port()
    while controller == port:
        controller = free_port()
    cfg = load_config(env={}, home=str(platform_home),
                      kafka={"port": port, "controller_port": controller})
    broker = Broker.from_config(cfg, folder=platform_home / "kafka")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark_config(platform_home: Path):
    """Config of the test Spark session: two local cores, a private warehouse, p = 64."""
    from keyshift.config import load_config

    return load_config(
        env={}, home=str(platform_home),
        spark={"master": "local[2]", "shuffle_partitions": 2, "trigger_s": 1.0,
               "driver_java_options": os.environ["KEYSHIFT_SPARK__DRIVER_JAVA_OPTIONS"]},
        groups={"count": 64},
    )


@pytest.fixture(scope="session")
def platform_config(spark_config, kafka_broker):
    """``spark_config`` pointing at the test broker as well."""
    return spark_config.model_copy(update={"kafka": spark_config.kafka.model_copy(update={
        "port": kafka_broker.port, "controller_port": kafka_broker.controller_port})})


@pytest.fixture(scope="session")
def spark(spark_config) -> Iterator:
    """One local Spark session (with Kafka and Delta) for the whole test session."""
    from keyshift.lakehouse.session import get_spark

    session = get_spark(spark_config, app_name="keyshift-tests")
    try:
        yield session
    finally:
        session.stop()
