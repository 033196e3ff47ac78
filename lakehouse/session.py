"""The one Spark session factory of keyshift (the Delta table helpers: :mod:`keyshift.lakehouse.delta`).

Every Spark user in the project (streaming job, engines, batch jobs, tests) calls
:func:`get_spark` so that they all get the same connector and Delta jars, the same state
store (RocksDB, which the engines' stateful operator relies on) and the same warehouse.
The jars are fetched from Maven Central on first use and handed to Spark as local files
afterwards (``spark.jars``), so a later start needs no network at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keyshift.config import Config, load_config

from .class_sharing import driver_options
from .jars import spark_jars
from .logs import jvm_stderr, relayed_logger, session_level

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from keyshift.startup import StartupClock

ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)
FILE_SYSTEM_CHECKPOINTS = ("org.apache.spark.sql.execution.streaming.checkpointing."
                           "FileSystemBasedCheckpointFileManager")
PYTHON_DAEMON = "keyshift.lakehouse.python_daemon"  # the executors' (spark.python.daemon.module)


# What keyshift changes from Spark's and Delta's defaults for its micro-batches, each with the
# measurement behind it; the same on every session (session_settings).
TUNING: dict[str, str] = {
    # No adaptive query execution: the engine stage's shuffle has exactly one partition
    # per slot by design, so AQE has nothing to coalesce or split there, yet it runs the
    # shuffle's map stage as a job of its own and re-plans the rest after it: 0.09 s of
    # every micro-batch's `collect` stage here (0.18 -> 0.09 s, paired runs at 300
    # events/s, bench/results/floor.md). The batch layer's jobs are small reads.
    "spark.sql.adaptive.enabled": "false",
    # Delta's .crc checksum after each commit stays on (its default, computed
    # incrementally): a process's first commit to a table then reads the table's state
    # from it instead of replaying the log in Spark jobs, 0.4 s against 1.1 s here, and
    # with bookkeeping staged (streaming/staging.py) each table sees a commit per
    # interval, not per batch, so the few ms it adds to a warm commit do not matter.
    # Tables the job appends to every micro-batch would write a log checkpoint (7 Spark
    # jobs here) every 10th commit; every 100th keeps that off most batches, and readers
    # (recovery, reports) replay at most 100 small JSON commits.
    "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
    # A commit of staged bookkeeping reads a few dozen small files by name: listed on
    # the driver, not by a Spark job per read (its default above 32 paths), which
    # halved the commit of a run's key loads (streaming/staging.py).
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
    # ... and none of those listings is kept: Spark's FileStatusCache (250 MB by default)
    # holds the status of every file a read by path has listed, and each staged file is
    # read once and then deleted, so over hours the cache filled the driver's heap with
    # statuses of files long gone (soak run 4, bench/results/soak.md). No keyshift table is a
    # partitioned catalog table, the case that cache serves.
    "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
    # Small local batches: Arrow keeps the pandas operators of the engines cheap.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The executors' Python daemon imports the installed pyspark, byte-compiled, not the
    # zip Spark puts first on its path (keyshift.lakehouse.python_daemon): 0.8 s less
    # before a run's first Python task, 70-80 ms less per new worker.
    "spark.python.daemon.module": PYTHON_DAEMON,
    # ... started without the current folder first on its path (python -m puts it there):
    # on a local master that is the driver's, and a msgpack.py lying in it was imported
    # by the workers in place of the installed package (a user's code is shipped to them:
    # streaming/code_shipping.py)
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}


def session_settings(cfg: Config, app_name: str | None, on_cluster: bool,
                     extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark settings of a keyshift session, each with why (jars cached on first use)."""
    jars = spark_jars(cfg.cache_path / "jars", cfg.spark.delta_version)
    local_dir = cfg.home_path / "spark-local"
    local_dir.mkdir(parents=True, exist_ok=True)
    return {
        "spark.master": cfg.spark.master,
        "spark.app.name": app_name or cfg.spark.app_name,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.jars.ivy": str(cfg.cache_path / "ivy"),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.default.parallelism": str(cfg.spark.shuffle_partitions),
        "spark.driver.memory": cfg.spark.driver_memory,
        "spark.ui.enabled": str(cfg.spark.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(local_dir),
        "spark.sql.warehouse.dir": str(cfg.warehouse_path / "_catalog"),
        "spark.driver.extraJavaOptions": " ".join(filter(None, [
            f"-Dderby.system.home={cfg.home_path / 'derby'}", *driver_options(cfg, jars),
            cfg.spark.driver_java_options])),
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        **TUNING,
        **local_warehouse_conf(cfg),
        **(cluster_conf(cfg) if on_cluster else {}),
        **(extra_conf or {}),
    }


def get_spark(cfg: Config | None = None, app_name: str | None = None,
              extra_conf: dict[str, str] | None = None,
              startup: StartupClock | None = None) -> SparkSession:
    """A SparkSession with Kafka, Delta and RocksDB configured (reused when one is active).

    Local master by default; ``spark.master`` in config may name a cluster, and then the
    session takes only what :func:`cluster_conf` grants it (cores, executor size, the
    driver's address, the executors' Python), a ``spark://`` master that does not accept a
    connection is a :class:`ClusterUnreachableError` within ``spark.master_timeout_s``, and
    the call returns once the first executor has registered (``spark.executor_wait_s``).
    Spark allows one session per JVM, so a second call returns the running session
    unchanged. ``extra_conf`` adds or overrides Spark settings (e.g. for a benchmark).
    ``startup`` gets the phases' ends (keyshift.startup): the jars and settings, the JVM and
    its SparkContext (the application registered), the first executor.
    """
    from pyspark.sql import SparkSession

    cfg = cfg or load_config()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    on_cluster = not is_local(cfg.spark.master)
    if cfg.spark.master.startswith("spark://"):
        check_master(cfg.spark.master, cfg.spark.master_timeout_s)
    settings = session_settings(cfg, app_name, on_cluster, extra_conf)
    if startup is not None:
        startup.mark("the master's check, the jars and Spark's settings")
    if jvm_stderr() is not None:
        _launch_driver(settings, jvm_stderr())
    elif relayed_logger() is not None:
        _launch_driver(settings, None, relay=relayed_logger())
    spark = SparkSession.builder.config(map=settings).getOrCreate()
    spark.sparkContext.setLogLevel(session_level())
    if startup is not None:
        startup.mark("the driver JVM and its SparkContext")
    if on_cluster and cfg.spark.executor_wait_s > 0:
        wait_for_executors(spark, 1, cfg.spark.executor_wait_s, cfg)
        if startup is not None:
            startup.mark("the first executor")
    return spark


def _ignore_sigterm() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class _DriverPopen(dict):
    """The driver JVM's ``Popen`` arguments, whose ``preexec_fn`` also leaves SIGTERM to
    this process. PySpark starts the JVM ignoring SIGINT (a Ctrl-C reaches the whole
    process group; the Python side stops the job between batches) and sets that
    ``preexec_fn`` itself, over any given; this keeps its function and ignores SIGTERM
    after it. A SIGTERM to the whole group (``kill -- -PGID``, systemd's default
    ``KillMode``) then stops a run as Ctrl-C does: before, the JVM's shutdown hook stopped
    the SparkContext under the job's orderly stop, which could no longer commit the staged
    bookkeeping. The JVM still ends with this process: it exits when its stdin closes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(preexec_fn=_ignore_sigterm, **kwargs)

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "preexec_fn" and value is not None:
            theirs = value

            def value() -> None:
                theirs()
                _ignore_sigterm()
        super().__setitem__(key, value)


def _launch_driver(settings: dict[str, str], stderr: Path | None,
                   relay: str | None = None) -> None:
    """Start the driver JVM as PySpark would (spark-submit with these settings) but with its
    stderr appended to ``stderr``: what it prints outside log4j then stays off the terminal
    (:mod:`keyshift.lakehouse.logs`); or, with ``relay``, piped into that logger line by
    line at each line's level (:func:`keyshift.lakehouse.logs.relay_jvm_stderr`). The
    session builder finds this context and uses it. A JVM this process already runs keeps
    its stderr."""
    import logging
    import subprocess
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    from .logs import relay_lines

    if SparkContext._gateway is not None:  # PySpark has no public "is a JVM running"
        return
    conf = SparkConf().setAll(list(settings.items()))
    if relay is not None:
        gateway = launch_gateway(conf, popen_kwargs=_DriverPopen(stderr=subprocess.PIPE))
        threading.Thread(target=relay_lines, args=(gateway.proc.stderr, logging.getLogger(relay)),
                         name="keyshift-jvm-stderr", daemon=True).start()
        SparkContext(conf=conf, gateway=gateway)
        return
    with open(stderr, "ab") as err:
        gateway = launch_gateway(conf, popen_kwargs=_DriverPopen(stderr=err))
        SparkContext(conf=conf, gateway=gateway)


class ClusterUnreachableError(RuntimeError):
    """The configured cluster does not answer, or gives the application no executor."""


def is_local(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: Spark in this JVM only."""
    return master == "local" or master.startswith("local[")


def local_warehouse_conf(cfg: Config) -> dict[str, str]:
    """Spark settings for a warehouse on this machine's file system (a path or ``file:``).

    Why: Spark writes a streaming query's offsets and commits, and Delta each commit's
    ``.crc``, through a checkpoint file manager, by default the Hadoop ``FileContext`` one.
    On the local file system without Hadoop's native library (pyspark ships none) its
    rename runs a ``readlink`` process for each path it checks: about 430 processes in a
    run of 19 micro-batches, a few per cent of its time
    (bench/results/spark_driver_startup.md). The
    ``FileSystem`` manager renames through Java and keeps the same semantics here: on a
    local disk both check that the destination is absent and then rename, neither
    atomically, and a checkpoint has one writer (its query). A warehouse on HDFS or an
    object store keeps Spark's default, whose rename HDFS makes atomic.
    """
    if not cfg.warehouse_on_disk:
        return {}
    return {"spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS}


def cluster_conf(cfg: Config) -> dict[str, str]:
    """The settings a job needs on a shared cluster, from the ``[spark]`` config section.

    Without ``spark.cores.max`` a standalone master gives one application every core of the
    cluster; executor cores and memory size each executor so several fit on one worker; the
    driver's host, bind address and ports (when configured) are what executors on other hosts
    connect back to through a firewall; ``spark.pyspark.python`` is the interpreter the
    executors' Python workers run (the driver's, i.e. the venv's, unless configured).
    """
    sc = cfg.spark
    conf = {
        "spark.executor.cores": str(sc.executor_cores),
        "spark.executor.memory": sc.executor_memory,
        "spark.pyspark.python": sc.pyspark_python or sys.executable,
    }
    if sc.cores_max:
        conf["spark.cores.max"] = str(sc.cores_max)
    if sc.dynamic_allocation:
        # Spark's own scaling, as a user would turn it on for a stream without an external
        # shuffle service: executors come with the task backlog and go after idling, within
        # the engine bounds (docs/elasticity.md compares it with planner.resources)
        per = max(sc.executor_cores, 1)
        conf.update({
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": str(max(1, -(-cfg.engines.min // per))),
            "spark.dynamicAllocation.maxExecutors": str(max(1, -(-cfg.engines.max // per))),
            "spark.dynamicAllocation.executorIdleTimeout": f"{sc.dynamic_allocation_idle_s:g}s",
        })
    if sc.driver_host:
        conf["spark.driver.host"] = sc.driver_host
    if sc.driver_bind_address or sc.driver_host:
        conf["spark.driver.bindAddress"] = sc.driver_bind_address or sc.driver_host
    if sc.driver_port:
        conf["spark.driver.port"] = str(sc.driver_port)
    if sc.driver_block_manager_port:
        conf["spark.driver.blockManager.port"] = str(sc.driver_block_manager_port)
    return conf


def check_master(master: str, timeout_s: float) -> None:
    """Fail fast when no master of a ``spark://`` URL accepts a connection.

    Spark itself retries the registration for a minute and then stops the context from a
    background thread, which a caller sees as a hang followed by an unrelated error.
    """
    import socket

    reasons = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return
        except OSError as exc:
            reasons.append(f"{hostport}: {exc.strerror or exc}")
    raise ClusterUnreachableError(
        f"spark.master {master}: no Spark master answers within {timeout_s:g}s "
        f"({'; '.join(reasons)}); is the cluster running ('keyshift cluster status')?")


def wait_for_executors(spark: SparkSession, count: int, timeout_s: float,
                       cfg: Config | None = None) -> int:
    """Block until ``count`` executors have registered; the number registered.

    A cluster without a free worker big enough for one executor accepts the application and
    then leaves it waiting forever ("Initial job has not accepted any resources"): this turns
    that into a :class:`ClusterUnreachableError` naming what the job asked for.
    """
    import time

    jsc = spark.sparkContext._jsc.sc()
    deadline = time.monotonic() + timeout_s
    while True:
        registered = len(jsc.statusTracker().getExecutorInfos()) - 1  # minus the driver
        if registered >= count:
            return registered
        if jsc.isStopped() or time.monotonic() >= deadline:
            master = spark.sparkContext.master
            asked = ""
            if cfg is not None:
                asked = (f" with spark.executor_cores={cfg.spark.executor_cores} and "
                         f"spark.executor_memory={cfg.spark.executor_memory}")
            why = "the application was stopped" if jsc.isStopped() else (
                f"{registered} of {count} executor(s) registered within {timeout_s:g}s")
            spark.stop()
            raise ClusterUnreachableError(
                f"spark.master {master}: {why}; does the cluster have a free worker{asked}? "
                "(see the master's web UI)")
        time.sleep(0.5)
