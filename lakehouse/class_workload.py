"""What a driver writing the class archive runs (:mod:`keyshift.lakehouse.class_sharing`
starts this in a child process): a small job's workload, or with ``--check`` a session only.
Its own module because it needs the session, which itself asks class_sharing for the
archive's options."""

from __future__ import annotations

import sys

from keyshift.config import load_config

from .delta import ensure_tables, read_table
from .session import get_spark


def workload() -> None:
    """What a job's driver does, small: the session, keyshift's tables, a stateful stream
    whose batches go through Arrow to Python and into Delta, reads back. The archive keeps
    the classes this loads."""
    from pyspark.sql import functions as F

    cfg = load_config()
    spark = get_spark(cfg, app_name="keyshift-class-archive")
    ensure_tables(spark, cfg, ["metrics", "decisions"])  # the classes of every table, 2 commits
    out = str(cfg.warehouse_path / "_archive_workload")

    def batch(df, batch_id):  # noqa: ANN001 - Spark's foreachBatch signature
        def unchanged(batches):
            for b in batches:
                yield b
        (df.repartition(2, "key").mapInArrow(unchanged, df.schema)
         .write.format("delta").mode("append").save(out))

    source = str(cfg.home_path / "archive-source")
    spark.range(2000).selectExpr("id AS value").write.mode("overwrite").parquet(source)
    query = (spark.readStream.schema("value LONG").option("maxFilesPerTrigger", 1)
             .parquet(source)
             .withColumn("key", F.col("value") % 7)
             .groupBy("key").agg(F.count("*").alias("n"))
             .writeStream.outputMode("update")
             .option("checkpointLocation", str(cfg.home_path / "archive-checkpoint"))
             .trigger(availableNow=True).foreachBatch(batch).start())
    query.awaitTermination(120)
    spark.read.format("delta").load(out).groupBy("key").agg(F.sum("n")).collect()
    read_table(spark, cfg, "metrics").count()
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--workload"]:
        workload()
    elif args == ["--check"]:
        get_spark(load_config()).range(10).count()
    else:
        print("usage: python -m keyshift.lakehouse.class_workload --workload|--check",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
