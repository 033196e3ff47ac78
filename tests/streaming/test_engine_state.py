"""An engine's state without Spark: the executor-local cache, the durable changelog on the
warehouse filesystem, and the engine tasks that use both (migration included)."""

from __future__ import annotations

import json
import time

import pytest

from keyshift.streaming.engine_state import (
    DurableState,
    EngineStore,
    StateFormatError,
    decode,
    encode,
    open_store,
    read_moved,
)
from keyshift.streaming.engines import (
    LOAD,
    OUT,
    TASK,
    BatchSpec,
    input_batch,
    run_engine,
    work_seconds,
)

T0 = 1_700_000_000_000


def test_store_versions_rollback_and_prune(tmp_path) -> None:
    s = EngineStore(tmp_path, 3)
    s.save(0, {1: b"a0", 2: b"b0"})
    s.save(1, {1: b"a1"})
    assert s.load([1, 2], before=1) == {1: b"a0", 2: b"b0"}
    assert s.load([1, 2], before=2) == {1: b"a1", 2: b"b0"}
    s.save(2, {1: b"a2"})  # prunes a0: nothing can restart before batch 2's base any more
    rows = s._db.execute("SELECT version FROM state WHERE grp = 1 ORDER BY version").fetchall()
    assert [v for (v,) in rows] == [1, 2]
    s.mark_applied(2)
    s.rollback(2)  # a re-executed batch 2 starts from what batch 1 left
    assert s.applied == 1
    assert s.load([1], before=3) == {1: b"a1"}
    s.save(2, {2: None})  # group 2 leaves this engine in batch 2
    assert s.load([2], before=3) == {}
    assert s.owned() == {1}
    s.close()


def test_changelog_codec_round_trip_and_refuses_foreign_bytes() -> None:
    states = {5: b"x" * 3, 1: b"", 9: None}
    assert decode(encode(states)) == {1: b"", 5: b"xxx", 9: None}
    with pytest.raises(StateFormatError, match="not a keyshift state file"):
        decode(b"\x80\x04pickle", "f")
    with pytest.raises(StateFormatError, match="truncated"):
        decode(encode({5: b"abcdef"})[:-2], "f")


def test_durable_state_replays_changelogs_and_compacts(tmp_path) -> None:
    d = DurableState(f"file://{tmp_path}/state", compact_every=3)
    d.write_changes(0, 1, {1: b"a1", 2: b"b1"})
    d.write_changes(0, 2, {1: b"a2", 2: None})
    d.write_changes(0, 4, {3: b"c4"})
    assert d.read(0, 0) == {}
    assert d.read(0, 1) == {1: b"a1", 2: b"b1"}
    assert d.read(0, 3) == {1: b"a2"}
    assert d.read(0, 4) == {1: b"a2", 3: b"c4"}
    d.write_base(0, 4, {1: b"a2", 3: b"c4"})
    d.write_changes(0, 5, {3: b"c5"})
    d.write_base(0, 6, {1: b"a2", 3: b"c6"})
    # the base before the newest stays, so a retry of batch 7 (state as of 6) and of
    # batch 6 itself (as of 5) both still read right
    assert d.read(0, 5) == {1: b"a2", 3: b"c5"}
    assert d.read(0, 6) == {1: b"a2", 3: b"c6"}
    assert d.batches(0) == [4, 5, 6]
    assert d.read(1, 10) == {}  # an engine that never wrote anything


