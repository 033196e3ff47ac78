"""Staged bookkeeping (streaming/staging.py): the contract as Parquet, when a commit is due,
and each (table, batch) landing in Delta exactly once across a crash between a commit and
the deletion of its files."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from keyshift.lakehouse.delta_arrow import arrow_type
from keyshift.streaming.staging import (
    BOOKKEEPING,
    StagedAppends,
    stage_uri,
    write_staged,
)

NOW = datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC)


def _loads(batch: int, engine: int = 0) -> list[dict]:
    return [{"run_id": "r", "batch_id": batch, "window_start": NOW, "group": g,
             "engine": engine, "load": 10 * g + batch, "state_bytes": None, "plan_version": 3}
            for g in range(3)]


def _metrics(batch: int) -> dict:
    return {"run_id": "r", "batch_id": batch, "window_start": NOW, "window_end": NOW,
            "events_in": 5, "dead_letter": 0, "processed": 5, "out_events": 1, "missed": 0,
            "selectivity": 0.2, "engines": 2, "engine_loads": [3, 2], "rstd": 0.1,
            "var_load": 0.25, "input_rate": 2.5, "latency_s": 0.01, "batch_duration_s": 0.5,
            "plan_version": 0, "policy": "kg"}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_contract_types_have_arrow_types() -> None:
    import pyarrow as pa

    assert arrow_type("ARRAY<BIGINT>") == pa.list_(pa.int64())
    assert arrow_type("timestamp") == pa.timestamp("us", tz="UTC")
    with pytest.raises(ValueError, match="MAP<STRING,INT>"):
        arrow_type("MAP<STRING,INT>")


def test_a_commit_is_due_after_the_interval_for_earlier_batches(tmp_path) -> None:
    clock = Clock()
    st = StagedAppends(None, str(tmp_path / "staged"), None, interval_s=10, clock=clock)
    assert not st.pending and not st.due(5)
    st.put("metrics", [_metrics(0)], 0)
    clock.t += 4
    st.staged(1)
    assert st.pending and not st.due(2)
    clock.t += 6
    assert st.due(2)  # batch 0 has waited 10 s
    assert not st.due(0)  # nothing staged before batch 0
    assert sorted(st.files()["metrics"]) == [0]
    with pytest.raises(ValueError, match="events_out: not a staged table"):
        st.put("events_out", [{"run_id": "r"}], 2)
    assert st.put("decisions", [], 2) == 0


def test_a_commit_behind_the_stream_blocks_the_next_and_a_failed_one_is_due_again(
        tmp_path, capsys) -> None:
    """The due commit runs on its own thread while the next batches run: no second commit
    starts meanwhile, commit() (stop, idle) waits for it, and a commit that failed leaves
    its files and is due again at the next batch."""
    import threading

    clock = Clock()
    st = StagedAppends(None, str(tmp_path / "staged"), None, interval_s=10, clock=clock)
    st.put("metrics", [_metrics(0)], 0)
    st.put("decisions", [{"run_id": "r", "batch_id": 0, "component": "balancer"}], 0)
    clock.t += 10
    gate, done = threading.Event(), []

    def slow(name, batches):
        gate.wait(5)
        done.append((name, sorted(batches)))
        return len(batches)

    st._commit = slow
    assert st.due(1)
    st.commit_behind(1)
    st.put("metrics", [_metrics(1)], 1)  # the next batch runs meanwhile
    clock.t += 20
    assert st.running and st.pending and not st.due(2)
    gate.set()
    st.wait()
    assert sorted(done) == [("decisions", [0]), ("metrics", [0])]
    assert set(st.finished()) == {"decisions", "metrics"} and st.finished() == {}

    def broken(name, batches):
        raise OSError(f"{name}: read-only file system")

    st._commit = broken
    st.commit_behind(2)
    st.wait()
    assert "not committed yet" in capsys.readouterr().err
    assert st.due(3) and sorted(st.files()["metrics"]) == [0, 1]  # nothing lost
    st._commit = slow
    assert st.commit() == 3  # at stop: batch 0's decisions, 0 and 1's metrics


@pytest.mark.integration
def test_staged_rows_read_back_as_the_contract(spark, tmp_path) -> None:
    from keyshift.schemas import SCHEMA_VERSION, table

    uri = str(tmp_path / "m.parquet")
    write_staged(uri, "metrics", [_metrics(7)])
    row = spark.read.schema(table("metrics").ddl()).parquet(uri).collect()[0].asDict()
    assert row["schema_version"] == SCHEMA_VERSION and row["engine_loads"] == [3, 2]
    assert row["window_start"].replace(tzinfo=UTC) == NOW  # the session runs in UTC
    assert row["batch_id"] == 7 and row["policy"] == "kg"
    # and nothing of the listing is kept: each staged file is read once and then deleted,
    # and Spark's FileStatusCache would hold every such file's status (up to 250 MB)
    jvm = spark._jvm.org.apache.spark.sql.execution.datasources
    cache = jvm.FileStatusCache.getOrCreate(spark._jsparkSession)
    assert "NoopCache" in cache.getClass().getName()


@pytest.mark.integration
def test_each_batch_lands_once_across_a_crash_between_commit_and_delete(
        spark, spark_config, tmp_path) -> None:
    from keyshift.lakehouse.delta import RunAppends, ensure_tables

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    ensure_tables(spark, cfg, list(BOOKKEEPING))
    root = str(tmp_path / "wh" / "_runs" / "r" / "staged")

    def counts(name: str) -> dict[int, int]:
        rows = (spark.read.format("delta").load(cfg.table_path(name))
                .groupBy("batch_id").count().collect())
        return {r.batch_id: r["count"] for r in rows}

    first = RunAppends(spark, cfg, "r")
    first.fresh = True
    st = StagedAppends(spark, root, first, interval_s=0)
    for b in (0, 1, 2):
        first.begin(b)
        write_staged(stage_uri(root, "key_loads", b, "e0"), "key_loads", _loads(b, 0))
        write_staged(stage_uri(root, "key_loads", b, "e1"), "key_loads", _loads(b, 1))
        st.staged(b)
        st.put("metrics", [_metrics(b)], b)
    assert st.commit(before=2) == 4  # batches 0 and 1 of both tables; 2 waits
    assert counts("key_loads") == {0: 6, 1: 6} and counts("metrics") == {0: 1, 1: 1}
    # batch 3 stages, batch 2 commits ... and the process dies before deleting its files
    first.begin(3)
    write_staged(stage_uri(root, "key_loads", 3, "e0"), "key_loads", _loads(3))
    st.put("metrics", [_metrics(3)], 3)
    kept = {u for us in st.files()["metrics"].values() for u in us}
    st._delete = lambda uris: None  # the crash: nothing is deleted after the commit
    st.commit(before=3)
    assert counts("metrics") == {0: 1, 1: 1, 2: 1}
    assert kept == {u for us in st.files()["metrics"].values() for u in us}

    # Spark had committed batch 2, not 3: the next process starts at batch 3, and first
    # commits all that is staged (batch 3's control rows must be there for its replay)
    again = RunAppends(spark, cfg, "r")
    st2 = StagedAppends(spark, root, again, interval_s=0)
    st2.recover()  # at start, before Spark names the first batch
    again.begin(3)
    assert counts("key_loads") == {0: 6, 1: 6, 2: 6, 3: 3}  # 2 not twice
    assert counts("metrics") == {0: 1, 1: 1, 2: 1, 3: 1}
    assert st2.files() == {}
    # batch 3 runs again: both engines stage (the dead attempt got as far as engine 0), the
    # driver stages its metrics row again; only what Delta lacks is appended
    write_staged(stage_uri(root, "key_loads", 3, "e0"), "key_loads", _loads(3, 0))
    write_staged(stage_uri(root, "key_loads", 3, "e1"), "key_loads", _loads(3, 1))
    st2.staged(3)
    st2.put("metrics", [_metrics(3)], 3)
    again.begin(4)
    write_staged(stage_uri(root, "key_loads", 4, "e0"), "key_loads", _loads(4))
    st2.commit()
    assert counts("key_loads") == {0: 6, 1: 6, 2: 6, 3: 6, 4: 3}
    assert counts("metrics") == {0: 1, 1: 1, 2: 1, 3: 1}
    got = (spark.read.format("delta").load(cfg.table_path("key_loads"))
           .where("batch_id = 1 AND engine = 1").orderBy("group").collect())
    assert [(r.group, r.load, r.plan_version) for r in got] == [(0, 1, 3), (1, 11, 3),
                                                                 (2, 21, 3)]


@pytest.mark.integration
def test_plans_are_staged_under_their_own_key(spark, spark_config, tmp_path) -> None:
    """A plan row has no run id or batch: its key is (scope, version); the initial plan,
    written "before batch 0", stages apart from a plan decided in batch 0."""
    import numpy as np

    from keyshift.lakehouse.delta import RunAppends, ensure_tables
    from keyshift.plan import Plan
    from keyshift.streaming.control_store import ControlLog

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    ensure_tables(spark, cfg, ["plans"])
    appends = RunAppends(spark, cfg, "r")
    staging = StagedAppends(spark, str(tmp_path / "staged"), appends, interval_s=0)
    log = ControlLog(spark, cfg, "r", stager=staging)
    log.write_plan(Plan.hashed(8, 2, version=0), "kg", "initial plan", -1)
    log.write_plan(Plan.hashed(8, 4, version=1), "dlb-h", "rebalance", 0)
    assert log.plans(8) == []  # staged, not committed
    assert sorted(staging.files()["plans"]) == [-1, 0]
    appends.begin(0)  # a process that may have written before: rows are matched by key
    staging.commit()
    log.write_plan(Plan.hashed(8, 2, version=0), "kg", "initial plan", -1)
    staging.commit()
    plans = sorted(log.plans(8), key=lambda p: p.version)
    assert [p.version for p in plans] == [0, 1]
    assert np.array_equal(plans[0].assignment, np.arange(8) % 2)


def test_commit_interval_is_checked_and_comes_from_the_environment() -> None:
    from keyshift.config import load_config
    from keyshift.errors import ConfigError

    assert load_config(env={}).warehouse.commit_interval_s == 10.0
    cfg = load_config(env={"KEYSHIFT_WAREHOUSE__COMMIT_INTERVAL_S": "0"})
    assert cfg.warehouse.commit_interval_s == 0.0
    with pytest.raises(ConfigError, match="commit_interval_s"):
        load_config(env={"KEYSHIFT_WAREHOUSE__COMMIT_INTERVAL_S": "-1"})


@pytest.mark.integration
def test_a_commit_that_failed_after_its_append_lands_once_when_tried_again(
        spark, spark_config, tmp_path) -> None:
    """Issue 26 item 3: the warehouse goes read-only between a commit's append and the
    deletion of its files, in a process past its first batch (whose appends go blind): the
    commit fails, and the same process's next commit of those files appends by row key."""
    import errno

    from keyshift.lakehouse.delta import RunAppends, ensure_tables

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    ensure_tables(spark, cfg, ["metrics"])
    root = str(tmp_path / "wh" / "_runs" / "r" / "staged")
    appends = RunAppends(spark, cfg, "r")
    appends.fresh = True
    st = StagedAppends(spark, root, appends, interval_s=0)
    for b in (0, 1, 2):
        appends.begin(b)
        st.put("metrics", [_metrics(b)], b)
    assert not appends.may_exist(1)  # a blind append, unless the commit knows better
    delete = st._delete

    def read_only(uris):
        raise OSError(errno.EROFS, "Read-only file system", uris[0])

    st._delete = read_only
    with pytest.raises(OSError, match="Read-only"):
        st.commit()
    st._delete = delete
    st.commit()
    rows = spark.read.format("delta").load(cfg.table_path("metrics")).collect()
    assert sorted(r.batch_id for r in rows) == [0, 1, 2]
    assert st.files() == {}
