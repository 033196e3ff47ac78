"""Smoke test of bench/bench_stream.py: its plain Spark peers on a tiny topic compute the
reference outputs and report well-formed numbers; its keyshift-side helpers build the child's
configuration and read its one JSON object. Timings are never asserted (DESIGN: benchmarks
print, tests check)."""

from __future__ import annotations

import importlib.util
import math
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
    assert s.events == events and not s.bounded
    # Spark splits maxOffsetsPerTrigger over partitions with rounding: a few more per batch
    assert s.batches >= math.ceil(events / (batch + 4))
    assert s.busy_s > 0 and s.events_per_s == pytest.approx(events / s.busy_s)
    assert 0 < s.batch_p50_s <= s.batch_p95_s
    assert s.check == "ok", s.check


@pytest.mark.integration
@pytest.mark.slow
def test_peers_on_a_tiny_topic_equal_the_reference(platform_config, spark, tmp_path):
    bs = _bench()
    topic = f"bench-stream-{uuid.uuid4().hex[:6]}"
    # 400 events over ~4 s of event time in 1 s windows: several windows close
    ref = bs.produce_topic(platform_config, topic, 400, window_s=1.0, rate=100)
    assert ref.events == 400 and ref.complex and len({w for w, _ in ref.counts}) >= 3

    native = bs.run_native(spark, platform_config, topic, 100, tmp_path / "native",
                           window_s=1.0, reference=ref)
    _well_formed(native, 400, 100)
    assert native.outputs > 0  # at least one window closed under the watermark

    pandas = bs.run_pandas_state(spark, platform_config, topic, 100, tmp_path / "pandas",
                                 window_s=1.0, reference=ref)
    _well_formed(pandas, 400, 100)
    assert pandas.outputs == len(ref.complex)

    bounded = bs.run_native(spark, platform_config, topic, 100, tmp_path / "bounded",
                            window_s=1.0, reference=ref, max_batches=2)
    assert bounded.bounded and bounded.batches == 2 and 0 < bounded.events < 400
    assert bounded.check.startswith("skipped")

    med = bs.medians([native, pandas])
    lines = bs.ratio_lines(med, [100])
    assert any("not measured" in x for x in lines)  # no keyshift sample: said, not faked
