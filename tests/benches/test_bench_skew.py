"""bench/bench_skew.py: its pure helpers (the bound, the systems that apply, the checks) and a
smoke run of every kind of system on a tiny topic whose outputs must equal KG's. Timings are
never asserted (docs/design.md: benchmarks print, tests check)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import import_bench


def _bench():
    return import_bench("bench_skew")


def test_moving_skew_moves_half_the_keys_halfway() -> None:
    from keyshift.workloads.skew import SkewSchedule

    bs = _bench()
    sched = SkewSchedule.parse(bs.moving_skew(500))
    assert sched.exponent_at(0) == sched.exponent_at(59) == 1.5
    assert sched.rotation_at(10) == 0 and sched.rotation_at(bs.VIRTUAL_SPAN_S / 2) == 250


def test_systems_apply_by_operator_and_engines() -> None:
    bs = _bench()
    mine, peers = bs.systems_for("heavy", [2, 4], ["kg", "dlb-h@2", "dc", "wc", "apws-2", "jvm"])
    assert mine == [("kg", 2), ("dlb-h", 2), ("kg", 4)]  # dc/wc: heavy has no summary
    assert peers == ["apws-2"]  # the JVM count is word count's peer only
    mine, peers = bs.systems_for("wordcount", [2], ["kg", "dc", "wc", "jvm", "tws-200"])
    assert mine == [("kg", 2), ("dc", 2), ("wc", 2)] and peers == ["tws-200", "jvm"]
    # heavy's mergeable form splits (issue 42)
    mine, _ = bs.systems_for("heavy", [2], ["kg", "dlb-h", "dc", "wc"],
                             {"work_us": 300.0, "mergeable": True})
    assert mine == [("kg", 2), ("dlb-h", 2), ("dc", 2), ("wc", 2)]
    args = bs.parse_args(["--mergeable", "--skews", "zipf:2.0", "--engines", "2"])
    assert args.app_params("heavy") == {"work_us": 1000.0, "mergeable": True}


def test_parse_args_refuses_unknown_systems_and_a_missing_baseline() -> None:
    bs = _bench()
    with pytest.raises(SystemExit):
        bs.parse_args(["--systems", "kg,nope"])
    with pytest.raises(SystemExit):
        bs.parse_args(["--systems", "dlb-h,apws-2"])  # no kg: no ratio to take
    with pytest.raises(SystemExit):
        bs.parse_args(["--skews", "zipf:9"])
    args = bs.parse_args(["--quick", "--engines", "2"])
    assert (args.repeats, args.engines_list, args.app_params("heavy")) == (
        1, [2], {"work_us": 300.0})


def test_stage_bound_is_the_hot_group_or_the_mean_over_kg() -> None:
    """Two batches on 2 engines: the best key-granular plan's busiest engine (the hot group,
    or half the total) over KG's busiest, summed over batches."""
    from keyshift.plan import Plan

    bs = _bench()
    groups = 64
    kg = Plan.hashed(groups, 2).assignment
    a = np.zeros(groups)
    a[np.flatnonzero(kg == 0)[:3]] = [10, 10, 10]  # KG puts 30 on engine 0, nothing on 1
    b = np.zeros(groups)
    b[0] = 60.0  # one group holds everything: no plan helps
    topic = bs.Topic("t", "heavy", "x", 0, [a, b])
    kg_busiest = 30 + 60
    assert bs.stage_bound(topic, 2) == pytest.approx((15 + 60) / kg_busiest)
    # a split spreads even the one hot group: half the total per batch
    assert bs.split_bound(topic, 2) == pytest.approx((15 + 30) / kg_busiest)


def test_checks_find_lost_doubled_and_unread_events() -> None:
    bs = _bench()
    ref = {("k", 1, "heavy_match", "{}", "e1"), ("k", 2, "heavy_match", "{}", "e2")}

    def sample(rows: int) -> object:
        return bs.Sample("dlb-h", "heavy", "zipf:1.0", 2, [rows], [1.0], [], [], 0)

    s = sample(10)
    bs.check(s, set(ref), ref, 10)
    assert s.check == "ok"
    s = sample(10)
    bs.check(s, {next(iter(ref))}, ref, 10)
    assert s.check.startswith("MISMATCH: 1 of KG's 2")
    s = sample(9)
    bs.check(s, set(ref), ref, 10)
    assert s.check == "MISMATCH: read 9 of 10 events"
    s = sample(10)
    got = bs._as_set([("a", 1, "x", "{}", "e"), ("a", 1, "x", "{}", "e")], s)
    bs.check(s, got, ref, 10)
    assert s.check == "MISMATCH: 1 complex events doubled"


def test_the_jvm_count_is_checked_against_kgs_windows() -> None:
    bs = _bench()
    ref = {("w", 5, "word_count", '{"count":3,"window_s":1.0,"window_start":0}', "e5")}
    assert bs.check_jvm({(0, "w"): 3, (1000, "w"): 1}, ref) == "ok"
    assert bs.check_jvm({(0, "w"): 2}, ref).startswith("MISMATCH")


@pytest.mark.integration
@pytest.mark.slow
def test_every_kind_of_system_drains_a_tiny_topic_with_kgs_outputs(
        platform_config, spark, tmp_path) -> None:
    """keyshift KG and DLB-H, applyInPandasWithState and transformWithStateInPandas on one
    tiny heavy topic: every run reads every event and its complex events equal KG's."""
    bs = _bench()
    cfg = platform_config
    topic = bs.fill_topic(cfg, "heavy", "zipf:1.5", 600, 50, 200)
    assert len(topic.batch_loads) == 3 and sum(x.sum() for x in topic.batch_loads) == 600
    params = {"work_us": 5, "every": 4}
    kg, reference = bs.run_keyshift(spark, cfg, topic, "kg", 2, 200, params)
    assert reference and kg.outputs == len(reference)
    runs = [bs.run_keyshift(spark, cfg, topic, "dlb-h", 2, 200, params)]
    tasks = bs.TaskTimes(spark)
    for peer in ("apws-2", "tws-2"):
        runs.append(bs.run_peer(spark, cfg, topic, peer, 200, params, tmp_path, tasks, 1.0))
    for sample, got in [(kg, reference), *runs]:
        bs.check(sample, got, reference, 600)
        assert sample.check == "ok", (sample.system, sample.check)
        assert sum(sample.rows) == 600 and len(sample.rows) >= 3  # events in 3+ batches
    assert 0 < bs.stage_bound(topic, 2) <= 1.0
