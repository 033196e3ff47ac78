"""Live metrics of a running job (keyshift.streaming.live_metrics): what each report does to the series,
the Kafka lag from Spark's progress, the shared endpoint, and (integration) a real Prometheus
server that scrapes a running job and answers with the events the job processed."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from keyshift.config import load_config
from keyshift.streaming.live_metrics import (
    METRICS,
    Families,
    LiveMetrics,
    batch_end_offsets,
    close_endpoints,
    endpoint,
    kafka_lag,
    live_metrics_for,
    series_names,
)


@dataclass
class Report:  # the fields of keyshift.streaming.job.BatchReport
    batch_id: int = 0
    events: int = 100
    dead_letter: int = 2
    complex_events: int = 7
    rstd: float = 12.5
    engines: int = 4
    plan_version: int = 1
    moved_groups: int = 0
    moved_bytes: int = 0
    duration_s: float = 0.8
    e2e_p50_s: float | None = 1.2
    e2e_p95_s: float | None = 2.4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _value(live: LiveMetrics, name: str, **labels: str) -> float | None:
    return live.registry.get_sample_value(name, {"run_id": live.run_id, **labels})


def _decision(action: str, tuples: float = 500.0, forecast_error: float | None = None,
              input_rate: float | None = None):
    return SimpleNamespace(action=action, evaluation=SimpleNamespace(
        tuples=tuples, forecast_error=forecast_error,
        input_rate=tuples / 10.0 if input_rate is None else input_rate))


def test_batches_add_up_in_counters_and_set_gauges() -> None:
    live = LiveMetrics("r1")
    live.observe_batch(Report())
    live.observe_batch(Report(batch_id=1, events=50, dead_letter=0, complex_events=3,
                              rstd=4.0, engines=5, plan_version=2, moved_groups=3,
                              moved_bytes=4096, duration_s=2.5))
    assert _value(live, "keyshift_events_total") == 150
    assert _value(live, "keyshift_dead_letters_total") == 2
    assert _value(live, "keyshift_complex_events_total") == 10
    assert _value(live, "keyshift_batches_total") == 2
    assert _value(live, "keyshift_rstd_ratio") == pytest.approx(0.04)  # imbScore 4 %
    assert _value(live, "keyshift_engines") == 5
    assert _value(live, "keyshift_plan_version") == 2
    assert _value(live, "keyshift_migrations_total") == 1
    assert _value(live, "keyshift_moved_groups_total") == 3
    assert _value(live, "keyshift_moved_state_bytes_total") == 4096
    assert _value(live, "keyshift_batch_duration_seconds_count") == 2
    assert _value(live, "keyshift_batch_duration_seconds_sum") == pytest.approx(3.3)
    assert _value(live, "keyshift_batch_duration_seconds_bucket", le="1.0") == 1
    assert _value(live, "keyshift_last_batch_timestamp_seconds") == pytest.approx(time.time(),
                                                                                 abs=5)
    assert _value(live, "keyshift_e2e_latency_seconds", quantile="0.95") == 2.4
    live.observe_batch(Report(batch_id=2, e2e_p50_s=None, e2e_p95_s=None))  # no outputs
    assert _value(live, "keyshift_e2e_latency_seconds", quantile="0.5") == 1.2  # kept


def test_migrations_count_plan_changes_not_batches() -> None:
    """keyshift_migrations_total counts migrations (realized plan changes that moved groups):
    a batch seen again with the same plan version is not a second one; the groups they moved
    are keyshift_moved_groups_total."""
    live = LiveMetrics("rm")
    for version, moved in ((1, 0), (2, 3), (2, 3), (3, 1), (3, 0), (4, 2)):
        live.observe_batch(Report(plan_version=version, moved_groups=moved,
                                  moved_bytes=10 * moved))
    assert _value(live, "keyshift_migrations_total") == 3
    assert _value(live, "keyshift_moved_groups_total") == 9
    assert _value(live, "keyshift_batches_total") == 6


def test_each_decision_is_counted_once_by_action() -> None:
    live = LiveMetrics("r2", window_s=10.0)
    assert _value(live, "keyshift_decisions_total", action="rebalance") == 0  # exists at 0
    rebalance = _decision("rebalance", tuples=800.0, forecast_error=0.25)
    for d in (None, rebalance, rebalance, _decision("none"), _decision("scale_out")):
        live.observe_decision(d)  # the same decision is offered after every batch
    assert _value(live, "keyshift_decisions_total", action="rebalance") == 1
    assert _value(live, "keyshift_decisions_total", action="none") == 1
    assert _value(live, "keyshift_decisions_total", action="scale_out") == 1
    assert _value(live, "keyshift_window_input_events_per_second") == 50.0  # 500 tuples / 10 s, the last
    assert _value(live, "keyshift_forecast_error") == 0.25  # kept from the one that had it
    # batches slower than the trigger: 5 batches of a 10 s window spanned 70 s
    live.observe_decision(_decision("none", tuples=10_500.0, input_rate=150.0))
    assert _value(live, "keyshift_window_input_events_per_second") == 150.0  # not 10,500 / 10 s


def test_ineffective_scalings_are_counted_once_each() -> None:
    """A verdict that a scale-out did not help (keyshift.control.guard) counts once; an
    effective one does not."""
    live = LiveMetrics("r-ineffective", window_s=10.0)
    assert _value(live, "keyshift_ineffective_scalings_total") == 0  # exists at 0
    bad = _decision("declined")
    bad.verdict = SimpleNamespace(ineffective=True)
    good = _decision("scale_out")
    good.verdict = SimpleNamespace(ineffective=False)
    for d in (bad, bad, good, _decision("none")):
        live.observe_decision(d)
    assert _value(live, "keyshift_ineffective_scalings_total") == 1


def test_scaling_events_sent_and_dropped_are_counted_by_outcome() -> None:
    live = LiveMetrics("r-events", window_s=10.0)
    publisher = SimpleNamespace(sent=3, dropped=0)
    live.observe_events(None)  # [events] topic off
    live.observe_events(publisher)
    publisher.sent, publisher.dropped = 5, 2
    live.observe_events(publisher)
    live.observe_events(publisher)  # nothing new
    assert _value(live, "keyshift_scaling_events_total", outcome="sent") == 5
    assert _value(live, "keyshift_scaling_events_total", outcome="dropped") == 2


def test_runs_in_one_registry_are_kept_apart_by_run_id() -> None:
    families = Families(CollectorRegistry())
    a, b = LiveMetrics("a", families), LiveMetrics("b", families)
    a.observe_batch(Report(events=10))
    b.observe_batch(Report(events=20))
    assert _value(a, "keyshift_events_total") == 10
    assert _value(b, "keyshift_events_total") == 20


def test_kafka_lag_from_spark_progress_in_both_forms() -> None:
    # PySpark's progress objects carry the offsets as JSON text; the progress JSON as objects
    as_text = {"sources": [{"endOffset": json.dumps({"t": {"0": 10, "1": 5}}),
                            "latestOffset": json.dumps({"t": {"0": 25, "1": 5}})}]}
    as_json = {"sources": [{"endOffset": {"t": {"0": 10, "1": 5}},
                            "latestOffset": {"t": {"0": 12, "1": 9}}}]}
    assert kafka_lag(as_text) == 15
    assert kafka_lag(as_json) == 6
    assert kafka_lag(None) is None
    assert kafka_lag({"sources": [{"endOffset": "null", "latestOffset": None}]}) is None
    live = LiveMetrics("r3")
    live.observe_progress(as_json)
    assert _value(live, "keyshift_kafka_lag_records") == 6


def test_the_lag_is_the_topic_end_now_minus_the_last_batch_end() -> None:
    """Spark's latest - end offsets read 0 whenever a batch took all there was; the gauge
    asks the broker at the scrape (at most once a second) and subtracts where the last
    batch ended. The broker down: Spark's figure, and no scrape waits on it for 10 s."""
    t = [0.0]
    ends = {0: 30, 1: 12}
    asked: list[float] = []

    def topic_ends():
        asked.append(t[0])
        if ends is None:
            raise OSError("broker down")
        return dict(ends)

    live = LiveMetrics("lag", topic="t", topic_ends=topic_ends, clock=lambda: t[0])
    assert math.isnan(_value(live, "keyshift_kafka_lag_records"))  # no batch yet
    live.observe_progress({"sources": [{"endOffset": {"t": {"0": 10, "1": 5}},
                                        "latestOffset": {"t": {"0": 10, "1": 5}}}]})
    assert _value(live, "keyshift_kafka_lag_records") == (30 - 10) + (12 - 5)
    ends[0] = 50
    assert _value(live, "keyshift_kafka_lag_records") == 27  # cached within the second
    t[0] = 1.5
    assert _value(live, "keyshift_kafka_lag_records") == 47
    ends = None
    t[0] = 3.0
    assert _value(live, "keyshift_kafka_lag_records") == 0  # Spark's lag at planning
    t[0] = 8.0
    assert _value(live, "keyshift_kafka_lag_records") == 0 and asked[-1] == 3.0
    assert batch_end_offsets({"sources": [{"endOffset": json.dumps({"t": {"3": 7}})}]},
                             "t") == {3: 7}
    assert batch_end_offsets({"sources": []}, "t") is None


