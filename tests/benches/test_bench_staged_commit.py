"""bench/bench_staged_commit.py commits the same staged round both ways and times each
(never asserted: a bench's numbers are read, not tested); it checks every row landed once."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_both_paths_commit_every_staged_row_once(spark, spark_config, tmp_path) -> None:
    from deltalake import DeltaTable

    from bench import bench_staged_commit as bench

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    lines: list[str] = []
    got = bench.commit_rounds(spark, cfg, rounds=1, batches=2, engines=2, groups=8,
                              say=lines.append)
    assert {p: len(v["wall"]) for p, v in got.items()} == {"spark": 1, "delta-rs": 1}
    assert [x.split()[2] for x in lines] == ["spark", "delta-rs"]
    # each round's commit went the way it says: 2 rounds (the first unmeasured) x 2 paths
    engines = [h.get("engineInfo", "").split("/")[0].split(":")[0]
               for h in DeltaTable(cfg.table_path("key_loads")).history()]
    assert engines[:4] == ["delta-rs", "Apache-Spark", "delta-rs", "Apache-Spark"]
    assert bench.contract_row("metrics", 3, 1)["batch_id"] == 3