def test_only_the_expected_cache_is_trusted(tmp_path) -> None:
    """A task on another executor (another cache folder), or on a cache that missed a batch,
    rebuilds from the durable copy instead of starting empty or stale."""
    durable = DurableState(str(tmp_path / "state"))
    here, there = tmp_path / "exec-a", tmp_path / "exec-b"
    s, rebuilt = open_store(here, durable, 0, 0, None)
    s.save(0, {7: b"v0"})
    durable.write_changes(0, 0, {7: b"v0"})
    s.mark_applied(0)
    cid = s.cache_id
    s.close()

    s, rebuilt = open_store(here, durable, 0, 1, cid)  # same executor, next batch
    assert not rebuilt and s.load([7], 1) == {7: b"v0"}
    s.save(1, {7: b"v1"})
    durable.write_changes(0, 1, {7: b"v1"})
    s.mark_applied(1)
    s.close()

    s, rebuilt = open_store(there, durable, 0, 2, cid)  # batch 2 lands elsewhere
    assert rebuilt and s.load([7], 2) == {7: b"v1"} and s.cache_id != cid
    s.save(2, {7: b"v2"})
    durable.write_changes(0, 2, {7: b"v2"})
    s.mark_applied(2)
    moved_id = s.cache_id
    s.close()

    s, rebuilt = open_store(here, durable, 0, 3, moved_id)  # back: the old cache is stale
    assert rebuilt and s.load([7], 3) == {7: b"v2"}
    s.close()
    s, rebuilt = open_store(there, durable, 0, 2, moved_id)  # a retry of batch 2 over there
    assert not rebuilt and s.load([7], 2) == {7: b"v1"}
    s.close()


def _event_rows(n: int, groups: int = 5, start: int = 0):
    for i in range(start, start + n):
        event = {"key": f"w{i % 7}", "word": f"w{i % 7}", "ts": T0 + i, "id": f"e{i}"}
        yield (i % 7 % groups, 0, i, event, None, None, T0 / 1e3 + i, None)


def _event_input(n: int, groups: int = 5, start: int = 0) -> list:
    """:func:`_event_rows` as the engine task's Arrow input."""
    return [input_batch("wordcount", _event_rows(n, groups, start))]


def _spec(tmp_path, batch: int, **kw) -> BatchSpec:
    return BatchSpec(batch, "wordcount", {"window_s": 0.01}, "r", str(tmp_path / "state"),
                     **kw)


def _task(records):
    return next(rec for kind, rec in records if kind == TASK)


def test_engine_task_state_survives_a_move_to_another_executor(tmp_path, monkeypatch) -> None:
    """The same input through one executor, or with every batch on a fresh executor, gives
    the same complex events: nothing depends on where the task ran."""
    import keyshift.streaming.engines as engines

    def run(batches: int, fresh: bool) -> list:
        outs, caches = [], {}
        for b in range(batches):
            folder = tmp_path / ("fresh" if fresh else "same") / (str(b) if fresh else "x")
            monkeypatch.setattr(engines, "cache_root", lambda _key, f=folder: f)
            spec = BatchSpec(b, "wordcount", {"window_s": 0.01}, "r",
                             str(tmp_path / ("fresh" if fresh else "same") / "state"),
                             caches=caches)
            recs = list(run_engine(spec, 0, _event_input(40, start=40 * b)))
            caches = {0: _task(recs)["cache_id"]}
            assert _task(recs)["rebuilt"] == (fresh or b == 0)
            outs += [r for kind, r in recs if kind == OUT]
        return outs

    same, fresh = run(4, fresh=False), run(4, fresh=True)
    assert same and same == fresh


