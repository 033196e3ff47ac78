"""Integrity of durable files (issue 26 item 2), without Spark: the engines' base and
changelog files and the staged bookkeeping Parquet files carry a checksum; each kind of damage
(truncated, a flipped byte, a torn write cut mid-record, a missing file) is found at read and
named, a damaged base is rebuilt from the base before it, and a damaged changelog or staged
file stops with one line instead of losing rows."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keyshift.streaming import engine_state
from keyshift.streaming.engine_state import (
    NO_PREV,
    DamagedStateFileError,
    DurableState,
    EngineStore,
    decode_file,
    encode,
    open_store,
    read_moved,
)
from keyshift.streaming.staging import (
    BOOKKEEPING,
    CHECKSUM_KEY,
    VALUES_CHECKSUM_KEY,
    StagedAppends,
    StagedFileError,
    arrow_schema,
    read_staged,
    rows_digest,
    stage_uri,
    values_digest,
    write_staged,
)

NOW = datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC)


# -- damage ---------------------------------------------------------------------------
def truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def flip(p: Path, at: int | None = None) -> None:
    body = bytearray(p.read_bytes())
    i = len(body) // 2 if at is None else at
    body[i] ^= 0x40
    p.write_bytes(bytes(body))


def torn(p: Path) -> None:
    """A write cut mid-record: the header and part of the first record's bytes."""
    body = p.read_bytes()
    p.write_bytes(body[: len(engine_state._MAGIC) + engine_state._HEAD.size
                       + engine_state._REC.size + 3])


def missing(p: Path) -> None:
    p.unlink()


DAMAGE = {"truncated": truncate, "flipped": flip, "torn": torn}


# -- an engine's chain, written as the engine task writes it ---------------------------
def _chain(tmp_path) -> tuple[DurableState, Path, dict[int, dict[int, bytes]]]:
    """Batches 1..7 of engine 2, a base every 3 batches (kept: base 3 and its changelogs,
    base 6, changelog 7): the state after each batch, and the files' folder."""
    d = DurableState(str(tmp_path / "r1"), compact_every=3)
    state: dict[int, bytes] = {}
    after: dict[int, dict[int, bytes]] = {0: {}}
    head = NO_PREV
    for b in range(1, 8):
        changes: dict[int, bytes | None] = {b % 4: f"s{b}".encode(), 10 + b: b"x" * b}
        if b == 5:
            changes[12] = None  # group 12 leaves the engine
        d.write_changes(2, b, changes, prev=head)
        head = b
        for g, v in changes.items():
            if v is None:
                state.pop(g, None)
            else:
                state[g] = v
        if b % 3 == 0:
            d.write_base(2, b, dict(state), prev=head)
        after[b] = dict(state)
    folder = tmp_path / "r1" / "engine-0002"
    assert sorted(p.name for p in folder.iterdir()) == [
        "base-000000000003.kss", "base-000000000006.kss", "cl-000000000004.kss",
        "cl-000000000005.kss", "cl-000000000006.kss", "cl-000000000007.kss"]
    return d, folder, after


def test_a_file_carries_its_name_its_predecessor_and_a_checksum() -> None:
    body = encode({5: b"abc", 1: None}, engine=3, batch=9, kind="cl", prev=7)
    records, head = decode_file(body, "f")
    assert records == {1: None, 5: b"abc"}
    assert (head.engine, head.batch, head.kind, head.prev) == (3, 9, "cl", 7)
    assert body.startswith(b"KSST\x03")
    with pytest.raises(DamagedStateFileError, match="checksum mismatch"):
        decode_file(body[:-1] + bytes([body[-1] ^ 1]), "f")
    with pytest.raises(DamagedStateFileError, match="truncated"):
        decode_file(body[:-3], "f")
    with pytest.raises(DamagedStateFileError, match="truncated"):
        decode_file(body[:3], "f")


