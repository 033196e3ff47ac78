"""The compose stack's services, run outside containers (no Docker engine here): the commands
and environment of docker/docker-compose.yml, as written, with only what a container would
provide replaced (addresses, ports, folders, the Postgres store by SQLite).

* MLflow's command with its flags answers a request sent with ``Host: mlflow:5000`` (what the
  other containers send) with 200, not 403, and a new experiment's artifacts go through the
  server (``mlflow-artifacts:/``) into ``--artifacts-destination``.
* kafka-init's command creates the topic; the stream job's command runs with the stream
  service's environment (its ``spark.cores.max``) on a standalone master whose two workers
  have the compose cores, and an Airflow task's Spark job with the Airflow services'
  environment still gets an executor beside it.

Prints the compose check's output (``COMPOSE CHECK`` lines; ``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from keyshift.config import load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
BIN = Path(sys.executable).parent


def _interpolate(value: object) -> str:
    """Compose's ${NAME:-default} with every variable unset: the defaults as shipped."""
    import re

    return re.sub(r"\$\{(\w+)(?::?[-?]([^}]*))?\}", lambda m: m.group(2) or "", str(value))


def _say(line: str) -> None:
    print(f"COMPOSE CHECK {line}", flush=True)


def _service_env(name: str) -> dict[str, str]:
    return {k: _interpolate(v) for k, v in (COMPOSE["services"][name].get("environment")
                                            or {}).items()}


def _command(name: str) -> list[str]:
    return [_interpolate(a) for a in COMPOSE["services"][name]["command"]]


def _replace(cmd: list[str], flag: str, value: str) -> list[str]:
    i = cmd.index(flag)
    return [*cmd[:i + 1], value, *cmd[i + 2:]]


def _get(url: str, host: str, timeout_s: float = 30.0) -> int:
    req = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (loopback)
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0  # nothing listens (yet)


