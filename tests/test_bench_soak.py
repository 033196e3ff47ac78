"""The pure helpers of bench/bench_soak.py: the flatness rule that judges a soak, the skew
schedule that keeps DLB-H migrating, and the reader of the job's batches.jsonl between
samples. The soak itself is a bench (it prints, a person judges); these are fast."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def soak():
    sys.path.insert(0, str(ROOT / "bench"))  # as `python -m bench` runs it
    return importlib.import_module("bench_soak")


def test_flat_series_after_warmup_is_flat_even_if_it_climbed_during_warmup(soak):
    t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    rss = [200, 400, 600, 800, 1000, 1001, 999, 1002, 1000, 1001]  # JVM warming, then steady
    f = soak.flatness("driver_rss_mb", t, rss, warmup_min=5)
    assert f.verdict == "FLAT"
    assert f.samples == 6 and f.span_min == 5
    assert abs(f.slope_per_min) < 1


def test_slow_leak_is_caught_by_slope_times_span(soak):
    t = list(range(5, 31))
    leak = [1000 + 5 * (m - 5) for m in t]  # +5 MB/min: 125 MB over 25 min > 10 % of ~1062
    f = soak.flatness("driver_rss_mb", t, leak, warmup_min=5)
    assert f.verdict == "GROWS"
    assert f.slope_per_min == pytest.approx(5.0)
    assert f.slope_pct_of_mean == pytest.approx(100 * 5 / (1000 + 5 * 12.5))
    # the same slope on a series ten times larger is within the tolerance
    assert soak.flatness("x", t, [10 * 1000 + y - 1000 for y in leak], 5).verdict == "FLAT"
    shrink = [2000 - 20 * (m - 5) for m in t]
    assert soak.flatness("x", t, shrink, 5).verdict == "SHRINKS"


def test_one_spike_does_not_decide(soak):
    t = list(range(6, 16))
    p95 = [1.0] * 10
    p95[-1] = 1.6  # the last batch migrated: first-vs-last would say +60 %
    assert soak.flatness("batch_p95_s", t, p95, 5).verdict == "FLAT"


def test_by_design_and_too_few_samples(soak):
    t = [6, 7, 8, 9]
    f = soak.flatness("delta_parquet", t, [10, 20, 30, 40], 5, by_design=True)
    assert f.verdict == "grows by design" and f.slope_per_min == pytest.approx(10)
    assert "not judged" in soak.flatness_line(f, 0.1)
    few = soak.flatness("driver_rss_mb", [1, 2, 6, 7], [1, 2, 3, 4], 5)
    assert few.verdict.startswith("n/a (2 samples") and math.isnan(few.slope_per_min)
    assert soak.flatness_line(few, 0.1).startswith("FLATNESS driver_rss_mb: n/a")


def test_flatness_line_states_the_rule(soak):
    f = soak.flatness("driver_rss_mb", [6, 7, 8], [100, 101, 100], 5)
    line = soak.flatness_line(f, 0.1)
    assert line.startswith("FLATNESS driver_rss_mb: slope")
    assert "FLAT (rule: |slope| x 2.0 min <= 10% of the mean)" in line


def test_judge_marks_delta_and_counters_by_design(soak):
    samples = [soak.Sample(t_min=m, driver_rss_mb=500.0, worker_rss_mb=100.0,
                           state_durable_mb=1.0, state_cache_mb=0.5, staged_files=3,
                           delta_parquet=10 * m, delta_log_json=5 * m, batches=30 * m,
                           events=9000 * m, behind=400 + m % 2, batch_p95_s=0.8,
                           migrations=m // 3) for m in range(1, 11)]
    by_name = {f.series: f.verdict for f in soak.judge(samples, 5, 0.1)}
    assert by_name == {"driver_rss_mb": "FLAT", "worker_rss_mb": "FLAT",
                       "state_durable_mb": "FLAT", "state_cache_mb": "FLAT",
                       "staged_files": "FLAT", "batch_p95_s": "FLAT", "behind": "FLAT",
                       "delta_parquet": "grows by design", "delta_log_json": "grows by design",
                       "batches": "grows by design", "events": "grows by design",
                       "migrations": "grows by design"}


def test_shifting_skew_alternates_and_parses(soak):
    from keyshift.workloads.skew import SkewSchedule

    spec = soak.shifting_skew(600, 180, rotate=97)
    assert spec == "zipf:0.2@0,1.5@180,0.2@360,1.5@540+97"
    sched = SkewSchedule.parse(spec)
    assert [sched.exponent_at(t) for t in (0, 179, 180, 400, 599)] == [0.2, 0.2, 1.5, 0.2, 1.5]
    assert [sched.rotation_at(t) for t in (180, 599)] == [0, 97]  # another hot set
    with pytest.raises(ValueError, match="must be > 0"):
        soak.shifting_skew(600, 0)


def test_new_batches_reads_only_complete_new_lines(soak):
    a, b, c = ({"batch_id": i, "duration_s": 0.5 + i, "moved_groups": i % 2} for i in range(3))
    text = json.dumps(a) + "\n" + json.dumps(b) + "\n" + json.dumps(c)[:10]  # c half-written
    fresh, seen = soak.new_batches(text, 0)
    assert [r["batch_id"] for r in fresh] == [0, 1] and seen == 2
    text = "\n".join(json.dumps(r) for r in (a, b, c)) + "\n"
    fresh, seen = soak.new_batches(text, seen)
    assert [r["batch_id"] for r in fresh] == [2] and seen == 3
    assert soak.new_batches(text, seen) == ([], 3)
    assert soak.new_batches("", 0) == ([], 0)


def test_tree_and_delta_counts(soak, tmp_path):
    wh = tmp_path / "warehouse"
    log = wh / "events_out" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000.json").write_text("{}")
    (log / "00001.json").write_text("{}")
    (log / "00010.checkpoint.parquet").write_bytes(b"x")  # a log checkpoint, not data
    (wh / "events_out" / "part-0.parquet").write_bytes(b"abc")
    (wh / "events_out" / "batch=1").mkdir()
    (wh / "events_out" / "batch=1" / "part-1.parquet").write_bytes(b"abcd")
    (wh / "_engine_state" / "r1").mkdir(parents=True)  # not a table
    (wh / "_engine_state" / "r1" / "0.db").write_bytes(b"12345")
    (wh / "plain_folder").mkdir()  # no _delta_log: not a table
    assert soak.delta_files(wh) == {"events_out": {"parquet": 2, "log_json": 2}}
    assert soak.tree_bytes(wh / "_engine_state" / "r1") == (5, 1)
    assert soak.tree_bytes(wh / "missing") == (0, 0)
    cache = tmp_path / "spark-local" / "spark-1" / "userFiles-2" / "keyshift-engines" / "r1"
    cache.mkdir(parents=True)
    (tmp_path / "spark-local" / "spark-1" / "userFiles-2" / "keyshift-engines" / "r2").mkdir()
    assert cache in soak.cache_folders(tmp_path / "spark-local", "r1")


def test_sampler_reads_a_run_from_outside(soak, tmp_path):
    """One sample of a fake run (this test's own process as the job): the batches since the
    last sample give the p95, the counters add up, restored tasks count no events."""
    import os

    home, run = tmp_path / "home", "r1"
    wh = home / "warehouse"
    (wh / "_runs" / run / "staged" / "key_loads").mkdir(parents=True)
    (wh / "_runs" / run / "staged" / "key_loads" / "b1.parquet").write_bytes(b"x")
    (wh / "_engine_state" / run).mkdir(parents=True)
    (wh / "_engine_state" / run / "e0.db").write_bytes(b"y" * 2048)
    run_dir = home / "runs" / run
    run_dir.mkdir(parents=True)

    def batch(i, duration, moved, events):
        return json.dumps({"batch_id": i, "duration_s": duration, "moved_groups": moved,
                           "tasks": [{"events": events}, {"events": 99, "restore": True}]})

    (run_dir / "batches.jsonl").write_text(
        "\n".join(batch(i, 1.0, 0, 100) for i in range(3)) + "\n")
    sampler = soak.Sampler(os.getpid(), home, wh, run, rate=10.0)
    first = sampler.take(1.0)
    assert (first.batches, first.events, first.migrations) == (3, 300, 0)
    assert first.behind == 600 - 300 and first.batch_p95_s == pytest.approx(1.0)
    assert first.staged_files == 1 and first.state_durable_mb == pytest.approx(2 / 1024)
    assert first.driver_rss_mb > 0 and first.worker_rss_mb == 0
    with open(run_dir / "batches.jsonl", "a") as f:
        f.write(batch(3, 3.0, 5, 700) + "\n" + batch(4, 5.0, 0, 700) + "\n")
    second = sampler.take(2.0)
    assert (second.batches, second.events, second.migrations) == (5, 1700, 1)
    assert second.behind == 0  # ahead of the nominal rate: nothing behind
    assert second.batch_p95_s == pytest.approx(4.9)  # of batches 3 and 4 only