def test_a_version_2_file_without_checksum_is_read_as_before(tmp_path) -> None:
    """Written between issue 26 items 1 and 2: same records, no header, no checksum."""
    rec = engine_state._REC
    v2 = b"KSST\x02" + rec.pack(4, 2) + b"ab" + rec.pack(6, -1)
    folder = tmp_path / "r0" / "engine-0000"
    folder.mkdir(parents=True)
    (folder / "cl-000000000001.kss").write_bytes(v2)
    d = DurableState(str(tmp_path / "r0"))
    assert d.read(0, 1) == {4: b"ab"}
    d.write_changes(0, 2, {6: b"z"}, prev=1)  # the next file is version 3 and follows it
    assert d.read(0, 2) == {4: b"ab", 6: b"z"}


@pytest.mark.parametrize("damage", [*DAMAGE, "missing"])
def test_a_damaged_base_falls_back_to_the_base_before_and_is_rewritten(
        tmp_path, damage, capsys) -> None:
    d, folder, after = _chain(tmp_path)
    base = folder / "base-000000000006.kss"
    {**DAMAGE, "missing": missing}[damage](base)
    assert d.read(2, 7) == after[7]  # base 3 + changelogs 4, 5, 6 + changelog 7
    assert d.read(2, 6) == after[6]
    if damage != "missing":  # named once, rebuilt, rewritten: the next read needs no fallback
        err = capsys.readouterr().err
        assert "base-000000000006.kss (run r1, engine 2, batch 6, base)" in err
        assert "rebuilt from base 3" in err and len(err.strip().splitlines()) == 1
        records, head = decode_file(base.read_bytes(), "f")
        assert {g: v for g, v in records.items() if v is not None} == after[6]
        assert head.prev == 6
        d.read(2, 7)
        assert capsys.readouterr().err == ""
    # a task rebuilding its cache and a receiving engine read the same
    store, rebuilt = open_store(tmp_path / "cache", d, 2, 8, None)
    assert rebuilt and store.newest() == after[7] and store.head(8) == 7
    store.close()
    assert read_moved(tmp_path / "elsewhere", d, 2, 8, None, [3, 17]) == {
        g: after[7][g] for g in (3, 17)}


@pytest.mark.parametrize("damage", [*DAMAGE])
def test_both_bases_damaged_stops_naming_the_file(tmp_path, damage) -> None:
    d, folder, _ = _chain(tmp_path)
    DAMAGE[damage](folder / "base-000000000006.kss")
    DAMAGE[damage](folder / "base-000000000003.kss")
    with pytest.raises(DamagedStateFileError) as exc:
        d.read(2, 7)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "base-000000000006.kss (run r1, engine 2, batch 6, base)" in msg
    assert "no earlier base rebuilds it" in msg


def test_a_missing_oldest_base_is_found_by_the_changelog_after_it(tmp_path) -> None:
    """A retry of batch 6 reads the state as of 5: base 3 and changelogs 4, 5. Without base 3
    the changelogs alone would silently start from nothing; changelog 4 names batch 3."""
    d, folder, after = _chain(tmp_path)
    (folder / "base-000000000003.kss").unlink()
    with pytest.raises(DamagedStateFileError) as exc:
        d.read(2, 5)
    msg = str(exc.value)
    assert "cl-000000000004.kss (run r1, engine 2, batch 4, changelog)" in msg
    assert "follows batch 3, but batch 3's file is missing" in msg and "\n" not in msg
    assert d.read(2, 7) == after[7]  # the newest base does not need it


