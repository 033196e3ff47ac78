"""The job feeds its measured migrations back (issue 27, point 2): every migration DLB-H
realizes under skew is kept in the run's control store (Delta ``migration_costs``) with its
moved groups, bytes, pause and input rate, where a restarted loop's learned RC reads it."""

from __future__ import annotations

import pytest
from engines_support import job_config, new_topic, produce_events, start_job

from keyshift.control import MemoryControlStore
from keyshift.elastic.reconfiguration import ReconfigurationCost

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_every_migration_of_a_run_is_measured_into_the_control_store(spark, platform_config):
    from keyshift.streaming.control_store import ControlLog

    cfg = job_config(platform_config, theta=10.0)
    topic = new_topic(cfg.kafka.bootstrap)
    total = 900
    produce_events(cfg.kafka.bootstrap, topic, "wordcount", total,
                   skew="zipf:0.2@0,1.5@250", keys=200)
    job = start_job(spark, cfg, "wordcount", "dlb-h", topic, {"window_s": 1.0}, engines=4,
                    max_offsets=300)
    try:
        assert job.wait_for(total, 1200), f"took {job.totals.records}"
    finally:
        job.stop()
    assert job.totals.migrations > 0, "DLB-H should have moved groups under the skew"
    measured = ControlLog(spark, cfg, job.run_id).migration_costs()
    assert len(measured) == job.totals.migrations
    assert sum(m.groups for m in measured) == job.totals.moved_groups
    assert sum(m.bytes for m in measured) == job.totals.moved_bytes
    assert all(not m.scale and m.pause_s >= 0 and m.rate > 0 for m in measured)
    # what a restarted loop with planner.rc_source = "learned" starts from
    store = MemoryControlStore()
    for m in measured:
        store.write_migration_cost(m)
    cost = ReconfigurationCost(10.0, 1.0, 0.05).observe(store.migration_costs())
    assert cost.pause_fit is not None and cost.rc(100.0) == 10.0  # no change of N yet
