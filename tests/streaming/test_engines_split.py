"""A hot key split over several engines in the real job (dc, wc): on a Zipf 1.5 word count the
complex events equal key grouping's on the same topic, every event is counted once, the engine
stage keeps one task per engine, and an operator that cannot be split is refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from engines_support import (
    job_config,
    job_env,
    new_topic,
    outputs,
    produce_events,
    records_in_log,
    reference,
    run_job,
    table_rows,
    wait_until,
)

from keyshift.groups import group_of
from keyshift.policies import PolicyInputError
from keyshift.streaming.engine_state import DurableState
from keyshift.streaming.job import JobOptions, StreamJob

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAMS = {"window_s": 1.0}


def _zipf_words(cfg, total: int, **kw) -> tuple[str, list[dict]]:
    """A new topic of ``total`` Zipf 1.5 word-count records; the good events sent."""
    topic = new_topic(cfg.kafka.bootstrap)
    return topic, produce_events(cfg.kafka.bootstrap, topic, "wordcount", total,
                                 skew="zipf:1.5", **kw)


def _batches(job) -> list[dict]:
    return [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]


def test_dc_splits_the_hot_word_and_its_counts_equal_key_grouping(spark, platform_config):
    cfg = job_config(platform_config)
    topic, events = _zipf_words(cfg, 1500, keys=300, malformed=5)
    kg = run_job(spark, cfg, "wordcount", "kg", topic, records=1500, params=PARAMS,
                 engines=4, max_offsets=250)
    dc = run_job(spark, cfg, "wordcount", "dc", topic, records=1500, params=PARAMS,
                 engines=4, max_offsets=250)

    # every event once: in = processed + dead-lettered
    assert dc.totals.records == 1500 and dc.totals.dead_letter == 5
    assert dc.totals.processed == dc.totals.events_in == 1495

    # the hot word was split after the first window (which has no loads to find it by): its
    # events, all in one Kafka partition, were summarized by several input tasks (the large
    # partition's offsets cut into one task per engine at least); the engine stage is still
    # one task per engine, task index = engine, one stage, and it applied what was summarized
    lines = _batches(dc)
    split = [b for b in lines if b["split_groups"]]
    assert split and lines[0]["split_groups"] == []
    hottest = Counter(group_of(e["key"], cfg.groups.count) for e in events).most_common(1)[0][0]
    assert all(b["split_groups"][0] == hottest for b in split)
    assert max(sum(str(hottest) in t["groups"] for t in b["split_tasks"]) for b in split) >= 2
    for b in lines:
        assert sorted(t["engine"] for t in b["tasks"]) == list(range(b["slots"]))
        assert all(t["partition"] == t["engine"] for t in b["tasks"])
        assert len({t["stage"] for t in b["tasks"]}) == 1
        assert sum(t["events"] for t in b["split_tasks"]) == \
            sum(t["summarized"] for t in b["tasks"])

    # the hot group's state has one owner, its home engine (key grouping's)
    durable = DurableState(dc.state_uri)
    plan = dc.controller.plan_for(dc.totals.last_batch)
    owners: dict[int, int] = {}
    for e in range(plan.slots):
        for g in durable.read(e, dc.totals.last_batch):
            assert g not in owners
            owners[g] = e
    assert all(plan.assignment[g] == e for g, e in owners.items())
    assert set(split[-1]["split_groups"]) <= set(owners)

    # the key loads still count each group's events once (the next window's split reads them)
    loads = table_rows(spark, cfg, "key_loads", dc.run_id)
    assert sum(r.load for r in loads) == 1495

    # the complex events: exactly key grouping's, which are the reference's
    expected = reference("wordcount", events, cfg.groups.count, PARAMS)
    assert outputs(spark, cfg, kg.run_id) == expected
    assert outputs(spark, cfg, dc.run_id) == expected


def test_wc_splits_the_hot_words_with_the_same_counts(spark, platform_config):
    cfg = job_config(platform_config)
    topic, events = _zipf_words(cfg, 900, keys=200, seed=5)
    wc = run_job(spark, cfg, "wordcount", "wc", topic, records=900, params=PARAMS,
                 engines=3, max_offsets=300)
    assert any(b["split_groups"] for b in _batches(wc))
    assert outputs(spark, cfg, wc.run_id) == reference("wordcount", events, cfg.groups.count,
                                                       PARAMS)


def test_wc_splits_the_mergeable_heavy_rules_hot_key_with_key_groupings_outputs(
        spark, platform_config):
    """heavy's mergeable form (issue 42): on Zipf 2.0 (the hottest key over half the load)
    wc splits its hot key, the input tasks do the split events' work, and the complex events
    are those of processing every event one by one."""
    cfg = job_config(platform_config)
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "heavy", 900, skew="zipf:2.0",
                            keys=200, seed=7)
    params = {"work_us": 20, "mergeable": True}
    wc = run_job(spark, cfg, "heavy", "wc", topic, records=900, params=params, engines=2,
                 max_offsets=300)
    lines = _batches(wc)
    assert any(b["split_groups"] for b in lines)
    assert sum(t["summarized"] for b in lines for t in b["tasks"]) > 0
    assert outputs(spark, cfg, wc.run_id) == reference("heavy", events, cfg.groups.count,
                                                       params)


@pytest.mark.parametrize("app", ["fsd", "traffic", "clicks"])
def test_dc_with_an_operator_that_cannot_merge_is_refused_in_one_line(app, spark,
                                                                      platform_config):
    with pytest.raises(PolicyInputError) as err:
        StreamJob(spark, platform_config, JobOptions(app=app, policy="dc", topic="unused"))
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"policy: dc splits a hot key's events over several engines, but "
                           f"operator '{app}'")


def test_dc_killed_mid_batch_restarts_with_the_same_split_and_counts(spark, platform_config,
                                                                      tmp_path):
    """SIGKILL while the engines (and the split stage) of batch 3 run; the restarted process
    reads the window before from ``key_loads``, splits the re-executed batch again and the
    outputs are an uninterrupted run's: every record once, no batch recorded twice."""
    cfg = job_config(platform_config)
    total = 1200
    topic, events = _zipf_words(cfg, total, keys=300, seed=7)
    run_id = f"split-crash-{topic}"
    log = tmp_path / "job.log"

    def start(**env: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "keyshift.streaming.commands.run", "--app", "wordcount",
             "--policy", "dc", "--run-id", run_id, "--topic", topic, "--engines", "4",
             "--max-offsets", "200", "--params", json.dumps(PARAMS)],
            env=job_env(cfg, **env), stdout=open(log, "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)

    first = start(KS_FAULT_KILL_AT="engines@3")
    assert first.wait(timeout=1200) == -signal.SIGKILL, log.read_text()[-3000:]
    second = start()
    try:
        assert wait_until(lambda: second.poll() is not None or records_in_log(log) >= total,
                          1500), "restarted job did not finish the input"
        assert second.poll() is None, log.read_text()[-3000:]
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=120)

    metrics = table_rows(spark, cfg, "metrics", run_id)
    assert sorted(r.batch_id for r in metrics) == sorted({r.batch_id for r in metrics})
    assert sum(r.events_in for r in metrics) == total
    again = [json.loads(x) for x in (cfg.home_path / "runs" / run_id / "batches.jsonl")
             .read_text().splitlines()]
    assert any(b["batch_id"] == 3 and b["split_groups"] for b in again)
    assert outputs(spark, cfg, run_id) == reference("wordcount", events, cfg.groups.count,
                                                    PARAMS)