def _stop(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The mlflow service's command line on a free loopback port, SQLite instead of Postgres,
    a temporary folder as --artifacts-destination, one worker (two cores here)."""
    from keyshift.streaming.broker import free_port

    tmp = tmp_path_factory.mktemp("mlflow-service")
    port = free_port()
    cmd = _command("mlflow")
    assert cmd[:2] == ["mlflow", "server"]
    cmd = _replace(cmd, "--host", "127.0.0.1")
    cmd = _replace(cmd, "--port", str(port))
    cmd = _replace(cmd, "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}")
    cmd = _replace(cmd, "--artifacts-destination", str(tmp / "mlartifacts"))
    cmd = [str(BIN / "mlflow"), *cmd[1:], "--workers", "1"]
    log = open(tmp / "mlflow.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**os.environ, **_service_env("mlflow")})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # minutes on a loaded 2-core machine
        while _get(f"{url}/health", "localhost", 5) != 200:
            assert proc.poll() is None, (tmp / "mlflow.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp / "mlflow.log").read_text()[-3000:]
            time.sleep(2)
        yield {"url": url, "artifacts": tmp / "mlartifacts", "cmd": cmd}
    finally:
        _stop(proc)
        log.close()


def test_mlflow_answers_the_host_the_containers_send(mlflow_server: dict) -> None:
    search = f"{mlflow_server['url']}/api/2.0/mlflow/experiments/search?max_results=1"
    flags = mlflow_server["cmd"][mlflow_server["cmd"].index("--allowed-hosts") + 1]
    answers = {host: _get(search, host) for host in
               ("mlflow:5000", "localhost:5000", "attacker.example:5000")}
    _say(f"mlflow server ... --allowed-hosts {flags}: "
         + ", ".join(f"Host {h} -> {s}" for h, s in answers.items()))
    assert answers["mlflow:5000"] == 200
    assert answers["localhost:5000"] == 200
    assert answers["attacker.example:5000"] == 403  # the check is on: it can fail


def test_keyshift_artifacts_go_through_the_server(mlflow_server: dict, tmp_path: Path) -> None:
    """No mlflow.artifact_root with a tracking server: the experiment takes the server's
    root (mlflow-artifacts:/), so any host's client reads what the trainer wrote."""
    import mlflow

    from keyshift.models.registry import ensure_experiment, tracking

    env = {k: v for k, v in _service_env("airflow-scheduler").items()
           if k.startswith("KEYSHIFT_")}
    env.update(KEYSHIFT_HOME=str(tmp_path / "ks"),
               KEYSHIFT_MLFLOW__TRACKING_URI=mlflow_server["url"])
    cfg = load_config(env=env)
    with tracking(cfg) as client:
        experiment = ensure_experiment(client, cfg, "compose-check")
        location = client.get_experiment(experiment).artifact_location
        with mlflow.start_run(experiment_id=experiment):
            mlflow.log_text("written by a task", "check.txt")
    stored = list(mlflow_server["artifacts"].rglob("check.txt"))
    _say(f"experiment artifact_location {location}; the server stored {len(stored)} file(s) "
         f"under --artifacts-destination")
    assert location.startswith("mlflow-artifacts:/"), location
    assert [p.read_text() for p in stored] == ["written by a task"]
    assert not (tmp_path / "ks" / "mlartifacts").exists()


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The kafka service's stand-in: a single-node broker on free ports, given minutes to
    start (the shared fixture's 60 s are too few on this loaded machine)."""
    import dataclasses

    from keyshift.streaming.broker import Broker, free_port

    home = tmp_path_factory.mktemp("kafka-service")
    port, controller = free_port(), free_port()
    while controller == port:
        controller = free_port()
    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    cfg = load_config(env={}, home=str(home),
                      kafka={"port": port, "controller_port": controller})
    broker = dataclasses.replace(Broker.from_config(cfg, folder=home / "kafka"),
                                 startup_timeout_s=600.0)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_the_stream_and_an_airflow_task_share_the_compose_workers(
    mlflow_server: dict, kafka_broker, tmp_path: Path
) -> None:
    from keyshift.streaming.cluster import LocalCluster

    worker = COMPOSE["services"]["spark-worker-1"]
    cores = int(_interpolate(worker["environment"]["SPARK_WORKER_CORES"]))
    workers = sum(1 for n in COMPOSE["services"] if n.startswith("spark-worker"))
    shared = tmp_path / "data"  # the keyshift-data volume: home and warehouse

    with LocalCluster(tmp_path / "cluster", workers=workers, cores=cores, memory="2g",
                      startup_timeout_s=600.0) as cluster:
        def env_of(service: str) -> dict[str, str]:
            env = {**os.environ, **_service_env(service)}
            env.pop("KEYSHIFT_CONFIG", None)
            env.update({  # what the containers' network and volume provide
                "KEYSHIFT_HOME": str(shared / "keyshift"),
                "KEYSHIFT_WAREHOUSE__ROOT": str(shared / "keyshift" / "warehouse"),
                "KEYSHIFT_CACHE": str(ROOT / ".keyshift" / "cache"),
                "KEYSHIFT_KAFKA__HOST": kafka_broker.host,
                "KEYSHIFT_KAFKA__PORT": str(kafka_broker.port),
                "KEYSHIFT_SPARK__MASTER": cluster.master_url,
                "KEYSHIFT_SPARK__DRIVER_HOST": "127.0.0.1",
                "KEYSHIFT_MLFLOW__TRACKING_URI": mlflow_server["url"],
                "PYSPARK_PYTHON": sys.executable,
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            })
            if "KEYSHIFT_METRICS__PORT" in env:
                env["KEYSHIFT_METRICS__PORT"] = "0"  # 9464 may be taken on this machine
            return env

        init = subprocess.run(_command("kafka-init"), env=env_of("kafka-init"),
                              capture_output=True, text=True, timeout=120, check=False)
        _say(f"kafka-init: {init.stdout.strip() or init.stderr.strip()}")
        assert init.returncode == 0, init.stderr

        stream_env = env_of("keyshift-stream")
        stream_log = tmp_path / "stream.log"
        with open(stream_log, "wb") as log:
            stream = subprocess.Popen(_command("keyshift-stream"), env=stream_env,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=tmp_path)
        try:
            apps = _wait_for_app(cluster, "keyshift-prod",
                                 int(stream_env["KEYSHIFT_SPARK__CORES_MAX"]), stream,
                                 stream_log)
            task = subprocess.run(
                [sys.executable, "-c", _TASK], env=env_of("airflow-scheduler"),
                capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
            assert task.returncode == 0, task.stdout[-2000:] + task.stderr[-3000:]
            took = json.loads(next(ln[5:] for ln in task.stdout.splitlines()
                                   if ln.startswith("TASK ")))
            assert stream.poll() is None, stream_log.read_text()[-3000:]
        finally:
            _stop(stream)
    total = workers * cores
    _say(f"standalone master, {workers} workers x {cores} cores: keyshift-stream "
         f"(KEYSHIFT_SPARK__CORES_MAX={stream_env['KEYSHIFT_SPARK__CORES_MAX']}) holds "
         f"{apps['keyshift-prod']} cores; an Airflow task's job "
         f"(KEYSHIFT_SPARK__CORES_MAX={took['cores_max']}) got {took['executors']} "
         f"executor(s) and counted {took['count']} rows while the stream ran")
    assert apps["keyshift-prod"] == int(stream_env["KEYSHIFT_SPARK__CORES_MAX"]) < total
    assert took["executors"] >= 1 and took["count"] == 1000


# an Airflow task's Spark job as the tasks start theirs (get_spark waits for an executor for
# spark.executor_wait_s, 120 s, and fails without one), with the Airflow services' env
_TASK = r"""
import json
from keyshift.config import load_config
from keyshift.lakehouse.session import get_spark

cfg = load_config()
spark = get_spark(cfg, app_name="keyshift-airflow-task")
executors = len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1
count = spark.range(1000).count()
spark.stop()
print("TASK " + json.dumps({"executors": executors, "count": count,
                            "cores_max": cfg.spark.cores_max}), flush=True)
"""


def _wait_for_app(cluster, name: str, cores: int, proc: subprocess.Popen, log: Path,
                  timeout_s: float = 600.0) -> dict[str, int]:
    """Cores held per running application, once ``name`` holds ``cores`` (its executors
    registered: the job is running, its streaming query reads the empty topic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        apps = {a["name"]: a["cores"] for a in cluster.state().get("activeapps", [])}
        if apps.get(name, 0) >= cores:
            time.sleep(5)  # would it take more? (spark.cores.max unset: every free core)
            return {a["name"]: a["cores"] for a in cluster.state().get("activeapps", [])}
        assert time.monotonic() < deadline, (apps, log.read_text()[-3000:])
        time.sleep(2)