def test_observe_reads_the_job_its_controller_and_its_query() -> None:
    query = SimpleNamespace(lastProgress={"sources": [{"endOffset": {"t": {"0": 1}},
                                                       "latestOffset": {"t": {"0": 4}}}]})
    job = SimpleNamespace(controller=SimpleNamespace(last_decision=_decision("declined")),
                          query=query)
    live = LiveMetrics("r4")
    live.observe(job, Report())
    assert _value(live, "keyshift_events_total") == 100
    assert _value(live, "keyshift_decisions_total", action="declined") == 1
    assert _value(live, "keyshift_kafka_lag_records") == 3


def test_what_the_run_holds_is_exported() -> None:
    from keyshift.streaming.executors import RunResources

    live = LiveMetrics("r6")
    job = SimpleNamespace(controller=SimpleNamespace(last_decision=None), query=None,
                          resources=RunResources("fixed", None, None, 1, local_cores=2))
    live.observe(job, Report())
    assert _value(live, "keyshift_cores_held") == 2  # a local master: no executors
    live.observe_resources({"executors": 3, "cores_held": 6})
    assert _value(live, "keyshift_executors") == 3 and _value(live, "keyshift_cores_held") == 6


def test_every_defined_metric_is_exposed() -> None:
    """METRICS (what the dashboard may name) and the registry agree, both ways."""
    live = LiveMetrics("r5", window_s=1.0)
    live.describe_run("wordcount", "dlb-h", "t")
    live.observe_batch(Report(moved_groups=1, moved_bytes=1))
    live.observe_decision(_decision("none", forecast_error=0.1))
    live.observe_progress({"sources": [{"endOffset": {"t": {"0": 1}},
                                        "latestOffset": {"t": {"0": 1}}}]})
    live.observe_resources({"executors": 2, "cores_held": 2})
    exposed = {s.name for fam in live.registry.collect() for s in fam.samples
               if not s.name.endswith("_created")}
    assert exposed == set(series_names())
    assert all(name.startswith("keyshift_") for name in METRICS)


