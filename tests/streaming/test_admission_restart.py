"""Admission on the real stack: a backlog behind a small first bound makes the job restart
its query in place with a larger one, between batches; nothing is lost or doubled, and a
batch Spark planned with the old bound is planned again with the new one."""

from __future__ import annotations

import json

import pytest
from engines_support import new_topic, outputs, produce_events, reference, run_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMS = {"window_s": 1.0}


def test_a_backlog_grows_the_bound_by_a_restart_in_place(spark, platform_config) -> None:
    cfg = platform_config.model_copy(update={
        "spark": platform_config.spark.model_copy(update={"admission_initial": 300}),
        "controller": platform_config.controller.model_copy(update={"window_s": 4.0})})
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", 3000, skew="zipf:0.8",
                            keys=200)
    # the user's bound (the ceiling) is 2,400; the first batch reads 300
    job = run_job(spark, cfg, "wordcount", "kg", topic, records=3000, params=PARAMS,
                  engines=2, max_offsets=2400)
    lines = [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]
    read = [sum(t["events"] for t in b["tasks"]) for b in lines]
    assert read[0] <= 300 and max(read) > 300, read
    restarts = job.summary()["source_restarts"]
    assert restarts and restarts[0]["ok"] and restarts[0]["limit"] > 300, restarts
    assert job.lifecycle.swaps >= 1
    # each record once, in batches of consecutive ids, and the outputs of a run that never
    # restarted
    assert job.totals.records == 3000 == sum(read)
    ids = [b["batch_id"] for b in lines]
    assert ids == list(range(len(ids)))
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events, 64, PARAMS)
    assert json.loads((job.run_dir / "admission.json").read_text())["limit"] > 300
