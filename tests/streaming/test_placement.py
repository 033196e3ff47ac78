"""Placement keys computed in Python (keyshift.streaming.placement) are the ones Spark's own
hash gives: each engine's key lands in that engine's shuffle partition."""

from __future__ import annotations

import pytest

from keyshift.streaming.placement import placement_keys, spark_hash_long

pytestmark = pytest.mark.integration


def test_the_python_hash_is_sparks_hash_of_a_long(spark) -> None:
    from pyspark.sql import functions as F

    ids = list(range(-300, 300)) + [2**31, 2**31 - 1, -2**31, 2**40 + 7, -2**63, 2**63 - 1]
    rows = (spark.createDataFrame([(i,) for i in ids], "id long")
            .select("id", F.hash("id").alias("h")).collect())
    assert [(r.id, spark_hash_long(r.id)) for r in rows] == [(r.id, r.h) for r in rows]


@pytest.mark.parametrize("slots", [1, 2, 4, 7, 16])
def test_each_key_lands_in_its_engines_partition(spark, slots: int) -> None:
    """What the job did with a Spark job before: the smallest id per partition of
    pmod(hash(id), slots); and repartition(slots, key) puts key e in partition e."""
    from pyspark.sql import functions as F

    keys = placement_keys(slots)
    rows = (spark.range(0, 64 * slots)
            .select("id", F.expr(f"pmod(hash(id), {slots})").alias("p"))
            .groupBy("p").agg(F.min("id").alias("id")).collect())
    assert keys == [r["id"] for r in sorted(rows, key=lambda r: r["p"])]
    placed = (spark.createDataFrame([(k,) for k in keys], "pkey long")
              .repartition(slots, "pkey")
              .select("pkey", F.spark_partition_id().alias("part")).collect())
    assert {r.pkey: r.part for r in placed} == {k: e for e, k in enumerate(keys)}


def test_no_slot_is_refused() -> None:
    with pytest.raises(ValueError, match="slots"):
        placement_keys(0)


def test_the_jobs_route_sends_each_group_to_its_plans_engine_and_follows_a_new_plan(
        spark) -> None:
    """BatchFrames.route (two array literals, built once per plan version and slot count):
    after repartition(slots, pkey) a valid event sits in its group's engine's partition, a
    rejected record in engine 0's; the next plan version routes by its own assignment, and
    a batch under the same version reuses the same expression."""
    import numpy as np
    from pyspark.sql import functions as F

    from keyshift.plan import Plan
    from keyshift.streaming.batch_frames import BatchFrames

    groups, slots = 64, 5
    rng = np.random.default_rng(7)
    first = Plan(rng.integers(0, 4, groups), 4)
    moved = first.with_assignment(rng.integers(0, slots, groups), slots=slots)
    rows = [(g, None) for g in range(groups)] + [(None, "malformed json"), (3, "oversized")]
    batch = spark.createDataFrame(rows, "`group` INT, reason STRING")
    frames = BatchFrames("wordcount", ["id", "key", "ts", "word"], groups, "run", "t")
    for plan in (first, moved):
        route = frames.route(plan, slots)
        assert frames.route(plan, slots) is route  # the next batch: the same one
        placed = (batch.select("group", "reason", route).repartition(slots, "pkey")
                  .select("group", "reason", F.spark_partition_id().alias("part")).collect())
        assert len(placed) == len(rows)
        for r in placed:
            want = 0 if r.reason is not None else int(plan.assignment[r.group])
            assert r.part == want, (plan.version, r)
