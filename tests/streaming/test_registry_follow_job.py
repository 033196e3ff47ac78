"""A running job follows the registry (issue 14 item 5): a real broker, Spark, Delta and an
MLflow SQLite store. The champions move to new versions while the job runs; within the
check cadence the job loads them on its own thread, without stopping, and the next
``decisions`` rows name them; every record is processed once."""

from __future__ import annotations

import pytest
from engines_support import new_topic, outputs, reference
from test_engines_scaling import (
    PARAMS,
    feed,
    register_champions,
    scaler_rows,
    scaling_config,
    start,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def new_champion_versions(cfg) -> tuple[str, str]:
    """Register each champion's stored model again as a new version and move the alias
    to it, as a nightly retrain that won would (the content does not matter here, the
    version does)."""
    from mlflow import MlflowClient

    from keyshift.models.registry import model_name, tracking

    versions = []
    with tracking(cfg):
        client = MlflowClient()
        for name in (model_name(cfg, "input_rate"), model_name(cfg, "latency")):
            old = client.get_model_version_by_alias(name, cfg.mlflow.alias)
            new = client.create_model_version(name, old.source, run_id=old.run_id,
                                              model_id=old.model_id)
            client.set_registered_model_alias(name, cfg.mlflow.alias, new.version)
            versions.append(str(new.version))
    return versions[0], versions[1]


def taken(job, cfg, topic: str, phase: int, events: list) -> None:
    """One more phase of 100 events, waited for (``feed`` counts from its own first phase)."""
    feed(job, cfg, topic, [(phase, 100)], events)
    assert job.wait_for(len(events), 600), f"phase {phase}: job stuck at {job.totals.records}"


def test_alias_moves_mid_run_and_the_next_decisions_name_it(spark, platform_config,
                                                            tmp_path) -> None:
    cfg = scaling_config(platform_config, tmp_path, registry_check_windows=2)
    register_champions(cfg)
    topic = new_topic(cfg.kafka.bootstrap)
    job = start(spark, cfg, topic, max_offsets=100)
    events: list = []
    forecaster = job.controller.forecaster
    try:
        feed(job, cfg, topic, [(0, 100), (1, 100)], events)
        assert forecaster.models.versions == ("1", "1")
        assert new_champion_versions(cfg) == ("2", "2")
        phase = 2
        while forecaster.models.versions != ("2", "2") and phase < 12:
            taken(job, cfg, topic, phase, events)
            forecaster.join(120)  # a check under way lands at the next window
            phase += 1
        for p in (phase, phase + 1):
            taken(job, cfg, topic, p, events)
    finally:
        job.stop()
    rows = scaler_rows(spark, cfg, job.run_id)
    for r in rows:
        print(r.batch_id, r.action, r.engines_before, r.engines_after, r.reason[:300])
    v1 = "champion GPs keyshift-input-rate.scaling-test v1, keyshift-latency.scaling-test v1"
    v2 = "champion GPs keyshift-input-rate.scaling-test v2, keyshift-latency.scaling-test v2"
    swapped = [i for i, r in enumerate(rows) if "loaded" in r.reason]
    assert len(swapped) == 1, [r.reason for r in rows]
    assert rows[swapped[0]].reason.startswith("registry check at window ")
    assert f"loaded {v2} (was {v1}); forecast: {v2}" in rows[swapped[0]].reason
    assert all(v1 in r.reason for r in rows[:swapped[0]])
    after = rows[swapped[0] + 1:]
    assert after and all(v2 in r.reason and v1 not in r.reason for r in after)
    # the job never stopped for the registry: every event once, the reference's output
    assert job.totals.processed == job.totals.events_in == len(events)
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events,
                                                        cfg.groups.count, PARAMS)
