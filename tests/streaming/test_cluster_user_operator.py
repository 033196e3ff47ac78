"""A user's own operator on a real standalone cluster (a master and two 1-core workers):
``keyshift run --app userops:...`` from the user's folder, which the executors' path does not
hold, runs because the job ships the module itself (keyshift.streaming.code_shipping); a
module whose own import fails on the executors stops the run before its stream starts,
naming the executors and the fix. And ``keyshift cluster start --port/--ui-port/--json``:
the master's URL stays the same from one start to the next.

Why: the executors could not import a user's ``fraudops`` (the driver could), the run failed
after ~70 s of task retries without saying it was the executors, and the master's port
changed at every ``cluster start``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_fixtures import cluster_app_env, job_keys
from engines_support import new_topic, outputs, produce_events, reference

from keyshift.cli import main
from keyshift.streaming.cluster import port_problem

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"window_s": 1.0}
RECORDS = 300


def _user_folder(tmp_path: Path) -> Path:
    """The user's folder: the shipped word count's code under a name of the user's."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(ROOT / "keyshift" / "apps" / "wordcount.py", folder / "userops.py")
    return folder


def _run(env: dict[str, str], folder: Path, app: str, topic: str, run_id: str,
         *extra: str) -> subprocess.CompletedProcess:
    """``python -m`` from the user's folder: the driver imports the user's module from it
    (Python puts the current folder first for -m); the executors run in their work dirs."""
    return subprocess.run(
        [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", app,
         "--policy", "kg", "--run-id", run_id, "--topic", topic, "--engines", "2",
         "--params", json.dumps(PARAMS), "--available-now", "--json", *extra],
        cwd=folder, env=env, capture_output=True, text=True, timeout=900, check=False)


def _env(cfg, cluster, home: Path, warehouse: Path) -> dict[str, str]:
    env = cluster_app_env(cluster, home, warehouse)
    env.update({**job_keys(cfg), "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
                "KEYSHIFT_METRICS__PORT": "0", "PYSPARK_PYTHON": sys.executable})
    env.pop("PYTHONPATH", None)  # nothing of the user's folder reaches the executors that way
    return env


@pytest.mark.integration
@pytest.mark.slow
def test_a_users_operator_from_their_own_folder_runs_on_the_cluster(
        spark, platform_config, spark_cluster, tmp_path: Path) -> None:
    cfg = platform_config
    folder = _user_folder(tmp_path)
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", RECORDS,
                            skew="uniform", keys=50)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    res = _run(_env(cfg, spark_cluster, home, warehouse), folder,
               "userops:WindowedWordCount", topic, "user-op")
    assert res.returncode == 0, res.stderr[-4000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["events_in"] == RECORDS and not summary["failed"]
    # the engines ran on the cluster's executors, from the shipped zip
    tasks = [t for line in (home / "runs" / "user-op" / "batches.jsonl").read_text().splitlines()
             if line.strip() for t in json.loads(line)["tasks"]]
    assert tasks and all("worker-" in t["workdir"] for t in tasks)
    assert list((home / "pyfiles").glob("userops-*.zip"))
    wh = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(warehouse)})})
    assert outputs(spark, wh, "user-op") == reference("wordcount", events, cfg.groups.count,
                                                      PARAMS)


@pytest.mark.integration
@pytest.mark.slow
def test_an_operator_the_executors_cannot_import_fails_before_the_stream(
        platform_config, spark_cluster, tmp_path: Path) -> None:
    """The operator imports a helper module of the user's folder that nothing ships: the
    driver imports both, the executors cannot; one line names them, the module and
    --py-files, and no batch ran."""
    cfg = platform_config
    folder = _user_folder(tmp_path)
    (folder / "userhelpers46.py").write_text("RATE = 1\n")
    source = (folder / "userops.py").read_text()
    (folder / "userops.py").write_text(source.replace(
        "from bisect import bisect_left\n", "from bisect import bisect_left\n\n"
        "import userhelpers46  # noqa: F401 -- the user's other module\n", 1))
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    home = tmp_path / "home"
    res = _run(_env(cfg, spark_cluster, home, tmp_path / "warehouse"), folder,
               "userops:WindowedWordCount", topic, "user-op-bad")
    assert res.returncode == 2, res.stderr[-4000:]
    line = [x for x in res.stderr.splitlines() if x.startswith("keyshift run: ")]
    assert len(line) == 1, res.stderr[-4000:]
    assert "the executors cannot import the operator's module 'userops'" in line[0]
    assert "No module named 'userhelpers46'" in line[0]
    assert "executor " in line[0] and " on " in line[0] and "--py-files" in line[0]
    assert not (home / "runs" / "user-op-bad" / "batches.jsonl").exists()


# -- keyshift cluster start --port / --ui-port / --json ----------------------------------------

def test_port_problem_names_the_range_and_a_taken_port() -> None:
    import socket

    assert port_problem(80) == "must be in 1024..65535, got 80"
    assert port_problem(65536) == "must be in 1024..65535, got 65536"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert f"127.0.0.1:{taken} is taken" in (port_problem(taken) or "")
    assert port_problem(taken) is None


@pytest.mark.parametrize("args, needle", [
    (["--port", "80"], "--port: must be in 1024..65535, got 80"),
    (["--ui-port", "70000"], "--ui-port: must be in 1024..65535, got 70000"),
    (["--port", "20000", "--ui-port", "20000"], "--ui-port: must differ from --port"),
])
def test_cluster_start_refuses_a_bad_port_before_starting(tmp_path: Path, capsys, args,
                                                          needle: str) -> None:
    code = main(["cluster", "start", "--dir", str(tmp_path / "c"), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"keyshift cluster: {needle}") and "\n" not in err
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_cluster_status_json_without_a_cluster_is_one_object(tmp_path: Path, capsys) -> None:
    code = main(["cluster", "status", "--dir", str(tmp_path / "none"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and "no cluster state" in out["error"]


def _keyshift(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keyshift.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.integration
@pytest.mark.slow
def test_cluster_start_on_fixed_ports_keeps_its_url(tmp_path: Path) -> None:
    from keyshift.streaming.broker import free_port
    from keyshift.streaming.cluster import LocalCluster

    folder = tmp_path / "c"
    port, ui_port = free_port(), free_port()
    while ui_port == port:
        ui_port = free_port()
    start = ["cluster", "start", "--workers", "1", "--cores", "1", "--memory", "512m",
             "--dir", str(folder), "--port", str(port), "--ui-port", str(ui_port), "--json"]
    try:
        res = _keyshift(*start)
        assert res.returncode == 0, res.stderr
        first = json.loads(res.stdout)
        assert first["started"] and first["master_url"] == f"spark://127.0.0.1:{port}"
        assert first["ui_url"] == f"http://127.0.0.1:{ui_port}"
        res = _keyshift("cluster", "status", "--dir", str(folder), "--json")
        status = json.loads(res.stdout)
        assert res.returncode == 0 and status["healthy"], res.stdout
        assert (status["port"], status["ui_port"]) == (port, ui_port)
        res = _keyshift("cluster", "start", "--dir", str(folder), "--port", str(port + 1))
        assert res.returncode == 2 and "stop it first" in res.stderr, res.stderr
        res = _keyshift("cluster", "stop", "--dir", str(folder), "--json")
        assert res.returncode == 0 and json.loads(res.stdout)["stopped"], res.stdout
        res = _keyshift(*start)  # the same URL after a restart
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["master_url"] == first["master_url"]
    finally:
        if (folder / "cluster.json").exists():  # only what this test started
            leftover = LocalCluster.load(folder)
            leftover.stop()
            leftover.forget()
