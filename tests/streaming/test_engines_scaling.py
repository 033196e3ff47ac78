"""The scaler in the running job (issue #6): a real broker, Spark, Delta and an MLflow SQLite
store with champion GPs registered by the nightly training code. An input ramp makes the
planner scale out (and back in); the complex events stay those of a never-rebalanced run;
every record is processed or dead-lettered; ``decisions`` holds the scaler's rows with their
reasons. Without a champion the job falls back, says so, and keeps running."""

from __future__ import annotations

import re
import time
import uuid

import numpy as np
import pandas as pd
import pytest
from engines_support import new_topic, outputs, produce_events, reference, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMS = {"window_s": 1.0}  # wordcount's tumbling event-time window
HEAVY = {"work_us": 1000.0, "every": 4}  # the CPU-heavy rule: 1 ms of hash chain per event
TRIGGER_S = 0.2
# Δt, the planner's statistic window. Each 0.2-s trigger closes one window whatever its length,
# so Δt only sets what one engine can carry per window: Δt / Lat. Wordcount's engine work
# measured 45-70 µs per tuple in loaded windows here (task time without the wait for input),
# so with Δt = 10 ms one engine carries ~150-220 tuples per window: a 5,000-tuple window needs
# more than the 6 engines allowed even on a machine 3x faster, a 40-tuple window far fewer.
WINDOW_S = 0.01


def scaling_config(base, tmp_path, **planner):
    """Planner on, short windows, a private MLflow store; misses cost far more than engines,
    so the planner provisions Δt · N / Lat >= In."""
    return base.model_copy(update={
        "controller": base.controller.model_copy(update={"window_s": WINDOW_S}),
        # windows shorter than a batch's fixed cost, to decide at every batch: no read bound
        # can meet them, so the batches keep the sizes the tests feed (admission: its tests)
        "spark": base.spark.model_copy(update={"admission": "off"}),
        "engines": base.engines.model_copy(update={"initial": 2, "min": 1, "max": 6}),
        "planner": base.planner.model_copy(update={
            "enabled": True, "horizon": 3, "mc": 10.0, "ec": 10.0, "rc": 0.1,
            "theta2": 0.5, **planner}),
        # each test's topic is new: one workload named for all, so the champions trained
        # here are the ones its jobs follow
        "mlflow": base.mlflow.model_copy(update={
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "artifact_root": str(tmp_path / "mlartifacts"), "workload": "scaling-test"}),
    })


def register_champions(cfg) -> dict:
    """Train and register both GPs, as the nightly job would, on a synthetic metrics history
    of the last 12 minutes in the scaler's units (tuples per second of Δt, engine work
    seconds per tuple): a load that swings between 50 and 4,950 tuples per window over 5
    minutes, and a per-tuple latency of a fixed 2 ms per window plus 15 µs per tuple. A GP
    trained on a history that varies learns to follow the recent windows (one trained on a
    flat history takes a ramp for noise). Both models take the alias 'champion'."""
    from keyshift.models.training import train_and_register

    rng = np.random.default_rng(0)
    n, spacing = 48, 15.0
    i = np.arange(n)
    tuples = (2500 + 2450 * np.sin(2 * np.pi * i * spacing / 300)) * (1 + rng.normal(0, 0.02, n))
    metrics = pd.DataFrame({
        "window_start": pd.to_datetime(time.time() - spacing * (n - i), unit="s", utc=True),
        "input_rate": tuples / WINDOW_S,
        "latency_s": 2e-3 / np.maximum(tuples, 1) + 1.5e-5,
        "engines": 1 + i % 3,
        "events_in": tuples.round(),  # the window's size: the latency GP's fifth feature
    })
    summary = train_and_register(metrics, cfg, min_rows=20, kernel="ard", iters=30)
    assert summary["models"]["input_rate"]["champion_moved"], summary
    return summary


def start(spark, cfg, topic: str, max_offsets: int, run_id: str | None = None,
          app: str = "wordcount", params: dict | None = None):
    from keyshift.streaming.job import JobOptions, StreamJob

    job = StreamJob(spark, cfg, JobOptions(
        app=app, policy="dlb-h", topic=topic, engines=2, app_params=params or PARAMS,
        trigger_s=TRIGGER_S, max_offsets_per_trigger=max_offsets,
        run_id=run_id or f"scale-{uuid.uuid4().hex[:6]}"))
    job.start()
    return job


def feed(job, cfg, topic: str, phases, events: list, malformed: int = 0,
         app: str = "wordcount") -> None:
    """Produce each phase's events and wait until the job has taken them (one phase per
    step, so the windows' sizes follow the ramp)."""
    taken = 0
    for phase, count in phases:
        bad = malformed if phase == 0 else 0
        events += produce_events(cfg.kafka.bootstrap, topic, app, count,
                                 skew="zipf:1.0", keys=200, phase=phase, malformed=bad)
        taken += count
        assert job.wait_for(taken, 600), f"phase {phase}: job stuck at {job.totals.records}"


def scaler_rows(spark, cfg, run_id: str) -> list:
    rows = table_rows(spark, cfg, "decisions", run_id)
    return sorted((r for r in rows if r.component == "scaler"), key=lambda r: r.batch_id)


