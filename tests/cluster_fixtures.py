"""A real Spark standalone cluster for tests: a master and 2 workers of 1 core each.

Session-scoped (the daemons take several seconds to start) and private to the test run:
free ports on 127.0.0.1, each worker with its own work and local dirs in a temporary folder.
The test process already owns a local SparkSession (fixture ``spark``) and a JVM holds one,
so an application that runs ON the cluster must be a subprocess: :func:`cluster_app_env`
gives the environment that points such a subprocess's ``get_spark`` at the cluster, with a
warehouse folder as the only thing the driver and the workers share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cluster_app_env(cluster, home: Path, warehouse: Path, **spark: object) -> dict[str, str]:
    """Environment for a subprocess Spark application on ``cluster`` (KEYSHIFT_* overrides).

    One core per executor on 2 cores max, 1g executors, the driver on 127.0.0.1; ``spark``
    adds or overrides ``[spark]`` keys (e.g. ``executor_wait_s=5``).
    """
    settings: dict[str, object] = {
        "master": cluster.master_url, "cores_max": 2, "executor_cores": 1,
        "executor_memory": "1g", "driver_memory": "1g", "driver_host": "127.0.0.1",
        "shuffle_partitions": 2, **spark,
    }
    env = dict(os.environ)
    env.update({f"KEYSHIFT_SPARK__{k.upper()}": str(v) for k, v in settings.items()})
    env["KEYSHIFT_HOME"] = str(home)
    env["KEYSHIFT_WAREHOUSE__ROOT"] = str(warehouse)
    env.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    env.pop("KEYSHIFT_CONFIG", None)
    return env


def job_keys(cfg) -> dict[str, str]:
    """The test broker's ports and the test's key groups, for a job subprocess's env."""
    return {"KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
            "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
            "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count)}


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A started :class:`keyshift.streaming.cluster.LocalCluster` (2 workers, 1 core, 2g each)."""
    from keyshift.streaming.cluster import LocalCluster

    folder = tmp_path_factory.mktemp("spark-cluster")
    with LocalCluster(folder, workers=2, cores=1, memory="2g") as cluster:
        yield cluster
