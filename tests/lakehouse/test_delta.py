"""The Delta gateway: the plan ↔ ``plans`` row codec (no Spark) and the clear error for a
table that is not there (Spark, no Kafka)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from keyshift.lakehouse.delta import plan_of, plan_row
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, TABLES


def test_plan_row_round_trips_a_plan_with_a_dead_slot() -> None:
    plan = Plan(np.array([0, 2, 2, 0, 2]), 3, 7, np.array([True, False, True]))
    row = plan_row(plan, "run-1", "elb", "moved 2 groups", expected_rstd=np.float64(4.5))
    assert list(row) == list(TABLES["plans"].names)  # every column of the contract, in its order
    assert row["scope"] == "run-1" and row["policy"] == "elb" and row["reason"] == "moved 2 groups"
    assert row["groups"] == 5 and row["engines"] == 3 and row["version"] == 7
    assert row["created_at"].tzinfo is UTC
    # plain Python values: what Spark's createDataFrame takes for ARRAY<INT>/ARRAY<BOOLEAN>
    assert all(type(x) is int for x in row["assignment"])
    assert all(type(x) is bool for x in row["live"])
    assert type(row["expected_rstd"]) is float and row["expected_var"] is None
    back = plan_of(row)
    assert back.version == 7 and back.slots == 3
    assert back.assignment.tolist() == [0, 2, 2, 0, 2]
    assert back.live.tolist() == [True, False, True]


def test_plan_row_keeps_a_batch_plans_history_range() -> None:
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 8, tzinfo=UTC)
    row = plan_row(Plan.hashed(8, 2, 3), "baseline", "lptf", created_at=start,
                   source_from=start, source_to=end, expected_var=2.0)
    assert (row["created_at"], row["source_from"], row["source_to"]) == (start, start, end)
    assert row["expected_var"] == 2.0 and row["reason"] is None
    assert plan_of(row).assignment.tolist() == Plan.hashed(8, 2).assignment.tolist()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"assignment": [0, 1, 0]}, r"plans.assignment: 3 entries for groups=4"),
     ({"live": [False, False]}, "at least one live engine"),
     ({"assignment": [0, 1, 2, 0]}, "outside 0..1")],
)
def test_plan_of_rejects_a_bad_row_naming_the_field(change: dict, message: str) -> None:
    row = {**plan_row(Plan.hashed(4, 2), "r", "kg"), **change}
    with pytest.raises(ValueError, match=message):
        plan_of(row)


def test_plan_of_names_a_missing_column() -> None:
    row = plan_row(Plan.hashed(4, 2), "r", "kg")
    del row["live"]
    with pytest.raises(ValueError, match="plans row: missing column 'live'"):
        plan_of(row)


@pytest.mark.integration
def test_missing_table_is_a_clear_error_and_plans_round_trip(spark, spark_config,
                                                             tmp_path) -> None:
    from keyshift.jobs.history import HistoryError, read_history
    from keyshift.lakehouse.delta import (
        TableMissingError,
        append_rows,
        ensure_tables,
        read_run,
        read_table,
        table_exists,
    )

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    with pytest.raises(TableMissingError, match=r"^plans: no Delta table at .*wh.*plans"):
        read_table(spark, cfg, "plans")
    with pytest.raises(HistoryError, match="key_loads: no Delta table at"):
        read_history(spark, cfg, "key_loads")
    with pytest.raises(KeyError, match="plans"):  # an unknown name lists the known ones
        read_table(spark, cfg, "plan")
    assert not table_exists(spark, cfg, "plans")
    ensure_tables(spark, cfg, ["plans"])
    assert table_exists(spark, cfg, "plans") and read_table(spark, cfg, "plans").count() == 0
    plan = Plan(np.array([1, 1, 0]), 2, 4, np.array([True, True]))
    rows = [plan_row(plan, "run-x", "dlb-h", "why")]
    assert append_rows(spark, cfg, "plans", rows, "run-x/plans", 3) == 1
    assert append_rows(spark, cfg, "plans", rows, "run-x/plans", 3) == 1  # skipped by Delta
    (back,) = read_table(spark, cfg, "plans").collect()  # a Spark Row, read by name
    got = plan_of(back)
    assert got.assignment.tolist() == [1, 1, 0] and got.live.tolist() == [True, True]
    assert got.version == 4 and back.schema_version == SCHEMA_VERSION and back.scope == "run-x"
    with pytest.raises(TableMissingError, match="metrics"):
        read_run(spark, cfg, "metrics", "run-x")


@pytest.mark.integration
def test_a_table_of_schema_version_1_reads_and_takes_version_2_rows(spark, spark_config,
                                                                   tmp_path) -> None:
    """A warehouse an older keyshift wrote: ``decisions`` without the floor columns reads
    with them null; the first append of this version adds them (Delta's schema evolution),
    old rows keep nulls, new rows carry their floors."""
    from keyshift.lakehouse.delta import append_rows, read_table

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    old = [c for c in TABLES["decisions"].columns if c.since == 1]
    row = {"schema_version": 1, "run_id": "r", "batch_id": 1, "component": "balancer",
           "decided_at": datetime(2026, 1, 1, tzinfo=UTC), "policy": "dlb-h",
           "action": "none", "reason": "old"}
    (spark.createDataFrame([tuple(row.get(c.name) for c in old)],
                           ", ".join(f"`{c.name}` {c.type}" for c in old))
     .write.format("delta").save(cfg.table_path("decisions")))
    (back,) = read_table(spark, cfg, "decisions").collect()
    assert back.reason == "old" and back.floor_ratio is None and back.hot_group is None
    new = {**row, "schema_version": SCHEMA_VERSION, "batch_id": 2, "reason": "new",
           "floor_ratio": 1.2, "floor_rstd": 20.0, "hot_group": 7, "hot_group_share": 0.6}
    assert append_rows(spark, cfg, "decisions", [new]) == 1
    got = {r.batch_id: r for r in read_table(spark, cfg, "decisions").collect()}
    assert got[1].floor_ratio is None and got[1].schema_version == 1
    assert (got[2].floor_ratio, got[2].hot_group, got[2].schema_version) == (1.2, 7,
                                                                             SCHEMA_VERSION)
    # the batch layer's whole-run writes evolve an old table the same way
    from datetime import date

    from keyshift.jobs.history import SyntheticHistory, synthetic_frames
    from keyshift.lakehouse.delta import replace_runs

    m_old = [c for c in TABLES["metrics"].columns if c.since == 1]
    frames, _ = synthetic_frames(cfg, date(2026, 1, 5), SyntheticHistory(days=1, window_s=3600))
    (spark.createDataFrame(frames[[c.name for c in m_old]].head(2).assign(run_id="old"),
                           ", ".join(f"`{c.name}` {c.type}" for c in m_old))
     .write.format("delta").save(cfg.table_path("metrics")))
    assert replace_runs(spark, cfg, "metrics", frames) == len(frames)
    rows = read_table(spark, cfg, "metrics").toPandas()
    assert rows[rows.run_id == "old"].floor_ratio.isna().all()
    assert rows[rows.run_id != "old"].hot_group.notna().all()


@pytest.mark.integration
def test_per_batch_tables_keep_statistics_of_the_columns_readers_filter_on(
        spark, spark_config, tmp_path) -> None:
    """``events_out`` is made with statistics of ``run_id`` and ``batch_id`` only (each
    micro-batch's commit pays for every column's otherwise); a table an older keyshift made
    gets the property once; the property reads back without the tables' checksum files."""
    from keyshift.lakehouse.delta import (STATS_COLUMNS, align_stats_columns, ensure_tables,
                                          table_properties)

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    assert sorted(ensure_tables(spark, cfg, ["events_out", "metrics"])) == ["events_out",
                                                                          "metrics"]
    assert ensure_tables(spark, cfg, ["events_out"]) == []  # there: nothing made
    path = cfg.table_path("events_out")
    assert table_properties(spark, path)[STATS_COLUMNS] == "run_id,batch_id"
    assert STATS_COLUMNS not in table_properties(spark, cfg.table_path("metrics"))
    assert align_stats_columns(spark, cfg, ["events_out", "metrics"]) == []
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{STATS_COLUMNS}')")  # older
    assert STATS_COLUMNS not in table_properties(spark, path)
    assert align_stats_columns(spark, cfg, ["events_out", "metrics"]) == ["events_out"]
    for crc in (tmp_path / "wh" / "events_out" / "_delta_log").glob("*.crc"):
        crc.unlink()  # delta-rs replays the log instead
    assert table_properties(spark, path)[STATS_COLUMNS] == "run_id,batch_id"