@pytest.mark.parametrize("damage", [*DAMAGE, "missing"])
def test_a_damaged_changelog_stops_with_one_line_naming_it(tmp_path, damage) -> None:
    d, folder, after = _chain(tmp_path)
    {**DAMAGE, "missing": missing}[damage](folder / "cl-000000000004.kss")
    with pytest.raises(DamagedStateFileError) as exc:
        d.read(2, 5)  # base 3 + changelogs 4, 5: changelog 4 is the only record of batch 4
    msg = str(exc.value)
    assert "\n" not in msg
    if damage == "missing":  # found by the next changelog, which names it
        assert "cl-000000000005.kss (run r1, engine 2, batch 5, changelog)" in msg
        assert "follows batch 4, but batch 4's file is missing" in msg
    else:
        assert "cl-000000000004.kss (run r1, engine 2, batch 4, changelog)" in msg
        assert "batch 4's state changes exist nowhere else" in msg
        assert "restore the file" in msg
    with pytest.raises(DamagedStateFileError):  # a rebuilt cache, a migration: the same
        open_store(tmp_path / "cache", d, 2, 6, None)
    with pytest.raises(DamagedStateFileError):
        read_moved(tmp_path / "cache2", d, 2, 6, None, [1])
    # the base after it covers it: batches from 6 on read right
    assert d.read(2, 7) == after[7]


@pytest.mark.parametrize("damage", [*DAMAGE])
def test_the_changelog_of_the_batch_run_again_is_never_read(tmp_path, damage) -> None:
    """A batch that died mid-write runs again from Kafka: its state starts as of the batch
    before, so its own (torn) changelog is not read, and the retry rewrites it."""
    d, folder, after = _chain(tmp_path)
    DAMAGE[damage](folder / "cl-000000000007.kss")
    assert d.read(2, 6) == after[6]
    d.write_changes(2, 7, {3: b"s7", 17: b"x" * 7}, prev=6)
    assert d.read(2, 7) == after[7]


def test_a_file_under_another_name_is_refused(tmp_path) -> None:
    d, folder, _ = _chain(tmp_path)
    shutil.copy(folder / "cl-000000000004.kss", folder / "cl-000000000005.kss")
    with pytest.raises(DamagedStateFileError, match="holds engine 2's cl of batch 4"):
        d.read(2, 5)


def test_the_engine_task_names_the_file_it_follows(tmp_path, monkeypatch) -> None:
    """run_engine writes prev from its cache (or from the durable chain it rebuilt from), so
    the files of a run form a chain; a damaged base in the run's own files is rebuilt and the
    outputs of the next batch equal those of an undamaged run."""
    import keyshift.streaming.engines as engines
    from keyshift.streaming.engines import OUT, TASK, BatchSpec, input_batch, run_engine

    def rows(b: int):
        for i in range(40 * b, 40 * b + 40):
            e = {"key": f"w{i % 7}", "word": f"w{i % 7}", "ts": 1_700_000_000_000 + i,
                 "id": f"e{i}"}
            yield (i % 7 % 5, 0, i, e, None, None, 1_700_000_000 + i, None)

    def run(root: Path, damage_at: int | None) -> list:
        outs, caches = [], {}
        for b in range(6):
            if damage_at == b:
                flip(root / "state" / "engine-0000" / "base-000000000004.kss")
                caches = {}  # and the task lands on a fresh executor
            monkeypatch.setattr(engines, "cache_root", lambda _k, f=root / f"x{b}": f)
            spec = BatchSpec(b, "wordcount", {"window_s": 0.01}, "r", str(root / "state"),
                             compact_every=2, caches=caches)
            recs = list(run_engine(spec, 0, [input_batch("wordcount", rows(b))]))
            caches = {0: next(r for k, r in recs if k == TASK)["cache_id"]}
            outs += [r for k, r in recs if k == OUT]
        return outs

    clean = run(tmp_path / "clean", None)
    folder = tmp_path / "clean" / "state" / "engine-0000"
    heads = {p.name: decode_file(p.read_bytes(), p.name)[1] for p in folder.iterdir()}
    assert {n: h.prev for n, h in heads.items()} == {
        "base-000000000002.kss": 2, "cl-000000000003.kss": 2, "cl-000000000004.kss": 3,
        "base-000000000004.kss": 4, "cl-000000000005.kss": 4}
    assert run(tmp_path / "damaged", 5) == clean