def _staged(tmp_path, table: str) -> list[dict]:
    import pyarrow.parquet as pq

    files = sorted((tmp_path / "staged" / table).glob("*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("cached", [True, False], ids=["from-cache", "from-changelog"])
def test_receiving_engine_reads_a_moving_group_from_its_old_engine(tmp_path, monkeypatch,
                                                                   cached: bool) -> None:
    """Migration without a release stage: the new engine's task reads the group's state as
    of the batch before, from the old engine's cache (same executor) or its durable
    changelog (any other executor), whether the old engine's task of the same batch has run
    yet or not; the result is the same and the old engine no longer owns the group."""
    import keyshift.streaming.engines as engines

    monkeypatch.setattr(engines, "cache_root", lambda _key: tmp_path / "cache")
    first = list(run_engine(_spec(tmp_path, 0), 0, _event_input(30)))
    caches = {0: _task(first)["cache_id"]} if cached else {}
    group = next(r[0] for kind, r in first if kind == LOAD)
    before = DurableState(str(tmp_path / "state")).read(0, 0)[group]
    moves = {"moves_out": {0: [group]}, "moves_in": {1: [group]}, "caches": caches,
             "staging": str(tmp_path / "staged"), "migration_id": "m1"}

    new = list(run_engine(_spec(tmp_path, 1, **moves), 1, iter(())))  # before the old task
    old = _task(list(run_engine(_spec(tmp_path, 1, **moves), 0, iter(()))))
    again = list(run_engine(_spec(tmp_path, 1, **moves), 1, iter(())))  # a retry, after it
    assert old["released"] == 1 and _task(new)["restored"] == 1
    assert _task(new)["restored_bytes"] == _task(again)["restored_bytes"] == len(before)
    durable = DurableState(str(tmp_path / "state"))
    assert group not in durable.read(0, 1) and durable.read(1, 1)[group] == before
    (snap,) = _staged(tmp_path, "state_snapshots")  # the retry staged the same file again
    assert (snap["group"], snap["from_engine"], snap["to_engine"], snap["state"],
            snap["migration_id"]) == (group, 0, 1, before, "m1")


def test_read_moved_trusts_only_the_reported_cache(tmp_path) -> None:
    """A cache with another id (a rebuilt or foreign copy) is not read; the changelog is."""
    durable = DurableState(str(tmp_path / "state"))
    durable.write_changes(0, 0, {5: b"durable"})
    s = EngineStore(tmp_path / "cache", 0)
    s.save(0, {5: b"cached"})
    s.mark_applied(0)
    cid = s.cache_id
    s.save(1, {5: None})  # batch 1 (running now) drops the group: invisible to the reader
    s.close()
    assert read_moved(tmp_path / "cache", durable, 0, 1, cid, [5]) == {5: b"cached"}
    assert read_moved(tmp_path / "cache", durable, 0, 1, "other", [5]) == {5: b"durable"}
    assert read_moved(tmp_path / "none", durable, 0, 1, cid, [5, 6]) == {5: b"durable"}
    assert not (tmp_path / "none").exists()  # read-only: no cache created


def test_engine_task_separates_the_wait_for_input_from_its_work(tmp_path, monkeypatch) -> None:
    """Lat counts engine work only: rows that arrive late (a shuffle fetch) are waited for,
    and that wait is recorded apart from the task's duration."""
    import keyshift.streaming.engines as engines

    monkeypatch.setattr(engines, "cache_root", lambda _key: tmp_path / "cache")

    def late_rows(n: int, delay_s: float):
        time.sleep(delay_s)  # nothing has arrived yet
        yield from _event_input(n)

    tasks = [rec for kind, rec in run_engine(_spec(tmp_path, 0), 0, late_rows(50, 0.2))
             if kind == TASK]
    (task,) = tasks
    assert task["events"] == 50
    assert 0.2 <= task["input_wait_s"] <= task["duration_s"]
    assert work_seconds(tasks) == pytest.approx(task["duration_s"] - task["input_wait_s"])
    (empty,) = [rec for kind, rec in run_engine(_spec(tmp_path, 1), 0, late_rows(0, 0.1))
                if kind == TASK]
    assert empty["events"] == 0 and empty["input_wait_s"] >= 0.1  # no row: all of it waited


def test_arrow_engine_reads_and_writes_the_stage_schemas(tmp_path, monkeypatch) -> None:
    """The mapInArrow function: Arrow batches of ENGINE_INPUT in (the typed event a STRUCT,
    as the job's parse gives it; batches with an offset, as Spark's can have), the records
    out as Arrow batches of exactly ENGINE_OUTPUT."""
    import pyarrow as pa

    import keyshift.streaming.engines as engines
    from keyshift.streaming.engines import (
        DEAD,
        ENGINE_INPUT,
        ENGINE_OUTPUT,
        _arrow_schema,
        _OutputColumns,
        event_dicts,
    )

    monkeypatch.setattr(engines, "cache_root", lambda _key: tmp_path / "cache")
    rows = list(_event_rows(13))
    rows[4] = (None, 0, 4, None, "malformed json", "{", T0 / 1e3 + 4, None)
    batch = input_batch("wordcount", rows)
    assert tuple(batch.schema.names) == ENGINE_INPUT
    assert batch.schema.field("event").type == pa.struct(
        [("id", pa.string()), ("key", pa.string()), ("ts", pa.int64()), ("word", pa.string())])
    assert event_dicts(batch.column("event").slice(1)) == [r[3] for r in rows[1:]]
    back = [batch.slice(1, 6), batch.slice(7)]  # the first row left out
    out = _OutputColumns()
    spec = _spec(tmp_path, 0, moves_out={0: [60]}, moves_in={3: [60]})
    for tag, rec in run_engine(spec, 3, back):
        out.add(tag, rec)
    result = out.batch()
    assert result.schema == _arrow_schema()
    assert result.schema.names == [c.split()[0] for c in ENGINE_OUTPUT.split(", ")]
    tags = result.column("tag").to_pylist()
    assert tags.count(TASK) == 1 and tags.count(LOAD) >= 1
    task = json.loads(result.column("task").to_pylist()[tags.index(TASK)])
    assert task["restored"] == 1 and (task["events"], task["dead"]) == (11, 1)
    assert result.column("offset").to_pylist()[tags.index(DEAD)] == 4


def test_an_engine_task_records_its_clocks_and_its_outputs_kafka_times(tmp_path,
                                                                        monkeypatch) -> None:
    """The TASK record carries what keyshift.control.batch_cost stacks and merges: each
    step's seconds, the task's wall start, its worker's fork time and a sketch of the Kafka
    times of the events behind its complex events (issue 45)."""
    import time

    import keyshift.streaming.engines as engines

    monkeypatch.setattr(engines, "cache_root", lambda _key: tmp_path / "cache")
    before = time.time()
    recs = list(run_engine(_spec(tmp_path, 0), 0, _event_input(40)))
    task = _task(recs)
    for k in ("open_s", "fetch_s", "load_s", "operator_s", "save_s", "input_wait_s"):
        assert 0 <= task[k] <= task["duration_s"], k
    assert before <= task["started_at"] <= time.time()
    assert task["worker_forked_at"] is None or task["worker_forked_at"] <= task["started_at"]
    outs = [r for kind, r in recs if kind == OUT]
    sketch = task["out_kts"]
    assert outs and sketch["n"] == len(outs) and len(sketch["q"]) == 21
    assert T0 / 1e3 <= sketch["q"][0] <= sketch["q"][-1] <= T0 / 1e3 + 40


def test_an_operator_reads_each_declared_type_as_its_python_value() -> None:
    """The typed event reaches the operator as one dict per row: every declared field (None
    where the record had none), each its type's Python value as Spark's Arrow hands it over
    (a MAP a dict, not Arrow's list of pairs; a TIMESTAMP an aware datetime), the extra
    fields beside them, and None for a row without an event."""
    from datetime import UTC, date, datetime
    from decimal import Decimal

    import pyarrow as pa

    from keyshift.streaming.engines import event_dicts

    kinds = pa.struct([
        ("id", pa.string()), ("n", pa.int64()), ("x", pa.float64()), ("ok", pa.bool_()),
        ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
        ("price", pa.decimal128(10, 2)), ("blob", pa.binary()),
        ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
        ("nested", pa.struct([("m", pa.map_(pa.string(), pa.string()))]))])
    at = datetime(2026, 12, 6, 8, 30, tzinfo=UTC)
    full = {"id": "e1", "n": 7, "x": 0.5, "ok": True, "at": at, "day": date(2026, 12, 6),
            "price": Decimal("12.50"), "blob": b"\x00\xff", "tags": ["a", "b"],
            "attrs": [("k", 1)], "nested": {"m": [("a", "b")]}}
    sparse = {"id": "e2", **{name: None for name in full if name != "id"}}
    events = pa.array([full, None, sparse], type=kinds)
    got = event_dicts(events, offset=[10, 11, 12])
    assert got[0] == {**full, "attrs": {"k": 1}, "nested": {"m": {"a": "b"}}, "offset": 10}
    assert got[0]["at"].tzinfo is not None
    assert got[1] is None
    assert got[2] == {**sparse, "offset": 12}
