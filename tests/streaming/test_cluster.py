"""The standalone cluster harness (keyshift.streaming.cluster) and get_spark on a real cluster.

Applications on the cluster run as subprocesses (this test process owns a local session);
each writes what its tasks saw (the executor's work dir tells which worker ran a task) to a
JSON file the test reads back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cluster_fixtures import cluster_app_env

from keyshift.config import load_config
from keyshift.errors import ConfigError

cluster_test = [pytest.mark.integration, pytest.mark.slow]

APP = textwrap.dedent('''
    import glob, json, os, sys, time
    from keyshift.config import load_config
    from keyshift.lakehouse.session import ClusterUnreachableError, get_spark, wait_for_executors

    mode, out = sys.argv[1], sys.argv[2]
    cfg = load_config()  # KEYSHIFT_SPARK__MASTER etc. from the environment
    try:
        spark = get_spark(cfg, app_name=f"keyshift-cluster-test-{mode}")
    except ClusterUnreachableError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        sys.exit(3)
    sc = spark.sparkContext
    wait_for_executors(spark, 2, 120, cfg)

    def where(x, pause, progress=None):
        cwd = os.getcwd()  # a standalone executor runs in <worker work dir>/<app>/<exec id>
        if progress:
            worker = next(p for p in cwd.split(os.sep) if p.startswith("worker-"))
            open(os.path.join(progress, f"{x}-{worker}-{os.getpid()}"), "w").close()
        time.sleep(pause)
        jars = sorted(os.path.basename(j) for j in glob.glob(os.path.join(cwd, "*.jar")))
        return {"x": x, "square": x * x, "cwd": cwd, "pid": os.getpid(), "jars": jars}

    result = {"master": sc.master, "conf": dict(sc.getConf().getAll())}
    if mode == "spread":
        result["tasks"] = sc.parallelize(range(8), 8).map(lambda x: where(x, 0.5)).collect()
        path = cfg.table_path("cluster_check")
        spark.range(0, 1000, numPartitions=4).selectExpr("id", "id % 7 AS k") \\
            .write.format("delta").mode("overwrite").save(path)
        back = spark.read.format("delta").load(path)
        result["delta_rows"] = back.count()
        result["delta_sum"] = back.selectExpr("sum(id)").first()[0]
    elif mode == "survive":
        progress = sys.argv[3]
        result["tasks"] = sc.parallelize(range(16), 16) \\
            .map(lambda x: where(x, 1.5, progress)).collect()
    spark.stop()
    Path = __import__("pathlib").Path
    Path(out).write_text(json.dumps(result))
''')


def run_app(tmp_path: Path, env: dict[str, str], mode: str, *args: str,
            timeout_s: float = 300) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "cluster_app.py"
    script.write_text(APP)
    out = tmp_path / f"{mode}.json"
    log = open(tmp_path / f"{mode}.log", "w")
    proc = subprocess.Popen([sys.executable, str(script), mode, str(out), *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    log.close()
    return proc, out


def finish(proc: subprocess.Popen, tmp_path: Path, mode: str, timeout_s: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"cluster app {mode} hung; log:\n{(tmp_path / f'{mode}.log').read_text()}")


def worker_of(cwd: str) -> str:
    return next(part for part in Path(cwd).parts if part.startswith("worker-"))


# --- pure parts: settings for a shared cluster ---------------------------------------------

def test_cluster_conf_only_what_is_configured() -> None:
    from keyshift.lakehouse.session import cluster_conf, is_local

    cfg = load_config(env={}, spark={"master": "spark://127.0.0.1:7077"})
    conf = cluster_conf(cfg)
    assert conf["spark.executor.cores"] == "1" and conf["spark.executor.memory"] == "1g"
    assert conf["spark.pyspark.python"] == sys.executable
    assert not {"spark.cores.max", "spark.driver.host", "spark.driver.port"} & conf.keys()
    cfg = load_config(env={}, spark={
        "master": "spark://h:7077", "cores_max": 3, "driver_host": "10.0.0.5",
        "driver_port": 40000, "driver_block_manager_port": 40001,
        "pyspark_python": "/opt/py/bin/python"})
    conf = cluster_conf(cfg)
    assert conf["spark.cores.max"] == "3"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "10.0.0.5"
    assert conf["spark.driver.port"] == "40000"
    assert conf["spark.driver.blockManager.port"] == "40001"
    assert conf["spark.pyspark.python"] == "/opt/py/bin/python"
    assert is_local("local[2]") and is_local("local") and not is_local("spark://h:1")
    assert not is_local("yarn")


@pytest.mark.parametrize("key, value, needle", [
    ("master", "spark://nohost", "spark.master"),
    ("master", "spark://h:0", "spark.master"),
    ("cores_max", -1, "spark.cores_max"),
    ("executor_cores", 0, "spark.executor_cores"),
    ("executor_memory", "much", "spark.executor_memory"),
    ("driver_port", 70000, "spark.driver_port"),
    ("driver_host", "a b", "spark.driver_host"),
    ("master_timeout_s", 0, "spark.master_timeout_s"),
])
def test_bad_cluster_settings_name_the_key(key: str, value: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(env={}, spark={key: value})


def test_harness_bad_arguments(tmp_path: Path) -> None:
    from keyshift.streaming.cluster import ClusterError, LocalCluster

    with pytest.raises(ValueError, match="workers"):
        LocalCluster(tmp_path, workers=0)
    with pytest.raises(ValueError, match="cores"):
        LocalCluster(tmp_path, cores=0)
    with pytest.raises(ClusterError, match="no cluster state"):
        LocalCluster.load(tmp_path)
    with pytest.raises(ClusterError, match="not started"):
        LocalCluster(tmp_path).master_url  # noqa: B018


# --- the harness -----------------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.slow
def test_harness_starts_workers_and_stop_leaves_nothing(tmp_path: Path) -> None:
    from keyshift.streaming.cluster import LocalCluster

    cluster = LocalCluster(tmp_path / "c", workers=2, cores=1, memory="1g")
    with cluster:
        assert cluster.alive_workers() == [0, 1]
        state = cluster.state()
        assert state["aliveworkers"] == 2 and state["cores"] == 2
        assert {w["host"] for w in state["workers"]} == {"127.0.0.1"}
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        assert len(cluster.processes()) >= 3  # master + 2 workers
        work_dirs = {w.work_dir for w in cluster.worker_daemons}
        assert len(work_dirs) == 2 and all(Path(d).is_dir() for d in work_dirs)
        assert (tmp_path / "c" / "master.log").stat().st_size > 0
    assert cluster.processes() == []


@pytest.mark.integration
@pytest.mark.slow
def test_harness_reports_a_daemon_that_does_not_start(tmp_path: Path) -> None:
    """A worker that cannot start (memory Spark does not parse) ends in a ClusterError with
    the log tail, within the timeout, and leaves no process behind."""
    from keyshift.streaming.cluster import ClusterError, LocalCluster

    cluster = LocalCluster(tmp_path / "c", workers=1, memory="lots", startup_timeout_s=60)
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"worker-0 did not register.*\n") as info:
        cluster.start()
    assert time.monotonic() - t0 < 90
    assert "worker-0.log" in str(info.value)
    assert cluster.processes() == []


# --- applications on the cluster -------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.slow
def test_tasks_land_on_both_workers_and_delta_writes(spark_cluster, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    env = cluster_app_env(spark_cluster, tmp_path / "home", warehouse)
    proc, out = run_app(tmp_path, env, "spread")
    rc = finish(proc, tmp_path, "spread")
    assert rc == 0, (tmp_path / "spread.log").read_text()[-4000:]
    result = json.loads(out.read_text())
    conf = result["conf"]
    assert result["master"] == spark_cluster.master_url
    assert conf["spark.cores.max"] == "2" and conf["spark.executor.cores"] == "1"
    assert conf["spark.driver.host"] == "127.0.0.1"
    tasks = result["tasks"]
    assert sorted(t["x"] for t in tasks) == list(range(8))
    workers = {worker_of(t["cwd"]) for t in tasks}
    assert workers == {"worker-0", "worker-1"}
    # Each executor runs in its own worker's work dir, never in the other's.
    for t in tasks:
        assert t["cwd"].startswith(spark_cluster.folder.as_posix())
    # The Kafka and Delta jars reach every executor (served by the driver from spark.jars).
    for name in workers:
        jars = {j for t in tasks if worker_of(t["cwd"]) == name for j in t["jars"]}
        assert any(j.startswith("delta-spark_") for j in jars), jars
        assert any(j.startswith("spark-sql-kafka-0-10_") for j in jars), jars
    assert result["delta_rows"] == 1000 and result["delta_sum"] == sum(range(1000))
    assert (warehouse / "cluster_check" / "_delta_log").is_dir()


@pytest.mark.integration
@pytest.mark.slow
def test_job_survives_a_killed_worker(spark_cluster, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    progress.mkdir()
    env = cluster_app_env(spark_cluster, tmp_path / "home", tmp_path / "warehouse")
    proc, out = run_app(tmp_path, env, "survive", str(progress))
    try:
        deadline = time.monotonic() + 240
        while True:  # worker 0 in the middle of a task (1.5 s each), after a first task
            fresh = [f for f in progress.iterdir() if "-worker-0-" in f.name
                     and time.time() - f.stat().st_mtime < 0.5]
            if fresh and len(list(progress.iterdir())) >= 3:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the job did not start its tasks; log:\n"
                            + (tmp_path / "survive.log").read_text()[-4000:])
            time.sleep(0.05)
        spark_cluster.kill_worker(0)
        killed = int(fresh[0].name.split("-")[0])
        rc = finish(proc, tmp_path, "survive")
        assert rc == 0, (tmp_path / "survive.log").read_text()[-4000:]
        assert spark_cluster.alive_workers() == [1]
    finally:
        if not spark_cluster.worker_daemons[0].alive():
            spark_cluster.restart_worker(0)  # the session's cluster stays whole for others
    tasks = json.loads(out.read_text())["tasks"]
    assert sorted(t["x"] for t in tasks) == list(range(16))
    assert sum(t["square"] for t in tasks) == sum(x * x for x in range(16))
    # The task worker 0 was running when it died was run again on worker 1, and so was
    # every task after it.
    by_x = {t["x"]: worker_of(t["cwd"]) for t in tasks}
    assert by_x[killed] == "worker-1"
    reruns = [f.name for f in progress.iterdir() if f.name.startswith(f"{killed}-worker-1-")]
    assert reruns, sorted(f.name for f in progress.iterdir())
    assert spark_cluster.alive_workers() == [0, 1]


@pytest.mark.integration
@pytest.mark.slow
def test_master_that_does_not_answer_is_a_clear_error(tmp_path: Path) -> None:
    from keyshift.streaming.broker import free_port

    class Nowhere:
        master_url = f"spark://127.0.0.1:{free_port()}"

    env = cluster_app_env(Nowhere, tmp_path / "home", tmp_path / "warehouse",
                          master_timeout_s=2)
    t0 = time.monotonic()
    proc, _ = run_app(tmp_path, env, "unreachable")
    rc = finish(proc, tmp_path, "unreachable", timeout_s=60)
    log = (tmp_path / "unreachable.log").read_text()
    assert rc == 3, log
    assert f"spark.master {Nowhere.master_url}: no Spark master answers within 2s" in log
    assert time.monotonic() - t0 < 60


@pytest.mark.integration
@pytest.mark.slow
def test_cluster_without_room_for_an_executor_is_a_clear_error(spark_cluster,
                                                              tmp_path: Path) -> None:
    """Executors bigger than any worker: Spark would wait forever; get_spark says why."""
    env = cluster_app_env(spark_cluster, tmp_path / "home", tmp_path / "warehouse",
                          executor_memory="8g", executor_wait_s=5)
    proc, _ = run_app(tmp_path, env, "noroom")
    rc = finish(proc, tmp_path, "noroom", timeout_s=120)
    log = (tmp_path / "noroom.log").read_text()
    assert rc == 3, log
    assert "0 of 1 executor(s) registered within 5s" in log
    assert "spark.executor_memory=8g" in log
    time.sleep(1)
    assert not spark_cluster.state()["activeapps"]  # the application was stopped


# --- the command -----------------------------------------------------------------------------

def keyshift(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keyshift.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_cluster_command_bad_input(tmp_path: Path) -> None:
    for args, needle in ((["--workers", "0"], "--workers"), (["--cores", "-1"], "--cores"),
                         (["--memory", "lots"], "--memory")):
        res = keyshift("cluster", "start", "--dir", str(tmp_path), *args)
        assert res.returncode == 2 and needle in res.stderr, res.stderr
    res = keyshift("cluster", "status", "--dir", str(tmp_path))
    assert res.returncode == 1 and "no cluster state" in res.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_cluster_command_start_status_stop(tmp_path: Path) -> None:
    import os
    import signal

    from keyshift.streaming.cluster import group_is_spark, group_members

    folder = tmp_path / "c"
    res = keyshift("cluster", "start", "--workers", "2", "--cores", "1", "--memory", "1g",
                   "--dir", str(folder))
    assert res.returncode == 0, res.stderr
    state = json.loads((folder / "cluster.json").read_text())
    groups = {state["master"]["pid"], *(w["pid"] for w in state["workers"])}
    try:
        assert len(group_members(groups)) >= 3  # detached: outlived the command
        res = keyshift("cluster", "status", "--dir", str(folder), "--json")
        status = json.loads(res.stdout)
        assert res.returncode == 0 and status["healthy"] and status["alive_workers"] == [0, 1]
        assert status["master_url"] == state["master_url"]
        again = keyshift("cluster", "start", "--dir", str(folder))
        assert again.returncode == 0 and "already running" in again.stdout
        os.killpg(state["workers"][0]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            res = keyshift("cluster", "status", "--dir", str(folder))
            if res.returncode == 1 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert res.returncode == 1 and "1/2 workers alive" in res.stderr, res.stderr
        res = keyshift("cluster", "stop", "--dir", str(folder))
        assert res.returncode == 0 and "stopped" in res.stdout, res.stderr
        assert group_members(groups) == []
        assert not (folder / "cluster.json").exists()
    finally:
        for pgid in groups:
            if group_is_spark(pgid):  # only what this test started, never a reused pid
                os.killpg(pgid, signal.SIGKILL)
