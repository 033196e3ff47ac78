"""Smoke test of bench/bench_stream.py: its plain Spark peers on a tiny topic compute the
reference outputs and report well-formed numbers; its keyshift-side helpers build the child's
configuration and read its one JSON object. Timings are never asserted (docs/design.md:
benchmarks print, tests check)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_stream", ROOT / "bench" / "bench_stream.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_stream"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_config_env_gives_the_child_exactly_the_bench_config():
    from keyshift.config import load_config

    bs = _bench()
    over = {"home": "/tmp/x", "kafka": {"port": 19999, "controller_port": 19998},
            "spark": {"master": "local[2]", "shuffle_partitions": 3, "ui": False}}
    env = bs.config_env(over, base={"PATH": "/bin", "KEYSHIFT_KAFKA__PORT": "1",
                                    "KEYSHIFT_CACHE": "/c"})
    assert env["KEYSHIFT_KAFKA__PORT"] == "19999"
    assert env["KEYSHIFT_CACHE"] == "/c" and env["PATH"] == "/bin"
    cfg = load_config(env=env)
    assert (cfg.home, cfg.kafka.port, cfg.kafka.controller_port) == ("/tmp/x", 19999, 19998)
    assert (cfg.spark.shuffle_partitions, cfg.spark.ui) == (3, False)


def test_parse_run_json_takes_the_final_object_after_progress_lines():
    bs = _bench()
    out = ('batch 0: 10 events\n{"not": "it"}\n{\n  "run_id": "r", "events_in": 10,\n'
           '  "busy_s": 2.0, "batches": 1, "batch_p50_s": 2.0, "batch_p95_s": 2.0\n}\n')
    assert bs.parse_run_json(out)["run_id"] == "r"
    with pytest.raises(ValueError, match="busy_s"):
        bs.parse_run_json('{"events_in": 1, "batches": 1}\n')
    with pytest.raises(ValueError, match="no JSON"):
        bs.parse_run_json("nothing here\n")


def test_checks_catch_a_wrong_count_and_a_lost_complex_event():
    bs = _bench()
    ref = bs.Reference(window_s=1.0, events=3)
    ref.counts.update({(0, "a"): 2, (1000, "a"): 1})
    ref.complex.add(("a", 1500, "word_count", "{}", "p0-2"))
    assert bs.check_native({(0, "a"): 2}, ref, watermark_ms=1000) == "ok"
    assert bs.check_native({(0, "a"): 3}, ref, watermark_ms=1000).startswith("MISMATCH")
    assert bs.check_native({}, ref, watermark_ms=1000).startswith("MISMATCH")
    assert bs.check_complex([("a", 1500, "word_count", "{}", "p0-2")], ref) == "ok"
    assert bs.check_complex([], ref).startswith("MISMATCH")


def _well_formed(s, events: int, batch: int) -> None:
    st = s.stats()
    assert st["events"] == events and not s.bounded
    assert st["batches"] == len(s.rows) == len(s.durations_s)
    # Spark splits maxOffsetsPerTrigger over partitions with rounding: a few more per batch
    assert st["batches"] >= math.ceil(events / (batch + 4))
    assert s.stats(warm=True)["batches"] == st["batches"] - 1
    assert s.check == "ok", s.check


def test_stats_are_events_over_the_sum_of_batch_durations() -> None:
    """The bench's arithmetic on fixed durations (measured times are the bench's business,
    not a test's): events/s over busy time, percentiles, and the same without batch 1."""
    bs = _bench()
    s = bs.RunSample(system="native", batch_size=100, rows=[100, 100, 100, 100],
                     durations_s=[4.0, 1.0, 2.0, 1.0], wall_s=9.0, bounded=False, check="ok")
    st = s.stats()
    assert st["busy_s"] == pytest.approx(8.0) and st["events_per_s"] == pytest.approx(50.0)
    assert st["batch_p50_s"] == pytest.approx(1.5) and st["batch_p95_s"] <= 4.0
    warm = s.stats(warm=True)
    assert warm["batches"] == 3 and warm["events_per_s"] == pytest.approx(75.0)
    assert s.first_batch_s == 4.0
    steady = s.stats(steady=True)  # the second half: batches 3 and 4
    assert steady["batches"] == 2 and steady["events_per_s"] == pytest.approx(200 / 3)
    odd = bs.RunSample(**{**s.__dict__, "rows": [100] * 5, "durations_s": [4, 3, 1, 1, 2],
                          "tail_s": 1.0})  # the middle batch goes with the first half
    assert odd.stats(steady=True) == {"events": 300, "batches": 3, "busy_s": 5.0,
                                      "events_per_s": 60.0, "batch_p50_s": 1.0,
                                      "batch_p95_s": pytest.approx(1.9)}


