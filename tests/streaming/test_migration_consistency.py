"""dlb §4's consistency criterion on the real stack: the same skewed input, once with KG and once
with DLB-H (which migrates groups with their state while the input flows), gives the same set
of complex events for every application, equal to the single-operator reference; and events
in = processed + dead-lettered."""

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

APPS = {
    "fsd": {},
    "traffic": {"min_buses": 1, "streak": 1, "near_m": 300.0},
    "clicks": {"length": 3},
    "wordcount": {"window_s": 1.0},
}


@pytest.mark.parametrize("app", sorted(APPS))
def test_kg_and_dlb_h_give_the_same_complex_events(
    spark, platform_config, app: str
) -> None:
    cfg = job_config(platform_config, theta=10.0)
    topic = new_topic(cfg.kafka.bootstrap)
    total, bad = 900, 3
    events = produce_events(cfg.kafka.bootstrap, topic, app, total,
                            skew="zipf:0.2@0,1.5@250", keys=200, malformed=bad)
    params = APPS[app]
    jobs = [start_job(spark, cfg, app, policy, topic, params, engines=4, max_offsets=300)
            for policy in ("kg", "dlb-h")]
    try:
        for job in jobs:
            assert job.wait_for(total, 1200), f"{job.opt.policy}: took {job.totals.records}"
    finally:
        for job in jobs:
            job.stop()
    kg, dlb = jobs
    expected = reference(app, events, cfg.groups.count, params)
    assert expected, "the input must produce complex events"
    assert outputs(spark, cfg, kg.run_id) == expected
    assert outputs(spark, cfg, dlb.run_id) == expected
    assert dlb.totals.moved_groups > 0, "DLB-H should have moved groups under the skew"
    assert kg.totals.moved_groups == 0
    for job in jobs:
        t = job.totals
        assert t.records == t.events_in + t.dead_letter == total
        assert t.dead_letter == bad and t.processed == t.events_in
        assert len(table_rows(spark, cfg, "dead_letter", job.run_id)) == bad
