"""A batch's complex events into ``events_out`` (streaming/output_appends.py): the driver
commits them through delta-rs only when every task handed them over and no predecessor can
have written the batch; otherwise Spark's append (the look-first one where it must) gets
the executors' rows, and a table delta-rs refuses is Spark's from then on. Fast: a table
made by delta-rs, Spark's append a recording fake; the job's end-to-end path is in
tests/streaming/test_engines_spark.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from keyshift.config import load_config
from keyshift.lakehouse.delta import TableWriteError
from keyshift.lakehouse.delta_arrow import arrow_schema, arrow_type, read_arrow
from keyshift.schemas import table
from keyshift.streaming.batch_frames import EVENTS_OUT_FROM, events_out_rows
from keyshift.streaming.engines import (
    LOAD,
    OUT,
    OUT_FETCHED,
    TASK,
    BatchSpec,
    input_batch,
    output_weight,
    run_engine,
)
from keyshift.streaming.output_appends import DELTA_RS, SPARK, OutputAppends


@dataclass
class SparkAppends:
    """Stands in for RunAppends: which batches a predecessor may have written, and the
    appends Spark was given."""

    first: int = 0  # the first batch this process runs
    run_id: str = "r1"
    calls: list = field(default_factory=list)

    def may_exist(self, batch_id: int) -> bool:
        return batch_id <= self.first

    def append(self, name: str, frame, batch_id: int) -> None:
        self.calls.append((name, frame, batch_id))


def _warehouse(tmp_path):
    """A warehouse whose ``events_out`` is as Spark makes it: the contract's columns, NOT NULL
    where it says so, writer version 2."""
    import pyarrow as pa
    from deltalake import DeltaTable

    cfg = load_config(env={}, home=str(tmp_path))
    DeltaTable.create(cfg.table_path("events_out"), schema=pa.schema([
        pa.field(c.name, arrow_type(c.type), nullable=c.nullable)
        for c in table("events_out").columns]))
    return cfg


def _fetched(n: int, key: str | None = "k"):
    """``n`` fetched output rows as the driver's collect gives them (ENGINE_OUTPUT columns)."""
    import pyarrow as pa

    return pa.table({
        "tag": [OUT_FETCHED] * n, "engine": pa.array([i % 4 for i in range(n)], pa.int32()),
        "grp": pa.array(list(range(n)), pa.int32()), "key": [key] * n,
        "ts": pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64()),
        "kind": ["count"] * n, "detail": ['{"n": 1}'] * n,
        "event_id": [f"e{i}" for i in range(n)]})


def test_fetched_outputs_become_events_out_rows_of_the_contract() -> None:
    rows = events_out_rows(_fetched(3), "r1", "wordcount", 7)
    assert rows.schema == arrow_schema("events_out")
    got = rows.to_pylist()
    assert [(r["run_id"], r["batch_id"], r["app"], r["group"], r["event_id"]) for r in got] \
        == [("r1", 7, "wordcount", g, f"e{g}") for g in range(3)]
    assert {name for name, _ in EVENTS_OUT_FROM} | {"schema_version", "run_id", "batch_id",
                                                  "app"} == set(rows.column_names)


def test_a_later_batch_all_fetched_is_committed_by_delta_rs(tmp_path) -> None:
    cfg = _warehouse(tmp_path)
    spark = SparkAppends(first=3)
    outs = OutputAppends(cfg, spark)
    assert outs.fetch_bytes(4, slots=4) == outs.held_bytes // 4 > 0
    rows = events_out_rows(_fetched(5), spark.run_id, "wordcount", 4)
    assert outs.append("events_out", "frame-4", 4, rows) == DELTA_RS
    assert spark.calls == []
    got = read_arrow(cfg, "events_out", run_id="r1")
    assert sorted(got["event_id"].to_pylist()) == [f"e{i}" for i in range(5)]


def test_the_first_batch_a_process_runs_is_sparks_look_first_append(tmp_path) -> None:
    """A predecessor may have committed it: the tasks fetch nothing and Spark looks."""
    cfg = _warehouse(tmp_path)
    spark = SparkAppends(first=3)
    outs = OutputAppends(cfg, spark)
    assert outs.fetch_bytes(3, slots=4) == 0
    rows = events_out_rows(_fetched(2), "r1", "wordcount", 3)
    assert outs.append("events_out", "frame-3", 3, rows) == SPARK
    assert spark.calls == [("events_out", "frame-3", 3)]
    assert read_arrow(cfg, "events_out").num_rows == 0


def test_outputs_a_task_kept_are_all_appended_by_spark(tmp_path) -> None:
    """No fetched rows (a task's outputs were too heavy): the executors' frame, which holds
    the fetched tasks' rows too, is the one append of the batch."""
    cfg = _warehouse(tmp_path)
    spark = SparkAppends(first=0)
    outs = OutputAppends(cfg, spark)
    assert outs.append("events_out", "frame-5", 5, None) == SPARK
    assert spark.calls == [("events_out", "frame-5", 5)]


def test_a_table_delta_rs_cannot_write_is_sparks_from_then_on(tmp_path, capsys) -> None:
    remote = load_config(env={}, home=str(tmp_path), warehouse={"root": "s3a://b/wh"})
    spark = SparkAppends(first=0)
    outs = OutputAppends(remote, spark)
    rows = events_out_rows(_fetched(2), "r1", "wordcount", 1)
    assert outs.append("events_out", "frame-1", 1, rows) == SPARK
    assert "events_out is appended by Spark from now on" in capsys.readouterr().err
    assert outs.fetch_bytes(2, slots=4) == 0  # the tasks are told to keep their rows
    assert outs.append("events_out", "frame-2", 2, rows) == SPARK
    assert capsys.readouterr().err == ""  # said once
    assert [c[2] for c in spark.calls] == [1, 2]


