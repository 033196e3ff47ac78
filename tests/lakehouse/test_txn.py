"""Once-per-batch appends on real Spark and Delta: a process's first batch looks for its rows
(a crashed predecessor may have committed them), later batches append with one Spark job and
no transaction-id lookup."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.integration]


def _rows(batch: int) -> list[dict]:
    return [{"run_id": "r", "batch_id": batch, "group": g, "engine": 0, "load": g + 1,
             "state_bytes": None, "plan_version": 0, "window_start": None} for g in range(3)]


def _jobs(spark, fn) -> int:
    sc = spark.sparkContext
    group = f"probe-{uuid.uuid4().hex[:6]}"
    sc.setJobGroup(group, group)
    try:
        fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def test_first_batch_of_a_process_is_written_once_later_ones_blind(spark, spark_config,
                                                                   tmp_path) -> None:
    from datetime import UTC, datetime

    from keyshift.lakehouse.delta import RunAppends, ensure_tables

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    ensure_tables(spark, cfg, ["key_loads"])
    now = datetime.now(UTC)

    def rows(b):
        return [{**r, "window_start": now} for r in _rows(b)]

    first = RunAppends(spark, cfg, "r")
    for b in (0, 1, 2):
        first.begin(b)
        first.append_rows("key_loads", rows(b), b)
    # the process dies after batch 2 committed but before Spark recorded it: the next
    # process runs batch 2 again, then 3
    again = RunAppends(spark, cfg, "r")
    again.begin(2)
    assert again.may_exist(2) and not again.may_exist(3)
    again.append_rows("key_loads", rows(2), 2)
    again.begin(3)
    blind = _jobs(spark, lambda: again.append_rows("key_loads", rows(3), 3))
    got = (spark.read.format("delta").load(cfg.table_path("key_loads"))
           .groupBy("batch_id").count().orderBy("batch_id").collect())
    assert [(r.batch_id, r["count"]) for r in got] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert blind == 1  # the write job alone: no state reconstruction for a txn lookup
    fresh = RunAppends(spark, cfg, "new-run")
    fresh.fresh = True  # no process ran "new-run" before (StreamJob.start's marker)
    fresh.begin(0)
    assert not fresh.may_exist(0)