def test_the_cache_keeps_the_head_through_a_rollback(tmp_path) -> None:
    s = EngineStore(tmp_path, 0)
    assert s.head(3) == engine_state.UNKNOWN_PREV  # a cache that never knew: no check
    s.reset({1: b"a"}, 2, head=2)
    s.set_head(3)
    assert (s.head(3), s.head(4)) == (2, 3)
    s.rollback(3)  # a retry of batch 3 follows what batch 2 left
    assert s.head(4) == 2 and s.newest() == {1: b"a"} and s.owned() == {1}
    s.close()


# -- staged bookkeeping ---------------------------------------------------------------
def _loads(batch: int, engine: int = 0) -> list[dict]:
    return [{"run_id": "r1", "batch_id": batch, "window_start": NOW, "group": g,
             "engine": engine, "load": 10 * g + batch, "state_bytes": None,
             "plan_version": 3} for g in range(40)]


def _staged(tmp_path, batch: int = 7) -> tuple[str, Path]:
    root = str(tmp_path / "_runs" / "r1" / "staged")
    uri = stage_uri(root, "key_loads", batch, "e3")
    write_staged(uri, "key_loads", _loads(batch, 3))
    return root, Path(uri)


def test_a_staged_file_carries_the_checksum_of_its_rows(tmp_path) -> None:
    import pyarrow.parquet as pq

    _, path = _staged(tmp_path)
    assert CHECKSUM_KEY in pq.read_schema(path).metadata
    assert read_staged(str(path)).to_pylist()[5]["load"] == 57
    assert pq.read_table(path).num_rows == 40  # still plain Parquet for Spark and status


def test_a_staged_file_without_checksum_is_read_as_before(tmp_path) -> None:
    import pyarrow.parquet as pq

    _, path = _staged(tmp_path)
    tab = pq.read_table(path)
    pq.write_table(tab.replace_schema_metadata({}), path)  # as an older keyshift staged it
    assert read_staged(str(path)).num_rows == 40


def test_the_checksum_covers_values_not_layout() -> None:
    """The same rows chunked or sliced otherwise give one digest; a changed value, a null
    where a value was, a list's item moved to the next list, another NaN, give another."""
    import pyarrow as pa

    rows = {"s": ["a", None, "bc", ""], "i": [1, None, 0, 7], "d": [0.5, float("nan"), None, -0.0],
            "t": [NOW, None, NOW, NOW], "b": [True, None, False, True],
            "l": [[1, 2], [], None, [3]], "raw": [b"x", None, b"", b"yz"]}
    types = {"s": pa.string(), "i": pa.int64(), "d": pa.float64(), "t": pa.timestamp("us", "UTC"),
             "b": pa.bool_(), "l": pa.list_(pa.int32()), "raw": pa.binary()}
    tab = pa.table({k: pa.array(v, type=types[k]) for k, v in rows.items()})
    one = rows_digest(tab)
    chunked = pa.concat_tables([tab.slice(0, 1), tab.slice(1, 2), tab.slice(3)])
    assert chunked.column("s").num_chunks == 3 and rows_digest(chunked) == one
    padded = pa.concat_tables([tab, tab]).slice(4)  # offsets that do not start at 0
    assert rows_digest(padded) == one

    def changed(col: str, values: list) -> str:
        return rows_digest(tab.set_column(tab.column_names.index(col), col,
                                          pa.array(values, type=types[col])))

    assert changed("d", [0.5, float("-nan"), None, -0.0]) == one  # one NaN is any NaN
    for col, values in [("s", ["a", None, "b", "c"]), ("s", ["a", "", "bc", ""]),
                        ("i", [1, 0, 0, 7]), ("d", [0.5, float("nan"), None, 0.0]),
                        ("t", [NOW, None, None, NOW]), ("b", [True, False, False, True]),
                        ("l", [[1], [2], None, [3]]), ("l", [[1, 2], None, [], [3]]),
                        ("raw", [b"x", b"", b"", b"yz"])]:
        assert changed(col, values) != one, (col, values)
    with pytest.raises(TypeError, match="no digest for a staged column of type"):
        rows_digest(pa.table({"m": pa.array([{"a": 1}], type=pa.map_(pa.string(), pa.int64()))}))