def test_endpoint_serves_every_job_of_the_process_over_http() -> None:
    port = _free_port()
    cfg = load_config(env={}, metrics={"port": port})
    said: list[str] = []
    try:
        a = live_metrics_for(cfg, SimpleNamespace(run_id="ra", app="wordcount", policy="kg",
                                                  topic="t"), said.append)
        b = live_metrics_for(cfg, SimpleNamespace(run_id="rb", app="fsd", policy="dlb-h",
                                                  topic=None), said.append)
        assert a is not None and b is not None and a.registry is b.registry
        a.observe_batch(Report(events=3))
        b.observe_batch(Report(events=4))
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = body.decode()
        assert 'keyshift_events_total{run_id="ra"} 3.0' in text
        assert 'keyshift_events_total{run_id="rb"} 4.0' in text
        assert 'keyshift_run_info{app="fsd",policy="dlb-h",run_id="rb",topic="keyshift-events"}' \
            in text
        assert said == [f"live metrics: http://127.0.0.1:{port}/metrics"] * 2
    finally:
        close_endpoints()


def test_port_zero_is_off_and_a_taken_port_says_so_and_goes_on() -> None:
    opts = SimpleNamespace(run_id="r", app="wordcount", policy="kg", topic="t")
    said: list[str] = []
    assert live_metrics_for(load_config(env={}, metrics={"port": 0}), opts, said.append) is None
    assert said == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = load_config(env={}, metrics={"port": port})
        assert live_metrics_for(cfg, opts, said.append) is None
    assert len(said) == 1 and said[0].startswith(f"live metrics off: cannot listen on "
                                                 f"127.0.0.1:{port}")
    assert "KEYSHIFT_METRICS__PORT" in said[0]


