"""The pure helpers of bench/bench_soak.py: the flatness rule that judges a soak, the skew
schedule that keeps DLB-H migrating, and the reader of the job's batches.jsonl between
samples. The soak itself is a bench (it prints, a person judges); these are fast."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
from conftest import import_bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak():
    return import_bench("bench_soak")


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
    samples = [soak.Sample(t_min=m, driver_rss_mb=500.0, driver_py_rss_mb=200.0,
                           jvm_rss_mb=300.0, jvm_heap_used_mb=100.0 + 50 * m,
                           jvm_heap_committed_mb=1000.0, jvm_metaspace_mb=200.0,
                           worker_rss_mb=100.0,
                           state_durable_mb=1.0, state_cache_mb=0.5, staged_files=3,
                           delta_parquet=10 * m, delta_log_json=5 * m, batches=30 * m,
                           events=9000 * m, produced=9400 * m, behind=400 + m % 2,
                           lag_records=math.nan if m < 7 else 300.0,
                           producer_short=60 * m, batch_p95_s=0.8,
                           migrations=m // 3) for m in range(1, 11)]
    by_name = {f.series: f.verdict for f in soak.judge(samples, 5, 0.1)}
    assert by_name == {"driver_rss_mb": "FLAT", "driver_py_rss_mb": "FLAT",
                       "jvm_rss_mb": "FLAT", "jvm_heap_used_mb": "GROWS",
                       "jvm_heap_committed_mb": "FLAT", "jvm_metaspace_mb": "FLAT",
                       # measured with --nmt and --live-heap only
                       "jvm_nonheap_mb": "n/a (0 samples after the warm-up, need 3)",
                       "jvm_live_heap_mb": "n/a (0 samples after the warm-up, need 3)",
                       "worker_rss_mb": "FLAT",
                       "state_durable_mb": "FLAT", "state_cache_mb": "FLAT",
                       "staged_files": "FLAT", "batch_p95_s": "FLAT", "behind": "FLAT",
                       "lag_records": "FLAT",  # judged on the samples that have it
                       "delta_parquet": "grows by design", "delta_log_json": "grows by design",
                       "batches": "grows by design", "events": "grows by design",
                       "produced": "grows by design", "producer_short": "grows by design",
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


def test_sampler_reads_a_run_from_outside(soak, tmp_path, request):
    """One sample of a fake run (a childless sleeping python as the job, not this test's own
    process, which may hold a shared Spark session's JVM and workers): the batches since the
    last sample give the p95, the counters add up, restored tasks count no events."""
    import subprocess
    import sys

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
    class Ends:  # the topic's end offsets as the producer advances them
        def __init__(self):
            self.values = iter([500, 1900])

        def offsets(self):  # two partitions, as streaming.kafka_client.TopicEnds reports them
            total = next(self.values)
            return {0: total - total // 3, 1: total // 3}

    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    request.addfinalizer(lambda: (job.kill(), job.wait()))
    sampler = soak.Sampler(job.pid, home, wh, run, rate=10.0, ends=Ends())
    first = sampler.take(1.0)
    assert (first.batches, first.events, first.migrations) == (3, 300, 0)
    assert first.produced == 500 and first.behind == 500 - 300
    assert first.producer_short == 600 - 500  # the producer below its nominal 10/s
    assert first.batch_p95_s == pytest.approx(1.0) and math.isnan(first.lag_records)
    assert first.staged_files == 1 and first.state_durable_mb == pytest.approx(2 / 1024)
    assert first.driver_py_rss_mb > 0 and first.worker_rss_mb == 0
    assert first.jvm_rss_mb == 0 and math.isnan(first.jvm_heap_used_mb)  # no JVM here
    assert first.driver_rss_mb == first.driver_py_rss_mb + first.jvm_rss_mb
    with open(run_dir / "batches.jsonl", "a") as f:
        f.write(batch(3, 3.0, 5, 700) + "\n" + batch(4, 5.0, 0, 700) + "\n")
    second = sampler.take(2.0)
    assert (second.batches, second.events, second.migrations) == (5, 1700, 1)
    assert second.behind == 1900 - 1700 and second.producer_short == 1200 - 1900  # ahead
    assert second.batch_p95_s == pytest.approx(4.9)  # of batches 3 and 4 only


def test_xmx_and_heap_cap_text(soak):
    assert soak.xmx_bytes(["java", "-Xmx2g", "-cp", "x"]) == 2 * 1024 ** 3
    assert soak.xmx_bytes(["-Xmx512m", "-Xmx768M"]) == 768 * 1024 ** 2  # the last one wins
    assert soak.xmx_bytes(["-Xmx1048576"]) == 1048576 and soak.xmx_bytes(["-Xms1g"]) is None
    args = ["java", "-Xmx2g", "org.apache.spark.deploy.SparkSubmit", "--conf",
            "spark.driver.memory=2g", "pyspark-shell"]
    assert soak.heap_cap_text(args) == "-Xmx 2,048 MB (spark.driver.memory=2g)"
    assert soak.heap_cap_text(["java"]).startswith("no -Xmx: the heap may grow")


def test_jstat_heap_columns(soak):
    text = ("    S0C    S1C    S0U    S1U      EC       EU        OC         OU       MC     "
            "MU    CCSC   CCSU   YGC     YGCT    FGC    FGCT     CGC    CGCT     GCT   \n"
            "    0.0 4096.0    0.0 4096.0 530432.0  56320.0  520192.0   235802.0 189440.0 "
            "186998.1 24896.0 23704.8     36    1.005     0    0.000    12    0.074    1.079\n")
    gc = soak.parse_jstat_gc(text)
    used, committed, metaspace = soak.heap_mb(gc)
    assert used == pytest.approx((4096 + 56320 + 235802) / 1024)
    assert committed == pytest.approx((4096 + 530432 + 520192) / 1024)
    assert metaspace == pytest.approx(186998.1 / 1024)
    with pytest.raises(ValueError, match="not jstat -gc output"):
        soak.parse_jstat_gc("12345 not found")
    assert all(math.isnan(v) for v in soak.jvm_heap(None))


def test_lag_gauge_of_the_run_from_the_exposition(soak):
    from prometheus_client import generate_latest

    from keyshift.streaming.live_metrics import LiveMetrics

    live = LiveMetrics("r1", window_s=10)
    other = LiveMetrics("r2", live.families)
    text = generate_latest(live.registry).decode()
    assert math.isnan(soak.gauge_value(text, "keyshift_kafka_lag_records", "r1"))  # not yet
    live.observe_progress({"sources": [{"endOffset": '{"t": {"0": 10, "1": 5}}',
                                        "latestOffset": '{"t": {"0": 25, "1": 5}}'}]})
    other.observe_progress({"sources": [{"endOffset": {"t": {"0": 1}},
                                         "latestOffset": {"t": {"0": 99}}}]})
    text = generate_latest(live.registry).decode()
    assert soak.gauge_value(text, "keyshift_kafka_lag_records", "r1") == 15
    assert soak.gauge_value(text, "keyshift_kafka_lag_records", "r2") == 98


def test_distinct_ports(soak):
    handed = iter([5, 5, 7, 5, 9])
    assert soak.distinct_free_ports(lambda: next(handed), 3) == [5, 7, 9]


def test_trace_summary_reads_the_hook_reports(soak, tmp_path):
    assert "no report" in soak.trace_summary(tmp_path)[0]
    mb = 1024 * 1024
    report = {"elapsed_s": 600, "rss_bytes": 200 * mb, "rss_growth_bytes": 12 * mb,
              "traced_bytes": 50 * mb, "traced_growth_bytes": 10 * mb,
              "pyarrow_allocated_bytes": 0, "objects": 1000, "objects_growth": 400,
              "top_sites": [{"size_diff": 10 * mb, "count_diff": 400, "size": 11 * mb,
                             "traceback": ['  File "job.py", line 7', "    keep.append(x)",
                                           '  File "run.py", line 3', "    job.batch()"]}],
              "top_types": [{"type": "BatchReport", "count_diff": 400, "count": 450}]}
    (tmp_path / "trace-001.json").write_text(json.dumps(report))
    lines = soak.trace_summary(tmp_path)
    assert lines[0].startswith("python trace trace-001.json at 10.0 min: RSS 200.0 MB "
                               "(+12.0 since the baseline), traced 50.0 MB (+10.00)")
    assert 'File "job.py", line 7 <- File "run.py", line 3' in lines[2]
    assert lines[-1] == "      +400  BatchReport (450)"


def test_python_trace_hook_finds_what_the_job_keeps(soak, tmp_path):
    """The soak's sitecustomize hook in a process started as ``... run`` (as the job is): its
    report names the line that keeps memory; it takes its variable out of the environment,
    so the JVM and the Python workers the job starts do not trace; a process started
    otherwise (a pyspark worker) does nothing."""
    import os
    import subprocess

    job = tmp_path / "job.py"
    job.write_text(
        "import os, sys, time\n"
        "kept = []\n"
        "print(os.environ.get('SOAK_TRACE_PYTHON'), flush=True)\n"
        "deadline = time.monotonic() + float(sys.argv[3])\n"
        "while time.monotonic() < deadline and not os.path.exists(sys.argv[2]):\n"
        "    kept.append([0] * 8192)  # what the report must name\n"
        "    time.sleep(0.01)\n")
    trace = tmp_path / "trace"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bench" / "soak_hook"),
           "SOAK_TRACE_PYTHON": f"{trace},0.3,0.5"}
    out = subprocess.run([sys.executable, str(job), "run", str(trace / "trace-001.json"),
                          "30"], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "None"  # not passed on to the processes the job starts
    report = json.loads((trace / "trace-001.json").read_text())
    assert report["traced_growth_bytes"] > 1024 * 1024 and report["objects_growth"] > 10
    assert "kept.append([0] * 8192)" in "\n".join(report["top_sites"][0]["traceback"])
    assert report["top_types"][0]["type"] == "list"  # gc counts containers only
    assert report["top_types"][0]["count_diff"] > 10
    other = tmp_path / "other"
    subprocess.run([sys.executable, str(job), "worker", str(other / "never"), "1"],
                   env={**env, "SOAK_TRACE_PYTHON": f"{other},0,0.1"}, timeout=60,
                   capture_output=True, check=False)
    assert not other.exists()


NMT_SUMMARY = """30958:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=7842514KB, committed=484730KB
       malloc: 10122KB #61012
       mmap:   reserved=7832392KB, committed=474608KB

-                 Java Heap (reserved=6172672KB, committed=397312KB)
                            (mmap: reserved=6172672KB, committed=397312KB)

-                     Class (reserved=1048783KB, committed=1359KB)
                            (classes #2499)
                            (  Metadata:   )
                            (    reserved=65536KB, committed=7936KB)

-                    Thread (reserved=19506KB, committed=890KB)
                            (stack: reserved=19456KB, committed=840KB)

-                        GC (reserved=267162KB, committed=52842KB)
                            (mmap: reserved=262036KB, committed=47716KB)
"""


def test_native_memory_summary_per_category(soak):
    """jcmd VM.native_memory summary (JDK 17's text): committed MB per category, the first
    line of each (not its mmap / metadata sub-lines), and what is outside the heap."""
    got = soak.parse_nmt_summary(NMT_SUMMARY)
    assert got == pytest.approx({"Total": 484730 / 1024, "Java Heap": 397312 / 1024,
                                 "Class": 1359 / 1024, "Thread": 890 / 1024,
                                 "GC": 52842 / 1024})
    assert soak.nonheap_mb(got) == pytest.approx((484730 - 397312) / 1024)
    assert math.isnan(soak.nonheap_mb({}))
    with pytest.raises(ValueError, match="native memory"):
        soak.parse_nmt_summary("Native memory tracking is not enabled")


def test_native_growth_names_the_category_that_grows(soak):
    def sample(t, native):
        s = soak.Sample(**{f.name: 0 for f in dataclasses.fields(soak.Sample)
                           if f.name not in ("tables", "jvm_nonheap_mb", "native")})
        return dataclasses.replace(s, t_min=t, native=native)

    samples = [sample(t, {"Total": 500 + 3 * t, "GC": 50.0, "Other": 20 + 3 * t})
               for t in range(30)]
    lines = soak.native_growth(samples, warmup_min=5, tolerance=0.10)
    assert lines[0].startswith("NMT Other: +3.000 MB/min") and lines[0].endswith("GROWS")
    assert lines[1].startswith("NMT GC: +0.000 MB/min") and lines[1].endswith("FLAT")
    assert len(lines) == 2  # the total is not a category


def test_live_heap_is_what_the_last_full_gc_left(soak, tmp_path):
    """The JVM's own -Xlog:gc line of a forced full GC: the "after" figure of the last one."""
    log = tmp_path / "gc-123.log"
    assert math.isnan(soak.last_full_gc_mb(log))
    log.write_text(
        "[5.2s][info][gc] GC(0) Pause Full (Diagnostic Command) 834M->245M(1899M) 9.9ms\n"
        "[6.0s][info][gc] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 500M->260M(1899M)\n"
        "[9.1s][info][gc] GC(2) Pause Full (System.gc()) 700M->251M(1200M) 80.1ms\n"
        "[9.5s][info][gc] GC(3) Pause Young (Normal) (G1 Evacuation Pause) 400M->255M(1200M)\n")
    assert soak.last_full_gc_mb(log) == 251.0
    (tmp_path / "gc-124.log").write_text("[1.0s][info][gc] Using G1\n")
    assert math.isnan(soak.last_full_gc_mb(tmp_path / "gc-124.log"))