def test_a_refused_write_fails_the_batch_and_nothing_lands(tmp_path) -> None:
    """A null key (NOT NULL in the contract): delta-rs refuses it as Spark would, naming the
    table; the batch fails (its restart runs it again through Spark), no half is left."""
    cfg = _warehouse(tmp_path)
    spark = SparkAppends(first=0)
    outs = OutputAppends(cfg, spark)
    with pytest.raises(TableWriteError, match="events_out"):
        outs.append("events_out", "frame-1", 1,
                    events_out_rows(_fetched(2, key=None), "r1", "wordcount", 1))
    assert spark.calls == []
    assert read_arrow(cfg, "events_out").num_rows == 0


def _task(fetch_bytes: int, tmp_path, monkeypatch):
    import keyshift.streaming.engines as engines

    monkeypatch.setattr(engines, "cache_root", lambda _k: tmp_path / "cache")
    rows = [(i % 5, 0, i, {"key": f"w{i % 7}", "word": f"w{i % 7}",
                           "ts": 1_700_000_000_000 + 1000 * i, "id": f"e{i}"},
             None, None, 1_700_000_000.0 + i, None) for i in range(60)]
    spec = BatchSpec(0, "wordcount", {"window_s": 0.01}, "r", str(tmp_path / "state"),
                     fetch_bytes=fetch_bytes)
    return list(run_engine(spec, 0, [input_batch("wordcount", rows)]))


def test_a_task_hands_over_its_outputs_only_when_they_are_light(tmp_path, monkeypatch) -> None:
    light = _task(1 << 20, tmp_path / "a", monkeypatch)
    outs = [r for tag, r in light if tag == OUT_FETCHED]
    task = next(r for tag, r in light if tag == TASK)
    assert outs and not [r for tag, r in light if tag == OUT]
    assert task["outputs_fetched"] and task["outputs"] == len(outs)
    assert task["output_bytes"] >= sum(len(r[2]) + len(r[4]) + len(r[5]) + len(r[6])
                                       for r in outs)
    heavy = _task(task["output_bytes"] - 1, tmp_path / "b", monkeypatch)
    assert [r for tag, r in heavy if tag == OUT] == outs  # the same rows, kept
    assert not next(r for tag, r in heavy if tag == TASK)["outputs_fetched"]
    # the default (a spec that says nothing): every task keeps its rows for the executors
    kept = _task(0, tmp_path / "c", monkeypatch)
    assert [r for tag, r in kept if tag == OUT] == outs and OUT_FETCHED not in dict(kept)


def test_output_weight_counts_each_rows_strings() -> None:
    from keyshift.apps.base import ComplexEvent
    from keyshift.streaming.engines import OUT_ROW_BYTES

    ce = ComplexEvent("key", 1, "kind", "detail", "id")
    assert output_weight([(0, ce), (1, ce)]) == 2 * (OUT_ROW_BYTES + 3 + 4 + 6 + 2)
    assert output_weight([]) == 0


def _small(tasks: list[dict], loads: list[tuple[int, int, int]], fetched: int):
    """The driver's collect of an engine stage: LOAD (group, events, state size) and TASK
    rows, and ``fetched`` OUT_FETCHED rows."""
    import json

    import pyarrow as pa

    out = _fetched(fetched)
    n = len(tasks) + len(loads)
    small = pa.table({
        "tag": [TASK] * len(tasks) + [LOAD] * len(loads),
        "grp": pa.array([None] * len(tasks) + [g for g, _, _ in loads], pa.int32()),
        "n": pa.array([None] * len(tasks) + [k for _, k, _ in loads], pa.int64()),
        "size": pa.array([None] * len(tasks) + [b for _, _, b in loads], pa.int64()),
        "task": [json.dumps(t) for t in tasks] + [None] * len(loads),
        **{c: pa.nulls(n, out.schema.field(c).type) for c in out.column_names
           if c not in ("tag", "grp")}})
    return pa.concat_tables([small, out.append_column("n", pa.nulls(fetched, pa.int64()))
                             .append_column("size", pa.nulls(fetched, pa.int64()))
                             .append_column("task", pa.nulls(fetched, pa.string()))
                             .select(small.column_names)])


def _task_record(engine: int, outputs: int, fetched: bool) -> dict:
    return {"engine": engine, "events": 10, "outputs": outputs, "dead": 0,
            "outputs_fetched": fetched, "duration_s": 0.1, "input_wait_s": 0.0,
            "kafka_ts_first": 1.0, "kafka_ts_last": 2.0}


def test_the_driver_sums_loads_by_column_and_keeps_outputs_only_when_all_came() -> None:
    from keyshift.streaming.job import EngineRun

    loads = [(3, 5, 100), (3, 2, 300), (7, 1, 0)]  # group 3 on two engines (a move)
    run = EngineRun.of(_small([_task_record(0, 4, True), _task_record(1, 0, False)], loads,
                              4), groups=8)
    assert run.loads.tolist() == [0, 0, 0, 7, 0, 0, 0, 1]
    assert run.state.tolist() == [0, 0, 0, 300, 0, 0, 0, 0]
    assert run.outs == 4 and run.fetched.num_rows == 4  # the task without outputs: no matter
    assert set(run.fetched["tag"].to_pylist()) == {OUT_FETCHED}
    kept = EngineRun.of(_small([_task_record(0, 4, True), _task_record(1, 2, False)], loads,
                               4), groups=8)
    assert kept.fetched is None  # engine 1 kept its rows: Spark appends the batch's all
