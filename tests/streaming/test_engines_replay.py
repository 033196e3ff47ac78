"""Real data through the right application on the real stack: Dublin bus positions → traffic
anomaly, airline tweets → first story detection, both with DLB-H; the outputs equal the
single-operator reference over the same records."""

from __future__ import annotations

import itertools

import pytest
from engines_support import job_config, new_topic, outputs, reference, start_job

from keyshift.workloads.replay import airline_tweets, dublin_bus

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIMIT = 1200
CASES = {
    "traffic": (dublin_bus, "dublin_siri_20130131_first10k.csv",
                {"min_buses": 1, "streak": 1, "near_m": 1000.0, "high_delay_s": 60.0}),
    "fsd": (airline_tweets, "airline_tweets_feb2015.csv", {}),
}


def test_replay_real_data(spark, platform_config, real_data) -> None:
    from keyshift.streaming.producer import connect, replay

    cfg = job_config(platform_config, theta=10.0)
    jobs, inputs = {}, {}
    for app, (reader, name, params) in CASES.items():
        events = list(itertools.islice(reader(real_data / name), LIMIT))
        topic = new_topic(cfg.kafka.bootstrap)
        stats = replay(connect(cfg.kafka.bootstrap), topic, events, speedup=1e12, keep_ts=True)
        assert stats.good == len(events) == LIMIT
        inputs[app] = events
        jobs[app] = start_job(spark, cfg, app, "dlb-h", topic, params, engines=4,
                              max_offsets=400)
    try:
        for job in jobs.values():
            assert job.wait_for(LIMIT, 1200), f"{job.app}: took {job.totals.records}"
    finally:
        for job in jobs.values():
            job.stop()
    for app, job in jobs.items():
        expected = reference(app, inputs[app], cfg.groups.count, CASES[app][2])
        assert expected, f"{app}: the replay must produce complex events"
        assert outputs(spark, cfg, job.run_id) == expected
        assert job.totals.processed == job.totals.events_in == LIMIT