def test_a_saved_bench_is_read_again_with_every_ratio(tmp_path, capsys) -> None:
    """``bench_stream.py report out.json`` prints the ratios of the runs a bench saved, the
    steady state's (the second half of each run) among them; a missing file is refused."""
    bs = _bench()

    def run(system: str, durations: list[float]) -> object:
        return bs.RunSample(system=system, batch_size=1000, rows=[1000] * 4,
                            durations_s=durations, wall_s=9.0, bounded=False, check="ok")

    samples = [run(bs.NATIVE, [6.0, 4.0, 1.0, 1.0]), run(bs.KG, [7.0, 1.0, 1.0, 1.0])]
    saved = tmp_path / "out.json"
    saved.write_text(json.dumps({"samples": [x.as_dict() for x in samples]}))
    assert bs.main(["report", str(saved)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(x.startswith("RATIO (w/o 1st batch)  1,000/batch keyshift-kg/native: "
                            "events/s 2.00x") for x in out), out
    assert any(x.startswith("RATIO (2nd half)  1,000/batch keyshift-kg/native: "
                            "events/s 1.00x") for x in out), out
    assert bs.main(["report", str(tmp_path / "none.json")]) == 2


@pytest.mark.integration
@pytest.mark.slow
def test_peers_on_a_tiny_topic_equal_the_reference(platform_config, spark, tmp_path):
    bs = _bench()
    topic = f"bench-stream-{uuid.uuid4().hex[:6]}"
    # 400 events over 4 s of event time in 1 s windows: several windows close
    ref = bs.produce_topic(platform_config, topic, 400, window_s=1.0, event_rate=100)
    assert ref.events == 400 and ref.complex and len({w for w, _ in ref.counts}) >= 3

    native = bs.run_native(spark, platform_config, topic, 100, tmp_path / "native",
                           window_s=1.0, reference=ref)
    _well_formed(native, 400, 100)
    assert native.outputs > 0  # at least one window closed under the watermark

    pandas = bs.run_pandas_state(spark, platform_config, topic, 100, tmp_path / "pandas",
                                 window_s=1.0, reference=ref)
    _well_formed(pandas, 400, 100)
    assert pandas.outputs == len(ref.complex)

    again = bs.RunSample.from_dict(json.loads(json.dumps(pandas.as_dict())))
    assert again.stats() == pandas.stats()  # what a peer's own process hands back
    med = bs.medians([native, pandas])
    assert med[(100, bs.NATIVE)]["events_per_s"] == native.stats()["events_per_s"]
    lines = bs.ratio_lines(med, [100])
    assert any("not measured" in x for x in lines)  # no keyshift sample: said, not faked


def test_read_batches_sums_engine_tasks_per_batch(tmp_path):
    bs = _bench()
    lines = [{"batch_id": 0, "duration_s": 2.5,
              "tasks": [{"engine": 0, "events": 3}, {"engine": 1, "events": 4}]},
             {"batch_id": 1, "duration_s": 1.0,
              "tasks": [{"engine": 0, "events": 5}, {"engine": 1, "restore": True}]}]
    (tmp_path / "batches.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert bs.read_batches(tmp_path) == ([7, 5], [2.5, 1.0])
    assert bs.read_batches(tmp_path / "none") == ([], [])


def test_a_bounded_peer_run_counts_its_first_batches_and_is_not_checked():
    bs = _bench()
    progress = [{"numInputRows": n, "durationMs": {"triggerExecution": ms, "addBatch": ms // 2}}
                for n, ms in ((100, 4000), (0, 300), (100, 1000), (100, 2000), (50, 900))]
    s = bs._peer_sample(bs.NATIVE, 100, progress, 2, 9.0, check=lambda: ("ok", 1))
    assert s.bounded and s.check.startswith("skipped") and s.rows == [100, 100]
    assert s.durations_s == [4.0, 1.0] and s.extra["no_data_batches"] == 1
    assert s.stats(warm=True) == {"events": 100, "batches": 1, "busy_s": 1.0,
                                  "events_per_s": 100.0, "batch_p50_s": 1.0,
                                  "batch_p95_s": 1.0}
    full = bs._peer_sample(bs.NATIVE, 100, progress, None, 9.0, check=lambda: ("ok", 1))
    assert not full.bounded and full.check == "ok" and sum(full.rows) == 350


def test_the_reference_file_round_trips_without_pickle(tmp_path):
    bs = _bench()
    ref = bs.Reference(window_s=1.0, events=3)
    ref.counts.update({(0, "a"): 2, (-1000, "b"): 1})
    ref.complex.add(("a", 1500, "word_count", "{}", "p0-2"))
    bs.save_reference(tmp_path / "ref.kss", ref)
    assert (tmp_path / "ref.kss").read_bytes().startswith(b"KSSC")
    back = bs.load_reference(tmp_path / "ref.kss")
    assert back == ref and isinstance(back.counts, bs.Counter)


def test_paired_ratios_give_each_target_the_spread_of_its_repeats() -> None:
    """A ratio is also computed per repeat (the two systems' runs back to back), and a target
    whose per-repeat ratios fall on both sides is said to be within the noise: the bench of
    stop 37 had DLB-H over KG at 0.95 by medians with repeats from 0.82 to 1.12."""
    bs = _bench()

    def run(system: str, events_per_s: float) -> object:  # 12 batches of 1,000 events
        return bs.RunSample(system=system, batch_size=1000, rows=[1000] * 12,
                            durations_s=[1000 / events_per_s] * 12, wall_s=30.0,
                            bounded=True, check="skipped (bounded run)")

    kg = [548, 372, 474, 417, 497]
    dlb = [450, 417, 484, 377, 454]
    samples = [run(bs.KG, x) for x in kg] + [run(bs.DLBH, x) for x in dlb]
    paired = bs.paired_ratios(samples)
    got = paired[(1000, bs.DLBH, bs.KG)]["events_per_s"]
    assert got == pytest.approx([d / k for d, k in zip(dlb, kg)])
    assert (1000, bs.KG, bs.DLBH) not in paired  # only the pairs the report names
    lines = bs.ratio_lines(bs.medians(samples), [1000], paired=paired)
    target = next(x for x in lines if x.startswith("TARGET DLB-H"))
    assert "-> NOT met (runs paired: 0.82-1.12)" in target and "within the runs' noise" in target
    ratio = next(x for x in lines if "keyshift-dlb-h/keyshift-kg" in x)
    assert "events/s 0.95x (runs paired: 0.82-1.12)" in ratio

    # every repeat on one side: decided, no noise said; no pairs: the line as before
    clear = [run(bs.KG, x) for x in kg] + [run(bs.DLBH, x * 1.2) for x in kg]
    target = next(x for x in bs.ratio_lines(bs.medians(clear), [1000],
                                            paired=bs.paired_ratios(clear))
                  if x.startswith("TARGET DLB-H"))
    assert target.endswith("-> met (runs paired: 1.20-1.20)")
    plain = next(x for x in bs.ratio_lines(bs.medians(clear), [1000])
                 if x.startswith("TARGET DLB-H"))
    assert plain.endswith("-> met")


def test_the_bench_says_where_keyshift_batches_go_and_the_one_pass_target() -> None:
    """Issue 43 item 3: the KG-over-native target at every size, and the stages of
    keyshift's batches (its runs' ``stages``, medians over runs) beside it, so a missed
    ratio comes with what holds it; a peer's run has no stages and no line."""
    bs = _bench()

    def run(system: str, events_per_s: float, stages: dict | None = None) -> object:
        return bs.RunSample(system=system, batch_size=20_000, rows=[20_000] * 4,
                            durations_s=[20_000 / events_per_s] * 4, wall_s=30.0,
                            bounded=True, check="ok",
                            extra={"stages": stages} if stages else {})

    samples = [run(bs.KG, 9_000, {"input": 0.9, "commit": 0.4}),
               run(bs.KG, 9_500, {"input": 1.1, "commit": 0.2}),
               run(bs.KG, 9_800, {"input": 1.0, "commit": 0.3}),
               run(bs.NATIVE, 8_000), run(bs.NATIVE, 8_000), run(bs.NATIVE, 8_000)]
    lines = bs.ratio_lines(bs.medians(samples), [20_000], paired=bs.paired_ratios(samples))
    target = next(x for x in lines if "1.2x native at 20,000" in x)
    assert "-> NOT met (runs paired: 1.12-1.23)" in target and "within the runs' noise" in target
    (stages,) = bs.stage_lines(samples)
    assert stages == ("STAGES  20,000/batch keyshift-kg (median s a batch): "
                      "input 1.000, commit 0.300")


def test_the_bound_leaves_out_the_batches_a_bookkeeping_commit_ran_beside(tmp_path) -> None:
    """keyshift's events/s over its later batches that no commit of its staged bookkeeping
    overlapped, against the native peer's: what its data path reaches; the overlapped
    batches' time beyond that rate and the stop's commit are said after it. A run whose
    records do not say (before the job wrote ``beside_commit``) gives no line."""
    bs = _bench()
    # batch 0 is cold and left out; batch 2 ran beside a commit: 1.5 s where 1.0 s would do
    kg = bs.RunSample(system=bs.KG, batch_size=20_000, rows=[20_000] * 4,
                      durations_s=[5.0, 1.0, 1.5, 1.0], wall_s=30.0, bounded=False,
                      check="ok", tail_s=0.7,
                      extra={"beside_commit": [True, False, True, False]})
    native = bs.RunSample(system=bs.NATIVE, batch_size=20_000, rows=[20_000] * 4,
                          durations_s=[5.0, 1.25, 1.25, 1.25], wall_s=30.0, bounded=False,
                          check="ok")
    (line,) = bs.bookkeeping_lines([kg, native], bs.medians([kg, native], warm=True))
    assert line == ("BOUND  20,000/batch keyshift-kg (w/o 1st batch): 20,000 events/s over "
                    "the batches no bookkeeping commit ran beside (2/3 a run), 1.25x native; "
                    "the commits beside the stream took 0.50 s a run more, the stop's commit "
                    "0.70 s")
    unknown = bs.RunSample(**{**kg.__dict__, "extra": {}})
    assert bs.bookkeeping_lines([unknown, native], bs.medians([unknown, native], True)) == []
    # the flags as the job writes them, in read_batches' order
    (tmp_path / "batches.jsonl").write_text(
        '{"batch_id": 0, "beside_commit": true}\n\n{"batch_id": 1}\n')
    assert bs.read_beside_commit(tmp_path) == [True, False]
    assert bs.read_beside_commit(tmp_path / "missing") == []


def test_the_steady_bound_says_how_much_shorter_a_warm_batch_must_be() -> None:
    """Issue 43 item 3 in the steady state: KG's ratio to the native peer over each run's
    second half, the cut of a warm KG batch that would make it 1.2x, and keyshift's own
    stages beside it; a size without a native run gives no line."""
    bs = _bench()
    kg = bs.RunSample(system=bs.KG, batch_size=1000, rows=[1000] * 4,
                      durations_s=[5.0, 2.0, 1.0, 1.0], wall_s=9.0, bounded=False,
                      check="ok", extra={"stages": {"engine_other": 0.2, "collect": 0.05,
                                                    "input": 0.5}})
    native = bs.RunSample(system=bs.NATIVE, batch_size=1000, rows=[1000] * 4,
                          durations_s=[6.0, 4.0, 1.1, 1.1], wall_s=9.0, bounded=False,
                          check="ok")
    (line,) = bs.steady_bound_lines([kg, native], bs.medians([kg, native], steady=True))
    # 2,000 events in 2.0 s against 2.2 s: 1.10x; 1.2x needs 1 - 1.1/1.2 of its 1.0 s batch
    assert line == ("BOUND   1,000/batch keyshift-kg (2nd half): 1.10x native; 1.2x needs a "
                    "warm batch 0.08 s (8%) shorter than its 1.00 s; keyshift's own stages a "
                    "batch: engine_other 0.200, collect 0.050")
    fast = bs.RunSample(**{**kg.__dict__, "durations_s": [5.0, 2.0, 0.5, 0.5], "extra": {}})
    assert bs.steady_bound_lines([fast, native],
                                 bs.medians([fast, native], steady=True)) == [
        "BOUND   1,000/batch keyshift-kg (2nd half): 2.20x native; 1.2x needs a warm batch "
        "0.00 s (0%) shorter than its 0.50 s"]
    assert bs.steady_bound_lines([kg], bs.medians([kg], steady=True)) == []

