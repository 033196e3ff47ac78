"""The Spark-free read path of the watching commands on Delta tables written here by delta-rs
(no JVM in this file): contract columns, older rows' missing columns, a remote warehouse,
staged rows beside Delta, and ``keyshift dead-letters``' grouping. The same path on tables
delta-spark wrote: tests/streaming/test_watch_fast.py and tests/streaming/test_status_report.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from keyshift.config import load_config
from keyshift.lakehouse.delta import TableSchemaError
from keyshift.lakehouse.delta_arrow import FastReadUnavailable, arrow_schema, read_arrow

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


@pytest.fixture()
def cfg(tmp_path):
    return load_config(env={}, home=str(tmp_path))


def _write(cfg, name: str, rows: list[dict], drop: tuple[str, ...] = ()) -> None:
    from deltalake import write_deltalake

    schema = arrow_schema(name)
    keep = [f for f in schema if f.name not in drop]
    data = pa.Table.from_pylist([{f.name: r.get(f.name) for f in keep} for r in rows],
                                schema=pa.schema(keep))
    write_deltalake(cfg.table_path(name), data, mode="append")


def _metrics(run: str, batch: int, events: int = 10) -> dict:
    return {"schema_version": 2, "run_id": run, "batch_id": batch,
            "window_start": T0 + timedelta(seconds=batch), "window_end":
            T0 + timedelta(seconds=batch + 1), "events_in": events, "dead_letter": 0,
            "processed": events, "out_events": 1, "missed": 0, "selectivity": 0.1,
            "engines": 2, "engine_loads": [events // 2, events - events // 2], "rstd": 1.0,
            "var_load": 0.0, "input_rate": float(events), "latency_s": 0.01,
            "batch_duration_s": 0.5, "plan_version": 1, "policy": "kg"}


def test_a_remote_warehouse_is_left_to_spark(tmp_path) -> None:
    cfg = load_config(env={}, home=str(tmp_path), warehouse={"root": "s3a://bucket/w"})
    with pytest.raises(FastReadUnavailable, match="s3a://bucket/w is not on this machine"):
        read_arrow(cfg, "metrics")


def test_a_table_no_job_wrote_is_empty_with_the_contract_columns(cfg) -> None:
    got = read_arrow(cfg, "dead_letter", "r1")
    assert got.num_rows == 0 and got.schema == arrow_schema("dead_letter")


def test_older_rows_read_with_nulls_and_a_lost_column_is_named(cfg) -> None:
    floor = ("floor_ratio", "floor_rstd", "hot_group", "hot_group_share")  # schema 2's
    _write(cfg, "metrics", [_metrics("a", 0), _metrics("b", 0)], drop=floor)
    got = read_arrow(cfg, "metrics", "a")
    assert got.schema == arrow_schema("metrics")
    assert got["run_id"].to_pylist() == ["a"] and got["floor_rstd"].to_pylist() == [None]
    assert got["window_end"].to_pylist() == [T0 + timedelta(seconds=1)]
    _write(cfg, "decisions", [], drop=("reason",))  # a first-version column missing
    with pytest.raises(TableSchemaError, match="decisions: table at .* lacks columns reason"):
        read_arrow(cfg, "decisions")


def test_staged_rows_add_to_delta_and_a_row_in_both_counts_once(cfg) -> None:
    from keyshift.streaming.runs import ArrowRows, current_arrow
    from keyshift.streaming.staging import stage_rows

    _write(cfg, "metrics", [_metrics("live", b) for b in range(3)])
    staged = f"{cfg.warehouse_uri}/_runs/live/staged"
    for b in (2, 3, 4):  # 2: committed and not yet deleted; its staged copy differs
        stage_rows(staged, "metrics", b, "driver", [_metrics("live", b, events=100)])
    got = current_arrow(cfg, "metrics", "live")
    assert sorted(zip(got["batch_id"].to_pylist(), got["events_in"].to_pylist())) == [
        (0, 10), (1, 10), (2, 10), (3, 100), (4, 100)]
    frame = ArrowRows(cfg).frame("metrics", "live", ["batch_id", "window_end"])
    assert frame.window_end.dt.tz is None  # naive UTC, as Spark's toPandas gives it
    assert frame.sort_values("batch_id").window_end.iloc[-1] == pd_ts(T0 + timedelta(seconds=5))


def pd_ts(t: datetime):
    import pandas as pd

    return pd.Timestamp(t).tz_convert("UTC").tz_localize(None)


def test_dead_letters_group_by_reason_most_frequent_first_with_cut_samples(cfg) -> None:
    from keyshift.streaming.commands.dead_letters import RAW_SHOWN, dead_letters
    from keyshift.streaming.runs import ArrowRows

    def bad(batch: int, offset: int, reason: str, raw: str | None = "{") -> dict:
        return {"schema_version": 2, "run_id": "r", "batch_id": batch, "topic": "t",
                "partition": offset % 2, "offset": offset, "kafka_ts": T0, "raw": raw,
                "reason": reason}

    _write(cfg, "dead_letter", [
        bad(1, 7, "malformed json"), bad(0, 3, "malformed json"), bad(0, 5, "malformed json"),
        bad(0, 4, "missing field: key", None), bad(2, 9, "oversized: 70000 bytes > 65536",
                                                   "x" * 5000),
        bad(2, 8, "oversized: 69999 bytes > 65536", "y" * 5000),
        {**bad(0, 1, "malformed json"), "run_id": "other"}])
    got = dead_letters(ArrowRows(cfg), "r", limit=2)
    assert got["total"] == 6
    assert [(r["reason"], r["count"]) for r in got["reasons"]] == [
        ("malformed json", 3), ("oversized: N bytes > 65536", 2), ("missing field: key", 1)]
    assert [(s["batch_id"], s["offset"]) for s in got["reasons"][0]["samples"]] == [
        (0, 3), (0, 5)]  # the earliest first
    assert got["reasons"][2]["samples"][0]["raw"] is None
    big = got["reasons"][1]["samples"][0]
    assert big["reason"] == "oversized: 69999 bytes > 65536" and big["offset"] == 8
    assert len(big["raw"]) == RAW_SHOWN and big["raw_chars"] == 5000
    assert big["kafka_ts"].startswith("2026-11-27T12:00:00")
    assert all(not r["samples"] for r in dead_letters(ArrowRows(cfg), "r", 0)["reasons"])
    assert dead_letters(ArrowRows(cfg), "none", 3) == {"run_id": "none", "total": 0,
                                                       "reasons": []}