@pytest.mark.parametrize("name", BOOKKEEPING)
def test_every_staged_table_reads_back_with_its_checksum(tmp_path, name) -> None:
    """A row with a value in every column and one with none, of each staged table's own
    schema, written and read back through Parquet (which renames a list's item field)."""
    import pyarrow as pa

    def value(kind: pa.DataType):
        if pa.types.is_list(kind):
            return [value(kind.value_type), value(kind.value_type)]
        return {pa.string(): "r1", pa.binary(): b"\x00\xff", pa.bool_(): True,
                pa.float64(): 0.25, pa.int32(): 3, pa.int64(): 2**40}.get(kind, NOW)

    schema = arrow_schema(name)
    full = {f.name: value(f.type) for f in schema if f.name != "schema_version"}
    uri = stage_uri(str(tmp_path / "staged"), name, 4, "driver")
    write_staged(uri, name, [full, {k: None for k in full}])
    got = read_staged(uri).to_pylist()
    assert got[0] == {"schema_version": got[0]["schema_version"], **full}
    assert all(v is None for k, v in got[1].items() if k != "schema_version")


def test_a_file_staged_with_the_value_by_value_checksum_is_still_checked(tmp_path) -> None:
    """A run staged before an upgrade: its files carry the older checksum, which is checked
    (rows kept when it holds, the file refused when a value changed)."""
    import pyarrow.parquet as pq

    _, path = _staged(tmp_path)
    tab = pq.read_table(path)
    pq.write_table(tab.replace_schema_metadata(
        {VALUES_CHECKSUM_KEY: values_digest(tab).encode()}), path, write_statistics=False)
    assert CHECKSUM_KEY not in pq.read_schema(path).metadata
    assert read_staged(str(path)).to_pylist()[5]["load"] == 57
    _flip_a_value(path)
    with pytest.raises(StagedFileError, match="checksum mismatch"):
        read_staged(str(path))


def _flip_a_value(path: Path) -> None:
    """One bit of a value inside a data page (found by its bytes, so the file still parses)."""
    body = bytearray(path.read_bytes())
    i = body.index(b"r1")
    body[i + 1] ^= 0x02  # "r1" -> "r3": a well-formed file with other rows
    path.write_bytes(bytes(body))


@pytest.mark.parametrize("damage", ["truncated", "flipped", "torn", "missing"])
def test_a_damaged_staged_file_stops_the_commit_naming_it(tmp_path, damage) -> None:
    root, path = _staged(tmp_path)
    body = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(body[:-8])  # the footer's length and magic gone
    elif damage == "flipped":
        _flip_a_value(path)
    elif damage == "torn":
        path.write_bytes(body[: len(body) // 2])
    st = StagedAppends(None, root, _Appends(), interval_s=0)
    listed = st.files()["key_loads"]
    if damage == "missing":
        path.unlink()
    with pytest.raises(StagedFileError) as exc:
        st._commit("key_loads", listed)  # before Spark is asked for anything
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) - len(str(path)) < 300  # a failure line keeps 400
    assert f"{path} (run r1, table key_loads, batch 7, part e3)" in msg
    assert {"truncated": "truncated", "flipped": "checksum mismatch", "torn": "torn",
            "missing": "missing"}[damage] in msg
    assert "batch 7 is rerun only if the run died in it" in msg
    if damage != "missing":
        assert path.exists()  # nothing deleted, nothing dropped


def test_a_damaged_file_found_behind_the_stream_stops_the_job(tmp_path) -> None:
    """The commit behind the stream does not retry a damaged file forever: the job's next
    wait (the next due batch, or stop) raises it."""
    root, path = _staged(tmp_path)
    _flip_a_value(path)
    st = StagedAppends(None, root, _Appends(), interval_s=0)
    st.staged(7)
    st.commit_behind(8)
    with pytest.raises(StagedFileError, match="checksum mismatch"):
        st.wait()
    st.wait()  # said once
    assert path.exists()
    with pytest.raises(StagedFileError):  # and at stop again
        st.commit()


class _Appends:
    cfg = None
