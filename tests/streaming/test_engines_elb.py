"""ELB changes the engine count (π) while the job runs: new slots receive groups with their
state, removed slots hand theirs over, and the complex events stay those of the reference."""

from __future__ import annotations

import pytest
from engines_support import (
    job_config,
    new_topic,
    outputs,
    produce_events,
    reference,
    start_job,
    table_rows,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMS = {"window_s": 1.0}


def test_elb_scale_out_then_in_keeps_outputs(spark, platform_config) -> None:
    cfg = job_config(platform_config, policy="elb")
    topic = new_topic(cfg.kafka.bootstrap)
    # Band [40, 60] events per engine per window: 300-event batches need π = 6 engines,
    # a 60-event batch needs π = 2.
    job = start_job(spark, cfg, "wordcount", "elb", topic, PARAMS, engines=2, max_offsets=300,
                    policy_params={"band": (40.0, 60.0), "min_engines": 1, "max_engines": 8})
    events = []
    try:
        for phase, count in enumerate((600, 60, 300)):
            events += produce_events(cfg.kafka.bootstrap, topic, "wordcount", count,
                                     skew="zipf:1.0", keys=300, phase=phase)
            assert job.wait_for(len(events), 900), f"phase {phase}: job stuck"
    finally:
        job.stop()
    decisions = table_rows(spark, cfg, "decisions", job.run_id)
    actions = [d.action for d in sorted(decisions, key=lambda d: d.batch_id)]
    assert "scale_out" in actions and "scale_in" in actions
    assert actions.index("scale_out") < actions.index("scale_in")
    metrics = sorted(table_rows(spark, cfg, "metrics", job.run_id), key=lambda r: r.batch_id)
    engines = [m.engines for m in metrics]
    assert max(engines) > 2 and engines[-1] < max(engines)  # scale-in realized too
    assert job.totals.processed == job.totals.events_in == len(events)
    assert outputs(spark, cfg, job.run_id) == reference("wordcount", events, cfg.groups.count,
                                                        PARAMS)
