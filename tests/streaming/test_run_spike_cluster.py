"""The CPU-heavy operator under a spike on a real standalone cluster, with the shipped
defaults (a 2-s trigger, 10-s statistic windows, max_offsets_per_trigger 20,000, admission
on): ``keyshift run --planner --engines 1`` must keep its batches within two windows, ask
for the second executor within three windows of the rise, give it back within three windows
of the fall, count the core-seconds the master bills, and produce the reference's complex
events. The figures are printed for the log."""

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
from engines_support import new_topic, outputs, produce_events, reference

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"work_us": 8000.0}  # ~8 ms of one core an event: 200/s needs 1.6 cores
WINDOW_S = 10.0  # controller.window_s's default
SCHEDULE = [(20, 20), (200, 60), (20, 60)]  # (events/s, seconds): rise at +20 s, fall at +80 s


class MasterBill:
    """Integrates the cores the master says keyshift applications hold, every 0.25 s."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.core_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last, cores = time.monotonic(), 0
        while not self._stop.is_set():
            try:
                apps = self.cluster.state().get("activeapps", [])
                now_cores = sum(int(a.get("cores", 0)) for a in apps
                                if str(a.get("name", "")).startswith("keyshift"))
            except Exception:  # noqa: BLE001 -- a missed sample keeps the last count
                now_cores = cores
            now = time.monotonic()
            self.core_seconds += cores * (now - last)
            last, cores = now, now_cores
            self._stop.wait(0.25)

    def __enter__(self) -> MasterBill:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _batches(run_dir: Path) -> list[dict]:
    path = run_dir / "batches.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _produce(cfg, topic: str, marks: dict, sent: list) -> None:
    """The spike, a chunk a second; ``marks`` gets the wall times of the rise and fall."""
    i = 0
    for rate, seconds in SCHEDULE:
        marks.setdefault(rate, []).append(time.time())
        for _ in range(seconds):
            t0 = time.monotonic()
            sent.extend(produce_events(cfg.kafka.bootstrap, topic, "heavy", rate,
                                       skew="zipf:0.5", keys=400, seed=i, phase=i))
            i += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    marks["done"] = [time.time()]


def test_a_spike_with_the_shipped_defaults_scales_out_and_in_within_three_windows(
        spark, platform_config, spark_cluster, tmp_path: Path) -> None:
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    home, warehouse = tmp_path / "home", tmp_path / "warehouse"
    env = cluster_app_env(spark_cluster, home, warehouse, master_ui=spark_cluster.ui_url)
    env.update({**job_keys(cfg), "PYSPARK_PYTHON": sys.executable})
    for key in [k for k in env if k.startswith(("KEYSHIFT_CONTROLLER__",
                                                "KEYSHIFT_PLANNER__"))]:
        env.pop(key)  # the shipped defaults, as a user runs it
    run_id, log = "spike", tmp_path / "run.log"
    run_dir = home / "runs" / run_id
    marks: dict = {}
    sent: list = []
    with MasterBill(spark_cluster) as bill:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "heavy",
             "--params", json.dumps(HEAVY), "--planner", "--engines", "1", "--run-id", run_id,
             "--topic", topic, "--json"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=open(log, "ab"),
            start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not _batches(run_dir):  # the job runs before the spike starts
                assert proc.poll() is None and time.monotonic() < deadline, \
                    log.read_text()[-3000:]
                time.sleep(0.5)
            producer = threading.Thread(target=_produce, args=(cfg, topic, marks, sent))
            producer.start()
            producer.join(timeout=600)
            deadline = time.monotonic() + 300
            while sum(sum(t["events"] for t in b["tasks"])
                      for b in {b["batch_id"]: b for b in _batches(run_dir)}.values()) \
                    < len(sent) or not _released_after(run_dir, marks[20][-1]):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    log.read_text()[-3000:]
                time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGTERM)
            stdout, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        time.sleep(2.0)  # the application unregisters: the master's bill ends
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    batches = list({b["batch_id"]: b for b in _batches(run_dir)}.values())
    rise, fall = marks[200][0], marks[20][-1]
    asked = [b for b in batches for a in b.get("scale_actions", []) if a["kind"] == "request"]
    released = [b for b in batches for a in b.get("scale_actions", [])
                if a["kind"] == "release" and b["started_at"] > fall]
    durations = sorted(b["duration_s"] for b in batches)
    p95 = durations[int(0.95 * (len(durations) - 1))]
    # the backlog is gone at the end of the first batch after the fall that read less than
    # what came in during it (the job keeps up again)
    caught_up = next(b["ended_at"] for b in batches if b["started_at"] > fall
                     and sum(t["events"] for t in b["tasks"]) < 20 * (b["duration_s"] + 2.5))
    out_s = asked[0]["started_at"] - rise if asked else None
    in_s = released[0]["started_at"] - caught_up if released else None
    print(f"spike: batch p95 {p95:.1f} s (max {durations[-1]:.1f}); scale-out asked "
          f"{out_s} s after the rise; scale-in {in_s} s after the backlog was gone; "
          f"core-seconds {summary['core_seconds']} (master {bill.core_seconds:.1f}); "
          f"read limit {summary['read_limit']}, restarts {summary['source_restarts']}; "
          f"start-up {summary['startup']}")
    assert proc.returncode in (0, 130, 143), log.read_text()[-4000:]
    assert b"terminate called" not in log.read_bytes()
    assert p95 <= 2 * WINDOW_S, durations
    assert out_s is not None and out_s <= 3 * WINDOW_S, (out_s, asked)
    assert in_s is not None and in_s <= 3 * WINDOW_S, (in_s, caught_up, released)
    assert summary["core_seconds"] == pytest.approx(bill.core_seconds, rel=0.05)
    # where the time to the first batch went, phase by phase, said before the first batch
    startup = summary["startup"]
    assert {"the driver JVM and its SparkContext", "the first executor"} <= set(startup)
    assert startup["total_s"] == pytest.approx(sum(v for k, v in startup.items()
                                                   if k != "total_s"), abs=0.01)
    assert b"start-up: " in log.read_bytes()
    wh = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(warehouse)})})
    assert outputs(spark, wh, run_id) == reference("heavy", sent, cfg.groups.count, HEAVY)


def _released_after(run_dir: Path, t: float) -> bool:
    return any(a["kind"] == "release" and b["started_at"] > t
               for b in _batches(run_dir) for a in b.get("scale_actions", []))