def test_ramp_scales_out_and_in_with_the_champion(spark, platform_config, tmp_path) -> None:
    cfg = scaling_config(platform_config, tmp_path)
    register_champions(cfg)
    topic = new_topic(cfg.kafka.bootstrap)
    # a rule of 1 ms per event: the burst below is several engines' worth of real work,
    # so a scale-out is what the measurement asks whatever the champion forecasts (the
    # champion's own path follows wordcount's 50 µs only where its forecast happens to
    # run high: a champion that plans 1 engine is overruled, issue 41 item 0)
    job = start(spark, cfg, topic, max_offsets=1000, app="heavy", params=HEAVY)
    events: list = []
    try:
        # 40-event windows, then a burst of 4,000 (4 s of one engine's work, in windows of
        # 1,000), then small again for long enough that N follows it down
        feed(job, cfg, topic, [(0, 40), (1, 4000)] + [(p, 40) for p in range(2, 12)], events,
             malformed=4, app="heavy")
    finally:
        job.stop()
    rows = scaler_rows(spark, cfg, job.run_id)
    for r in rows:
        print(r.batch_id, r.action, r.engines_before, r.engines_after, r.reason[:600])
    assert rows, "no scaler decisions"
    champion = ("champion GPs keyshift-input-rate.scaling-test v1, "
                "keyshift-latency.scaling-test v1",
                "following the path planned from champion")
    # the latency GP works on log seconds, so no online-conditioned forecast can be negative
    # (one on raw seconds was, in CI, and forced a fallback): every decision uses the
    # champion (the guard's verdict on a realized scale-out, ``ineffective``, cites none)
    decided = [r for r in rows if r.action != "ineffective"]
    assert all(any(c in r.reason for c in champion) for r in decided), [r.reason for r in rows]
    actions = [r.action for r in rows if r.plan_version is not None]
    assert "scale_out" in actions, [r.reason for r in rows]
    assert any(r.action == "scale_out" and any(c in r.reason for c in champion)
               for r in rows), [r.reason for r in rows]
    metrics = sorted(table_rows(spark, cfg, "metrics", job.run_id), key=lambda r: r.batch_id)
    engines = [m.engines for m in metrics]
    assert max(engines) > 2
    out_at = [r.batch_id for r in rows if r.action == "scale_out" and r.plan_version is not None]
    in_after = [r for r in rows if r.action == "scale_in" and r.plan_version is not None
                and r.batch_id > out_at[0]]
    assert in_after, "no scale-in after the ramp"
    # complex events equal a never-rebalanced run's; nothing lost, nothing doubled
    assert outputs(spark, cfg, job.run_id) == reference("heavy", events, cfg.groups.count,
                                                        HEAVY)
    assert job.totals.processed == job.totals.events_in == len(events)
    assert job.totals.records == job.totals.events_in + job.totals.dead_letter
    assert job.totals.dead_letter == 4
    assert sum(m.events_in for m in metrics) == sum(m.processed for m in metrics) == len(events)
    print("engines per batch:", engines, "scaler actions:", actions)


def test_no_champion_falls_back_and_keeps_running(spark, platform_config, tmp_path) -> None:
    """No model in the store: the fallback decides and says why. Then the job is stopped
    and restarted with the same run id: the scaler's history comes back from Delta."""
    cfg = scaling_config(platform_config, tmp_path)  # an empty MLflow store
    topic = new_topic(cfg.kafka.bootstrap)
    job = start(spark, cfg, topic, max_offsets=100)
    events: list = []
    try:
        feed(job, cfg, topic, [(0, 100), (1, 100), (2, 100), (3, 100)], events)
    finally:
        job.stop()
    before = scaler_rows(spark, cfg, job.run_id)
    for r in before:
        print(r.batch_id, r.action, r.engines_before, r.engines_after, r.reason[:400])
    assert len(before) >= 4
    assert all("no input_rate forecaster of workload 'scaling-test'" in r.reason for r in before
               if "following the path" not in r.reason)
    assert "too little history" in before[0].reason and before[0].action == "none"
    assert any("fallback SeasonalProfile+EngineLatency" in r.reason for r in before)

    again = start(spark, cfg, topic, max_offsets=100, run_id=job.run_id)
    try:
        feed(again, cfg, topic, [(4, 100), (5, 100), (6, 100)], events)
    finally:
        again.stop()
    after = [r for r in scaler_rows(spark, cfg, job.run_id) if r.batch_id > before[-1].batch_id]
    for r in after:
        print(r.batch_id, r.action, r.engines_before, r.engines_after, r.reason[:400])
    # the restarted scaler forecasts from the windows before the restart as well
    sizes = [int(m) for r in after for m in re.findall(r"fallback SeasonalProfile\+EngineLatency "
                                                        r"on (\d+) windows", r.reason)]
    assert sizes and max(sizes) > len(after), [r.reason for r in after]
    assert "too little history" not in " ".join(r.reason for r in after)
    assert job.totals.processed + again.totals.processed == len(events)
    metrics = table_rows(spark, cfg, "metrics", job.run_id)
    assert sum(m.events_in for m in metrics) == sum(m.processed for m in metrics) == len(events)
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events,
                                                        cfg.groups.count, PARAMS)
