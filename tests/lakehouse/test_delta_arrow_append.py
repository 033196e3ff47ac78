"""The staged bookkeeping's append through delta-rs (lakehouse/delta_arrow.py
``append_arrow``): what it writes Spark reads as the contract, it leaves to Spark every table
it cannot write as Spark would, and a refusal names the table (or is the storage's)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from keyshift.lakehouse.delta_arrow import (
    FastWriteUnavailable,
    append_arrow,
    arrow_schema,
)
from keyshift.schemas import table
from keyshift.streaming.staging import BOOKKEEPING

NOW = datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)


def _value(kind):
    import pyarrow as pa

    if pa.types.is_list(kind):
        return [_value(kind.value_type), _value(kind.value_type)]
    return {pa.string(): "r1", pa.binary(): b"\x00\xff", pa.bool_(): True,
            pa.float64(): 0.25, pa.int32(): 3, pa.int64(): 2**40}.get(kind, NOW)


def _rows(name: str):
    """A row with every column set and one with every nullable column null."""
    import pyarrow as pa

    schema = arrow_schema(name)
    full = {f.name: _value(f.type) for f in schema}
    sparse = {c.name: None if c.nullable else full[c.name] for c in table(name).columns}
    return pa.Table.from_pylist([full, sparse], schema=schema)


def _local(cfg, tmp_path):
    return cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})


def _engines(cfg, name: str) -> list[str]:
    from deltalake import DeltaTable

    return [h.get("engineInfo", "") for h in DeltaTable(cfg.table_path(name)).history()]


@pytest.mark.integration
def test_every_staged_table_appended_by_delta_rs_reads_back_in_spark(
        spark, spark_config, tmp_path) -> None:
    """Each staged table made by Spark, appended to by delta-rs (arrays, binary, timestamps,
    nulls), then by Spark's own append: Spark reads both as written, and the log says who
    wrote which."""
    from keyshift.lakehouse.delta import append_frame, ensure_tables

    cfg = _local(spark_config, tmp_path)
    ensure_tables(spark, cfg, list(BOOKKEEPING))
    for name in BOOKKEEPING:
        rows = _rows(name)
        append_arrow(cfg, name, rows)
        append_frame(spark.createDataFrame(rows.slice(0, 1), schema=table(name).ddl()),
                     cfg, name)
        got = [r.asDict(recursive=True) for r in
               spark.read.format("delta").load(cfg.table_path(name)).collect()]
        for r in got:  # the session reads timestamps back as naive UTC, binary as bytearray
            r.update({k: v.replace(tzinfo=UTC) for k, v in r.items()
                      if isinstance(v, datetime)})
            r.update({k: bytes(v) for k, v in r.items() if isinstance(v, bytearray)})
        want = rows.to_pylist()
        assert sorted(got, key=repr) == sorted([want[0], *want], key=repr), name
        assert [e.split("/")[0] for e in _engines(cfg, name)[:2]] == ["Apache-Spark",
                                                                      "delta-rs:py-1.6.6"]


@pytest.mark.integration
def test_a_null_in_a_not_null_column_is_refused_naming_the_table(
        spark, spark_config, tmp_path) -> None:
    import pyarrow as pa

    from keyshift.lakehouse.delta import TableWriteError, ensure_tables

    cfg = _local(spark_config, tmp_path)
    ensure_tables(spark, cfg, ["key_loads"])
    rows = _rows("key_loads")
    bad = rows.set_column(rows.schema.get_field_index("load"), "load",
                          pa.array([None, None], pa.int64()))
    with pytest.raises(TableWriteError, match=r"cannot append to table key_loads at .*wh"):
        append_arrow(cfg, "key_loads", bad)
    assert spark.read.format("delta").load(cfg.table_path("key_loads")).count() == 0


@pytest.mark.integration
def test_a_table_spark_must_write_is_left_to_it(spark, spark_config, tmp_path) -> None:
    """A table an older keyshift made (without the columns added since: Spark's append
    evolves it) and a table with a writer feature turned on by hand are not written by
    delta-rs; nothing is appended to either."""
    from keyshift.lakehouse.delta import ensure_tables

    cfg = _local(spark_config, tmp_path)
    old = ", ".join(f"`{c.name}` {c.type}" for c in table("metrics").columns if c.since <= 3)
    spark.createDataFrame([], old).write.format("delta").save(cfg.table_path("metrics"))
    with pytest.raises(FastWriteUnavailable, match="not the contract's"):
        append_arrow(cfg, "metrics", _rows("metrics"))
    ensure_tables(spark, cfg, ["decisions"])
    path = cfg.table_path("decisions")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              "('delta.enableChangeDataFeed' = 'true')")
    with pytest.raises(FastWriteUnavailable, match="written by Spark"):
        append_arrow(cfg, "decisions", _rows("decisions"))
    for name in ("metrics", "decisions"):
        assert spark.read.format("delta").load(cfg.table_path(name)).count() == 0


@pytest.mark.integration
def test_checkpoints_delta_rs_writes_are_read_by_spark(spark, spark_config, tmp_path) -> None:
    from keyshift.lakehouse.delta import append_frame, ensure_tables

    cfg = _local(spark_config, tmp_path)
    ensure_tables(spark, cfg, ["key_loads"])
    path = cfg.table_path("key_loads")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    rows = _rows("key_loads")
    for _ in range(5):
        append_arrow(cfg, "key_loads", rows)
    log = sorted(p.name for p in (tmp_path / "wh" / "key_loads" / "_delta_log").iterdir())
    assert "_last_checkpoint" in log and any(n.endswith(".checkpoint.parquet") for n in log)
    append_frame(spark.createDataFrame(rows, schema=table("key_loads").ddl()), cfg, "key_loads")
    append_arrow(cfg, "key_loads", rows)
    assert spark.read.format("delta").load(path).count() == 7 * 2


@pytest.mark.integration
def test_a_commit_goes_through_delta_rs_unless_rows_may_be_there_or_are_too_many(
        spark, spark_config, tmp_path, monkeypatch) -> None:
    """A run's blind commit appends the rows it checked through delta-rs; a commit by key
    (a process that may have written before) and one of more rows than the driver holds
    go through Spark, and each row lands once either way."""
    from keyshift.lakehouse.delta import RunAppends, ensure_tables
    from keyshift.streaming import staging
    from keyshift.streaming.staging import StagedAppends, stage_uri, write_staged

    cfg = _local(spark_config, tmp_path)
    ensure_tables(spark, cfg, ["key_loads"])
    root = str(tmp_path / "wh" / "_runs" / "r" / "staged")
    appends = RunAppends(spark, cfg, "r")
    appends.fresh = True
    st = StagedAppends(spark, root, appends, interval_s=0)

    def stage(b: int) -> None:
        appends.begin(b)
        rows = [{**r, "run_id": "r", "batch_id": b, "group": g}
                for g, r in enumerate(_rows("key_loads").to_pylist())]
        write_staged(stage_uri(root, "key_loads", b, "e0"), "key_loads", rows)
        st.staged(b)

    stage(0)
    st.commit()
    assert _engines(cfg, "key_loads")[0].startswith("delta-rs")
    monkeypatch.setattr(staging, "HELD_BYTES", 1)
    stage(1)
    st.commit()
    assert _engines(cfg, "key_loads")[0].startswith("Apache-Spark")
    monkeypatch.undo()
    again = RunAppends(spark, cfg, "r")  # a restart: its first batch may be there already
    st = StagedAppends(spark, root, again, interval_s=0)
    appends = again
    stage(1)  # batch 1 runs again, then batch 2
    stage(2)
    before = len(_engines(cfg, "key_loads"))
    st.commit()
    after = _engines(cfg, "key_loads")
    assert len(after) == before + 1 and after[0].startswith("Apache-Spark")
    got = spark.read.format("delta").load(cfg.table_path("key_loads")).collect()
    assert sorted((r.batch_id, r.group) for r in got) == [(b, g) for b in range(3)
                                                           for g in range(2)]


# --- without Spark ------------------------------------------------------------------------
def _rs_table(cfg, name: str) -> None:
    """Table ``name`` as delta-rs makes it (every column nullable): enough for the paths
    that never reach Spark."""
    from deltalake import write_deltalake

    write_deltalake(cfg.table_path(name), arrow_schema(name).empty_table())


def test_only_a_table_on_this_disk_with_deltalake_installed_is_written(
        tmp_path, monkeypatch) -> None:
    from keyshift.config import load_config

    remote = load_config(env={}, home=str(tmp_path), warehouse={"root": "s3a://b/wh"})
    with pytest.raises(FastWriteUnavailable, match="not on this machine's disk"):
        append_arrow(remote, "metrics", _rows("metrics"))
    cfg = load_config(env={}, home=str(tmp_path))
    with pytest.raises(FastWriteUnavailable, match="no table"):
        append_arrow(cfg, "metrics", _rows("metrics"))
    _rs_table(cfg, "metrics")
    monkeypatch.setitem(sys.modules, "deltalake", None)
    with pytest.raises(FastWriteUnavailable, match="deltalake package is not installed"):
        append_arrow(cfg, "metrics", _rows("metrics"))


def test_a_read_only_warehouse_is_the_storages_failure(tmp_path) -> None:
    """The append on a filesystem remounted read-only fails as the storage's (the job waits
    it out: streaming/storage_watch.py), naming the table."""
    from keyshift.config import load_config
    from keyshift.lakehouse.delta import TableWriteError
    from keyshift.streaming.storage_watch import storage_failure

    wh = tmp_path / "wh"
    wh.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(wh)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs for the warehouse: {done.stderr.strip()}")
    try:
        cfg = load_config(env={}, home=str(tmp_path), warehouse={"root": str(wh)})
        _rs_table(cfg, "key_loads")
        subprocess.run(["mount", "-o", "remount,ro", str(wh)], check=True)
        with pytest.raises(TableWriteError, match="key_loads") as err:
            append_arrow(cfg, "key_loads", _rows("key_loads"))
        assert str(err.value).endswith("/wh/key_loads: Read-only file system")
        # the job's waiting line names the refusal, however long delta-rs's own text is
        assert storage_failure(err.value).startswith("OSError: [Errno 30] Read-only file "
                                                     "system")
        assert "(os error 30)" in str(err.value.__cause__.__cause__)  # delta-rs's, kept
    finally:
        subprocess.run(["umount", "-l", str(wh)], capture_output=True)


def test_the_refusal_inside_a_delta_rs_error_is_its_os_error(tmp_path) -> None:
    from keyshift.lakehouse.delta_arrow import _os_error

    long = Exception("Failed to parse parquet: External: Generic LocalFileSystem error: Unable "
                     f"to copy data to file {'x' * 300}: No space left on device (os error 28)")
    got = _os_error(long, tmp_path)
    assert (got.errno, got.strerror, got.filename) == (28, "No space left on device",
                                                       str(tmp_path))
    assert got.__cause__ is long
    assert _os_error(Exception("Schema mismatch"), tmp_path) is None
    mine = OSError(13, "Permission denied")
    assert _os_error(mine, tmp_path) is mine