def test_the_same_port_twice_is_one_endpoint() -> None:
    port = _free_port()
    try:
        assert endpoint("127.0.0.1", port) is endpoint("127.0.0.1", port)
    finally:
        close_endpoints()


# -- integration: a real Prometheus scrapes a running job -------------------------------------

def _prometheus_binary() -> str:
    """Debian's Prometheus, installed here if missing (root with apt-get), else a skip."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("prometheus is not installed and this user cannot apt-get install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
    done = subprocess.run(install, check=False, env=env, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:  # a stale package list: update it once, then try again
        subprocess.run(["apt-get", "update"], check=False, env=env, capture_output=True,
                       timeout=900)
        done = subprocess.run(install, check=False, env=env, capture_output=True, text=True,
                              timeout=900)
    found = shutil.which("prometheus")
    if not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"prometheus could not be installed with apt-get: {tail[0]}")
    return found


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture()
def prometheus(tmp_path: Path):
    """A Prometheus server on a free port, scraping ``targets`` every second; yields
    ``(start(targets) -> base URL)`` and stops the server it started."""
    binary = _prometheus_binary()
    procs: list[subprocess.Popen] = []
    logs = []

    def start(target: str) -> str:
        port = _free_port()
        conf = tmp_path / "prometheus.yml"
        conf.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: keyshift\n    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 -- the server's lifetime
        logs.append(log)
        procs.append(subprocess.Popen(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if procs[-1].poll() is not None:
                pytest.fail("prometheus exited: "
                            + (tmp_path / "prometheus.log").read_text()[-2000:])
            try:
                if urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200:
                    return base
            except OSError:
                time.sleep(0.5)
        pytest.fail("prometheus not ready within 60 s")

    try:
        yield start
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def _query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    doc = _get_json(url)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def _wait_for_value(base: str, promql: str, expected: float, timeout_s: float = 90) -> float:
    """Poll the query until its one series has ``expected``; returns the last value seen."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        result = _query(base, promql)
        if result:
            last = float(result[0]["value"][1])
            if last == expected:
                return last
        time.sleep(1)
    return last


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_prometheus_scrapes_a_running_job(spark, platform_config, prometheus) -> None:
    from engines_support import job_config, new_topic, produce_events

    from keyshift.streaming.commands.run import start_job
    from keyshift.streaming.job import JobOptions

    port = _free_port()
    cfg = job_config(platform_config).model_copy(update={"metrics": platform_config.metrics
                                                         .model_copy(update={"port": port})})
    base = prometheus(f"127.0.0.1:{port}")
    topic = new_topic(cfg.kafka.bootstrap)
    sent = produce_events(cfg.kafka.bootstrap, topic, "wordcount", 600, skew="zipf:1.0",
                          keys=200)
    said: list[str] = []
    job = start_job(cfg, JobOptions(app="wordcount", policy="dlb-h", topic=topic, engines=2,
                                    app_params={"window_s": 1.0},
                                    max_offsets_per_trigger=200), 0, said.append)
    try:
        assert f"live metrics: http://127.0.0.1:{port}/metrics" in said
        assert job.wait_for(len(sent), 600), f"job took {job.totals.records}"
        run = job.run_id
        # while the job runs, Prometheus finds the series and its value
        seen = _wait_for_value(base, f'keyshift_events_total{{run_id="{run}"}}', len(sent))
        assert seen == len(sent) == job.totals.events_in
        # (asked before the endpoint closes: a failed scrape marks the series stale)
        batches = job.totals.batches
        assert _wait_for_value(base, f'keyshift_batches_total{{run_id="{run}"}}',
                               batches) == batches
        # one statistic window per batch (job_config): one decision per batch, by action
        assert _wait_for_value(base, f'sum(keyshift_decisions_total{{run_id="{run}"}})',
                               batches) == batches
        engines = _query(base, f'keyshift_engines{{run_id="{run}"}}')
        assert float(engines[0]["value"][1]) >= 1
        # more than one batch (200 records each): Spark's progress gave the Kafka offsets
        assert batches >= 3
        lag = _query(base, f'keyshift_kafka_lag_records{{run_id="{run}"}}')
        assert lag and 0 <= float(lag[0]["value"][1]) <= len(sent)
        up = _query(base, 'up{job="keyshift"}')
        assert up and up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
        assert up[0]["value"][1] == "1"
    finally:
        job.stop()
        close_endpoints()
