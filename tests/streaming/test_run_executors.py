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
from cluster_fixtures import cluster_app_env
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


def test_engines_follow_the_plan_onto_executors_and_back(spark, platform_config, spark_cluster,
                                                         tmp_path: Path) -> None:
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", FIRST, skew="uniform",
                            keys=200)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    env = cluster_app_env(spark_cluster, home, warehouse, master_ui=spark_cluster.ui_url)
    env.update({
        "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
        "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count),
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",  # a decision after every batch
        "KEYSHIFT_CONTROLLER__BAND_LOW": "20", "KEYSHIFT_CONTROLLER__BAND_HIGH": "140",
        "KEYSHIFT_ENGINES__INITIAL": "1", "KEYSHIFT_ENGINES__MAX": "2",
        "KEYSHIFT_PLANNER__RESOURCES": "executors",
        "KEYSHIFT_PLANNER__EXECUTOR_WAIT_S": "60",
        "PYSPARK_PYTHON": sys.executable,
    })
    run_id = "executors-run"
    log = tmp_path / "run.log"
    run_dir = home / "runs" / run_id
    with MasterCores(spark_cluster) as master:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "wordcount",
             "--policy", "elb", "--run-id", run_id, "--topic", topic, "--engines", "1",
             "--max-offsets", str(PER_BATCH), "--params", json.dumps(PARAMS), "--json"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=open(log, "wb"),
            start_new_session=True)
        try:
            def two_engines_ran() -> bool:
                return any(len({t["engine"] for t in b["tasks"] if t["events"]}) == 2
                           for b in _batches(run_dir))
            _wait(two_engines_ran, proc, log, "a batch on two engines")

            def taken() -> int:
                return sum(t["events"] for b in _batches(run_dir) for t in b["tasks"])

            def released() -> bool:
                return any(a["kind"] == "release" and a["batch_id"] > 0
                           for b in _batches(run_dir) for a in b.get("scale_actions", []))
            _wait(lambda: taken() >= len(events), proc, log, "the first events taken")
            for i in range(TRICKLES):  # windows of 30 events: ELB's band wants one engine
                events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", TRICKLE,
                                         skew="uniform", keys=200, phase=i + 1)
                _wait(lambda: taken() >= len(events), proc, log, f"trickle {i + 1} taken")
                if released() and i >= 2:
                    break
            _wait(released, proc, log, "the second executor released")
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGTERM)
            stdout, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode in (0, 130, 143), log.read_text()[-4000:]
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    assert summary["resources"] == "executors"
    assert summary["executors_min"] == 1 and summary["executors_max"] == 2
    assert summary["core_seconds"] > 0
    kinds = [a["kind"] for a in summary["scale_actions"]]
    assert "request" in kinds and "release" in kinds[kinds.index("request"):]
    request = next(a for a in summary["scale_actions"] if a["kind"] == "request")
    assert request["came"] == 2 and request["ready_s"] < 60

    # the cluster manager's own count: 2 cores granted at start (spark.cores.max), 1 once
    # the first plan's batch ran, 2 for the scale-out, 1 again after the scale-in
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
    wh = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(warehouse)})})
    held = {r.executors for r in table_rows(spark, wh, "metrics", run_id)}
    assert held == {1, 2}
    assert outputs(spark, wh, run_id) == reference("wordcount", events, cfg.groups.count, PARAMS)
