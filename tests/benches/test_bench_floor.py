"""bench/bench_floor.py's pure helpers: the commit each output row became visible in, the
waits of the events behind them (by event id, and by window for the JVM count), the
fixed cost and per-event cost of a batch, and the targets in words."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from bench.bench_floor import (
    KG,
    NATIVE,
    STATELESS,
    committed_rows,
    cost_table,
    fit,
    latency_table,
    target_lines,
    waits,
)


def test_rows_carry_the_time_their_commit_became_visible(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    table = tmp_path / "out"
    write_deltalake(str(table), pa.table({"event_id": ["a", "b"], "run_id": ["r", "r"]}))
    time.sleep(0.05)
    write_deltalake(str(table), pa.table({"event_id": ["c"], "run_id": ["other"]}),
                    mode="append")
    commits = sorted((table / "_delta_log").glob("*.json"))
    os.utime(commits[0], (1000.0, 1000.0))
    os.utime(commits[1], (2000.0, 2000.0))
    rows = committed_rows(table, ["event_id", "run_id"])
    assert sorted((t, r["event_id"]) for t, r in rows) == [(1000.0, "a"), (1000.0, "b"),
                                                          (2000.0, "c")]
    assert [r["event_id"] for _, r in committed_rows(table, ["event_id"], ("run_id", "r"))] \
        == ["a", "b"]


def test_waits_by_event_id_and_by_window() -> None:
    events = {"a": ("k", 1_000, 100.0), "b": ("k", 1_500, 100.5), "c": ("j", 2_100, 101.1)}
    by_id = waits(STATELESS, [(102.0, {"event_id": "a"}), (103.0, {"event_id": "zz"})],
                  events, 1.0)
    assert by_id == [pytest.approx(2.0)]  # an output of an unknown event is not timed
    # the JVM count: window [1000, 2000) of key k holds a and b; each waits for the row
    native = waits(NATIVE, [(104.0, {"key": "k", "window_start": 1_000, "count": 2})],
                   events, 1.0)
    assert sorted(native) == [pytest.approx(3.5), pytest.approx(4.0)]


def test_fixed_and_per_event_cost_from_the_batch_sizes() -> None:
    sizes = [100, 1_000, 20_000]
    a, b = fit(sizes, [0.8 + 20e-6 * n for n in sizes])
    assert a == pytest.approx(0.8) and b == pytest.approx(20e-6)
    rows = cost_table({KG: {n: 0.8 + 20e-6 * n for n in sizes}, "partial": {100: 1.0}}, sizes)
    assert rows[2].startswith(f"| {KG} | 0.80 | 0.82 | 1.20 | 0.80 | 20.0 |")
    assert len(rows) == 3  # a system missing a size is left out


def test_latency_targets_and_the_stateless_bound_in_words() -> None:
    live = {KG: [{"e2e_p50_s": 0.9, "e2e_p95_s": 1.8, "batch_p50_s": 0.5,
                  "own_e2e_p50_s": 0.85, "own_e2e_p95_s": 1.7}],
            NATIVE: [{"e2e_p50_s": 2.0, "e2e_p95_s": 2.5, "batch_p50_s": 0.6}],
            STATELESS: [{"e2e_p50_s": 0.7, "e2e_p95_s": 1.1, "batch_p50_s": 0.4}]}
    lines = target_lines(live, 300.0)
    assert lines[0] == (f"{KG}: e2e p50 0.90 s, p95 1.80 s at 300 events/s (target <= 1.0 / "
                        "2.0: met); vs native 0.45x (target <= 0.8x: met)")
    assert lines[1].startswith("bound: plain Spark's stateless Kafka -> Delta query waits "
                               "0.70 s")
    table = latency_table(live)
    assert table[2] == f"| {KG} | 0.90 | 1.80 | 0.50 | 0.85 / 1.70 | 1 |"
