"""The session's settings for a warehouse on this machine: streaming checkpoints (and Delta's
``.crc`` files) go through Hadoop's ``FileSystem`` API, not ``FileContext``, whose rename on
a local disk starts a ``readlink`` process per path (keyshift.lakehouse.session)."""

from __future__ import annotations

import pytest

from keyshift.config import load_config


@pytest.mark.parametrize("root", ["/srv/wh", "file:/srv/wh", "file:///srv/wh", "wh"])
def test_a_warehouse_on_this_machine_checkpoints_through_the_file_system_api(root) -> None:
    from keyshift.lakehouse.session import FILE_SYSTEM_CHECKPOINTS, local_warehouse_conf

    cfg = load_config(env={}, warehouse={"root": root})
    assert local_warehouse_conf(cfg) == {
        "spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS}


@pytest.mark.parametrize("root", ["s3a://bucket/wh", "hdfs://nn:8020/wh", "abfss://c@a/wh"])
def test_a_remote_warehouse_keeps_sparks_checkpoint_manager(root) -> None:
    from keyshift.lakehouse.session import local_warehouse_conf

    assert local_warehouse_conf(load_config(env={}, warehouse={"root": root})) == {}


@pytest.mark.integration
def test_a_query_resumes_from_a_checkpoint_written_through_the_file_system_api(
        spark, tmp_path) -> None:
    """Two available-now runs of one query over a growing Delta table: the second reads only
    the new rows, so the offsets and commits the first wrote were complete and found; no
    temporary file is left beside them."""
    from keyshift.lakehouse.session import FILE_SYSTEM_CHECKPOINTS

    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == \
        FILE_SYSTEM_CHECKPOINTS
    source, sink, checkpoint = (str(tmp_path / x) for x in ("source", "sink", "checkpoint"))

    def run() -> None:
        (spark.readStream.format("delta").load(source).writeStream.format("delta")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True)
         .start(sink).awaitTermination(120))

    spark.range(0, 5).write.format("delta").save(source)
    run()
    spark.range(5, 8).write.format("delta").mode("append").save(source)
    run()
    got = sorted(r.id for r in spark.read.format("delta").load(sink).collect())
    assert got == list(range(8))
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "commits").iterdir()
                  if not p.name.startswith(".")) == ["0", "1"]
    leftovers = [p for p in (tmp_path / "checkpoint").rglob("*") if ".tmp" in p.name]
    assert not leftovers, leftovers
