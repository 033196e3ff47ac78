"""Engines on executors, on a real standalone cluster (a master and two 1-core workers):
``keyshift run`` with ``planner.resources = "executors"`` holds one executor for one engine,
asks the cluster manager for a second when ELB's band scales the plan out to two engines,
and gives it back after the scale-in's moving batch. The master's own API shows the cores
the application held follow the plan (1 -> 2 -> 1); no engine task runs on a released
executor; the complex events equal the never-rebalanced reference of the same input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cluster_fixtures import cluster_app_env, job_keys
from engines_support import new_topic, outputs, produce_events, reference, table_rows

from keyshift.streaming.executors import executor_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"window_s": 1.0}
FIRST, PER_BATCH = 600, 100  # full batches: 100 per window, ELB's band [20, 140] -> 2 engines
TRICKLE, TRICKLES = 30, 6  # small batches: 30 per window -> 1 engine


def _batches(run_dir: Path) -> list[dict]:
    path = run_dir / "batches.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


class MasterCores:
    """Samples the cores the master says keyshift applications hold, every 0.3 s."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.seen: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                apps = self.cluster.state().get("activeapps", [])
                cores = sum(int(a.get("cores", 0)) for a in apps
                            if str(a.get("name", "")).startswith("keyshift"))
                if apps and (not self.seen or self.seen[-1] != cores):
                    self.seen.append(cores)
            except Exception:  # noqa: BLE001 -- a missed sample is only a gap
                pass
            self._stop.wait(0.3)

    def __enter__(self) -> MasterCores:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _wait(pred, proc, log: Path, what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen; log:\n{log.read_text()[-4000:]}")
        time.sleep(0.3)


def _env(cfg, cluster, home: Path, warehouse: Path, **extra: str) -> dict[str, str]:
    env = cluster_app_env(cluster, home, warehouse, master_ui=cluster.ui_url)
    env.update({
        **job_keys(cfg),
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",  # a decision after every batch
        "KEYSHIFT_CONTROLLER__BAND_LOW": "20", "KEYSHIFT_CONTROLLER__BAND_HIGH": "140",
        "KEYSHIFT_ENGINES__INITIAL": "1", "KEYSHIFT_ENGINES__MAX": "2",
        "KEYSHIFT_PLANNER__RESOURCES": "executors",
        "KEYSHIFT_PLANNER__EXECUTOR_WAIT_S": "60",
        "PYSPARK_PYTHON": sys.executable,
        **extra,
    })
    return env


def _start(env: dict[str, str], run_id: str, topic: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "wordcount",
         "--policy", "elb", "--run-id", run_id, "--topic", topic, "--engines", "1",
         "--max-offsets", str(PER_BATCH), "--params", json.dumps(PARAMS), "--json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=open(log, "ab"),
        start_new_session=True)


def _taken(run_dir: Path) -> int:
    """Events of the batches done (a batch run again after a kill counts once)."""
    done: dict[int, int] = {}
    for b in _batches(run_dir):
        done[b["batch_id"]] = sum(t["events"] for t in b["tasks"])
    return sum(done.values())


def _released(run_dir: Path) -> bool:
    return any(a["kind"] == "release" and a["batch_id"] > 0
               for b in _batches(run_dir) for a in b.get("scale_actions", []))


def _two_engines_ran(run_dir: Path) -> bool:
    return any(len({t["engine"] for t in b["tasks"] if t["events"]}) == 2
               for b in _batches(run_dir))


def _stop(proc: subprocess.Popen) -> str:
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=300)
    return stdout.decode()


def _warehouse_cfg(cfg, warehouse: Path):
    return cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(warehouse)})})


