"""bench/bench_elastic_cluster.py's pure helpers: what each system runs with, core-seconds
and lag from the sampled series, the output check and the targets' words."""

from __future__ import annotations

import pytest

from bench.bench_elastic_cluster import (
    APWS_DA,
    FIXED_READS,
    PLANNER,
    RUN_ON,
    SPARK_DA,
    STATIC_MAX,
    STATIC_MIN,
    Pregenerated,
    RunResult,
    Samples,
    bound_line,
    check_outputs,
    integrate,
    lag_stats,
    medians,
    reaction,
    scale_actions,
    system_settings,
    table_text,
    target_lines,
)
from keyshift.config import load_config
from keyshift.streaming.executors import resources_mode


def test_each_system_is_a_valid_configuration_on_a_cluster() -> None:
    modes = {}
    admission = {}
    for system in (PLANNER, FIXED_READS, STATIC_MAX, STATIC_MIN, SPARK_DA, "spark-da-idle5",
                   APWS_DA):
        policy, engines, settings = system_settings(system, workers=3)
        cfg = load_config(env={}, spark={"master": "spark://127.0.0.1:7077",
                                         **settings.get("spark", {})},
                          **{k: v for k, v in settings.items() if k != "spark"})
        assert cfg.engines.min <= engines <= cfg.engines.max == 3
        modes[system] = (resources_mode(cfg), cfg.planner.enabled, engines)
        admission[system] = cfg.spark.admission
    assert modes[PLANNER] == modes[FIXED_READS] == ("executors", True, 1)
    # issue 56's before: every batch may read max_offsets_per_trigger
    assert admission[FIXED_READS] == "off" and admission[PLANNER] == "auto"
    assert modes[STATIC_MAX] == ("executors", False, 3)
    assert modes[STATIC_MIN] == ("executors", False, 1)
    assert modes[SPARK_DA] == modes[APWS_DA] == ("fixed", False, 3)
    with pytest.raises(ValueError, match="unknown system"):
        system_settings("nope", 2)


def test_core_seconds_lag_and_scale_actions_from_the_samples() -> None:
    s = Samples(t=[0, 1, 2, 3, 4], cores=[1, 1, 2, 2, 1], sent=[0, 100, 300, 600, 700],
                taken=[0, 100, 100, 300, 700])
    assert integrate(s.t, s.cores) == pytest.approx(6.0)  # the last sample holds no time
    lag_max, above = lag_stats(s, lambda t: 10.0, window_s=10.0)  # one window = 100 events
    assert lag_max == 300 and above == pytest.approx(2.0)  # t=2 (200) and t=3 (300)
    assert scale_actions(s.cores) == 2


def result(system: str, repeat: int = 0, **kw) -> RunResult:
    base = dict(system=system, repeat=repeat, core_seconds=100.0, seconds=50.0, cores_min=1,
                cores_max=2, events_sent=1000, events_in=1000, complex_events=60,
                outputs_digest="abc", lag_max=10.0, lag_seconds=0.0, batch_p95_s=2.0,
                scale_actions=2, keyshift_core_seconds=99.0)
    return RunResult(**{**base, **kw})


def test_outputs_are_checked_against_static_max_of_the_same_repeat() -> None:
    rs = [result(STATIC_MAX), result(PLANNER), result(SPARK_DA, outputs_digest="zzz"),
          result(STATIC_MIN, events_in=990)]
    check_outputs(rs)
    assert [r.check[:8] for r in rs] == ["ok", "ok", "MISMATCH", "MISMATCH"]
    assert "990 events in of 1,000 sent" in rs[3].check


def test_targets_say_met_or_missed() -> None:
    med = medians([result(STATIC_MAX, core_seconds=200.0, lag_seconds=5.0),
                   result(PLANNER, core_seconds=140.0, lag_seconds=12.0),
                   result(SPARK_DA, core_seconds=120.0, lag_seconds=30.0)])
    lines = target_lines(med)
    assert "0.70x (target <= 0.75x: met)" in lines[0] and "(met)" in lines[0]
    assert "keyshift-planner / spark-da core-seconds 1.17x" in lines[1]
    assert "missed" in lines[1]
    assert "| keyshift-planner | 1 | 140 |" in table_text(med)
    # each planner that ran is judged on its own line
    med[RUN_ON] = dict(med[PLANNER], core_seconds=150.0)
    assert any(x.startswith("keyshift-planner-run-on / static-max core-seconds 0.75x")
               for x in target_lines(med))


def test_pregenerated_events_are_the_same_for_every_system_stamped_when_sent() -> None:
    events = [{"id": f"e{i}", "key": "k", "word": "w", "ts": 0} for i in range(5)]
    gen = Pregenerated(events)
    a = gen.batch(3, 0.0, 1000)
    b = gen.batch(3, 1.0, 2000)
    assert [e["id"] for e in a + b] == ["e0", "e1", "e2", "e3", "e4"]
    assert a[0]["ts"] == 1000 and b[0]["ts"] == 2000 and events[0]["ts"] == 0


def test_the_planners_reaction_bounds_its_lag() -> None:
    """A rise at 10 s to 70/s: the core comes at 30 s with 400 events behind; from 60 s the
    job takes 75/s, so the backlog drains in 400 / 5 = 80 s; at 70/s it would never."""
    t = list(range(0, 121))
    cores = [1 if x < 30 else 2 for x in t]
    sent = [20 * x if x < 10 else 200 + 70 * (x - 10) for x in t]
    taken = [min(s_, 20 * x if x < 30 else 600 + 75 * (x - 30)) for x, s_ in zip(t, sent)]
    taken[30] = sent[30] - 400
    s = Samples(t=[float(x) for x in t], cores=cores, sent=sent, taken=taken)
    r = reaction(s, ((0.0, 20.0), (10.0, 70.0), (100.0, 20.0)))
    assert r["reaction_s"] == 20 and r["backlog"] == 400 and r["peak"] == 70
    assert r["capacity"] == pytest.approx(75.0) and r["drain_s"] == pytest.approx(80.0)
    assert reaction(s, ((0.0, 20.0),)) is None  # no rise
    flat = Samples(t=s.t, cores=[1] * len(t), sent=sent, taken=taken)
    assert reaction(flat, ((0.0, 20.0), (10.0, 70.0))) is None  # no scale-out
    [line] = bound_line([result(PLANNER, reaction=r), result(STATIC_MAX)])
    assert "keyshift-planner added its core 20 s after the rise, 400 events behind" in line
    assert "drains in ~80 s" in line
    assert bound_line([result(STATIC_MAX)]) == []
    both = bound_line([result(PLANNER, reaction=r), result(RUN_ON, reaction=r)])
    assert [x.split()[1] for x in both] == [PLANNER, RUN_ON]