def test_engines_follow_the_plan_onto_executors_and_back(spark, platform_config, spark_cluster,
                                                         tmp_path: Path) -> None:
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", FIRST, skew="uniform",
                            keys=200)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    env = _env(cfg, spark_cluster, home, warehouse)
    run_id = "executors-run"
    log = tmp_path / "run.log"
    run_dir = home / "runs" / run_id
    with MasterCores(spark_cluster) as master:
        proc = _start(env, run_id, topic, log)
        try:
            _wait(lambda: _two_engines_ran(run_dir), proc, log, "a batch on two engines")
            _wait(lambda: _taken(run_dir) >= len(events), proc, log, "the first events taken")
            for i in range(TRICKLES):  # windows of 30 events: ELB's band wants one engine
                events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", TRICKLE,
                                         skew="uniform", keys=200, phase=i + 1)
                _wait(lambda: _taken(run_dir) >= len(events), proc, log,
                      f"trickle {i + 1} taken")
                if _released(run_dir) and i >= 2:
                    break
            _wait(lambda: _released(run_dir), proc, log, "the second executor released")
            time.sleep(1.0)
            stdout = _stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode in (0, 130, 143), log.read_text()[-4000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["resources"] == "executors"
    assert summary["executors_min"] == 1 and summary["executors_max"] == 2
    assert isinstance(summary["core_seconds"], float)  # its value: bench_elastic_cluster
    kinds = [a["kind"] for a in summary["scale_actions"]]
    assert "request" in kinds and "release" in kinds[kinds.index("request"):]
    request = next(a for a in summary["scale_actions"] if a["kind"] == "request")
    assert request["came"] == 2 and request["ready_s"] < 60

    # the cluster manager's own count: 2 cores granted at start (spark.cores.max), 1 once
    # the first plan is known, 2 for the scale-out, 1 again after the scale-in
    seen = master.seen
    assert 2 in seen and 1 in seen, seen
    after_first_one = seen[seen.index(1):]
    assert 2 in after_first_one and after_first_one[-1] == 1, seen

    # no engine task ran on an executor after it was released
    batches = _batches(run_dir)
    gone: dict[str, int] = {}
    for b in batches:
        for a in b.get("scale_actions", []):
            if a["kind"] == "release":
                for e in a["released"]:
                    gone.setdefault(e, a["batch_id"])
    assert gone
    for b in batches:
        for t in b["tasks"]:
            e = executor_of(t["workdir"])
            assert not (e in gone and b["batch_id"] > gone[e]), (e, b["batch_id"], gone)

    # what the run held is in its metrics rows; nothing lost, nothing doubled
    wh = _warehouse_cfg(cfg, warehouse)
    held = {r.executors for r in table_rows(spark, wh, "metrics", run_id)}
    assert held == {1, 2}
    assert outputs(spark, wh, run_id) == reference("wordcount", events, cfg.groups.count, PARAMS)


def test_a_worker_killed_while_its_executor_is_requested(spark, platform_config, spark_cluster,
                                                         tmp_path: Path) -> None:
    """The scale-out asks for a second executor and its only free worker dies: the wait
    is bounded, the action says how many came, the plan's two engines share the one
    executor, nothing is lost."""
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    env = _env(cfg, spark_cluster, home, warehouse, KEYSHIFT_PLANNER__EXECUTOR_WAIT_S="12")
    run_id = "executors-lost"
    log = tmp_path / "run.log"
    run_dir = home / "runs" / run_id
    events: list = []
    proc = _start(env, run_id, topic, log)
    killed = None
    try:
        # two windows of 20 events: one engine, and one executor once the start's (or the
        # first batch's) release is done; then learn which worker is free
        for phase in (0, 1):
            events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", 20,
                                     skew="uniform", keys=200, phase=phase)
            _wait(lambda: _taken(run_dir) >= len(events), proc, log, f"window {phase}")
        _wait(lambda: _app_cores(spark_cluster) == 1, proc, log, "one executor held")
        busy = {w["port"] for w in spark_cluster.state()["workers"] if w.get("coresused")}
        free = next(i for i, w in enumerate(spark_cluster.worker_daemons)
                    if w.port not in busy)
        events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", FIRST,
                                 skew="uniform", keys=200, phase=2)
        _wait(lambda: b"-> 2 asked" in log.read_bytes(), proc, log, "the scale-out's request")
        spark_cluster.kill_worker(free)
        killed = free
        _wait(lambda: _taken(run_dir) >= len(events), proc, log, "every event taken")
        stdout = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if killed is not None:
            spark_cluster.restart_worker(killed)  # the session's cluster stays whole
    assert proc.returncode in (0, 130, 143), log.read_text()[-4000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    request = next(a for a in summary["scale_actions"] if a["kind"] == "request")
    # the executor may have registered before the kill and died with it; either way the
    # wait ended within executor_wait_s and the run went on
    assert request["ready_s"] <= 12 + 5, request
    assert two_engines_ran_on_one_executor(run_dir) or request["came"] == 2
    wh = _warehouse_cfg(cfg, warehouse)
    assert outputs(spark, wh, run_id) == reference("wordcount", events, cfg.groups.count, PARAMS)
    assert summary["events_in"] == len(events)


def _app_cores(cluster) -> int:
    return sum(int(a.get("cores", 0)) for a in cluster.state().get("activeapps", [])
               if str(a.get("name", "")).startswith("keyshift"))


def two_engines_ran_on_one_executor(run_dir: Path) -> bool:
    """A batch whose two engines' tasks ran in the same executor folder."""
    for b in _batches(run_dir):
        ran = [t for t in b["tasks"] if t["events"]]
        if len({t["engine"] for t in ran}) == 2 and len({t["workdir"] for t in ran}) == 1:
            return True
    return False


def test_a_driver_killed_mid_scale_in_migration_resumes_without_loss(
        spark, platform_config, spark_cluster, tmp_path: Path) -> None:
    """SIGKILL inside the scale-in's migration batch (the engines reading the retired
    engine's state), then a restart with the same run id: the new application starts with
    what the cluster gives, keeps one executor for the one-engine plan, and the complex
    events equal the reference (nothing lost, nothing doubled)."""
    from keyshift.streaming.faults import ENV

    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    run_id = "executors-killed"
    log = tmp_path / "run.log"
    run_dir = home / "runs" / run_id
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", FIRST, skew="uniform",
                            keys=200)
    proc = _start(_env(cfg, spark_cluster, home, warehouse), run_id, topic, log)
    try:
        _wait(lambda: _two_engines_ran(run_dir), proc, log, "a batch on two engines")
        _wait(lambda: _taken(run_dir) >= len(events), proc, log, "the first events taken")
        # arm the kill for the next migration (the scale-in's): a restart of this process
        # with the fault set is not possible, so stop it cleanly and resume armed
        _stop(proc)
        after = max(b["batch_id"] for b in _batches(run_dir)) + 1
        armed = _env(cfg, spark_cluster, home, warehouse, **{ENV: f"migration@{after}"})
        proc = _start(armed, run_id, topic, log)
        # a window of 30 events decides the scale-in (unless the first run's tail already
        # did); the next window's batch migrates, and the fault kills it there
        events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", TRICKLE,
                                 skew="uniform", keys=200, phase=1)
        deadline = time.monotonic() + 300
        while proc.poll() is None and _taken(run_dir) < len(events) \
                and time.monotonic() < deadline:
            time.sleep(0.3)
        if proc.poll() is None:
            events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", TRICKLE,
                                     skew="uniform", keys=200, phase=2)
        out, _ = proc.communicate(timeout=300)  # SIGKILLed by the fault in the migration
        assert b"killing the job now" in out, log.read_text()[-3000:]
        proc = _start(_env(cfg, spark_cluster, home, warehouse), run_id, topic, log)
        _wait(lambda: _taken(run_dir) >= len(events), proc, log, "every event after restart")
        events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", TRICKLE,
                                 skew="uniform", keys=200, phase=3)
        _wait(lambda: _taken(run_dir) >= len(events), proc, log, "one more trickle")
        assert b"migrated" in log.read_bytes().rsplit(b"running executors-killed", 1)[-1]
        _wait(lambda: _app_cores(spark_cluster) == 1, proc, log, "one executor held")
        stdout = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["executors_max"] <= 2 and summary["executors_min"] == 1, summary
    wh = _warehouse_cfg(cfg, warehouse)
    assert outputs(spark, wh, run_id) == reference("wordcount", events, cfg.groups.count, PARAMS)
    mig = table_rows(spark, wh, "migrations", run_id)
    assert {r.migration_id for r in mig if r.status == "completed"} == \
        {r.migration_id for r in mig if r.status == "started"}
