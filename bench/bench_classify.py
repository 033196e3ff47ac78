"""The price of keyshift's strict validation per event, against the native peer's parse.

Every keyshift batch starts with ``streaming.ingest.Classifier``: the strict VARIANT parse
decides whether a record is one JSON object (no NaN, no duplicate names, no text after it,
...), ``from_json`` gives the typed values. The native peer of ``bench stream`` parses with
``from_json`` and drops what it cannot type, without a trace. This bench runs, on the same
Kafka-shaped rows (the shipped wordcount generator's events as the producer writes them,
cached in memory, ``local[2]``), each projection to Spark's ``noop`` sink:

* **floor**: the Kafka columns and the value as text: what any consumer pays;
* **native** (the baseline): the native peer's parse as ``bench stream`` runs it
  (``bench_stream.native_parse``: ``from_json`` and the filter that drops what it could not
  type, which Spark's optimizer turns into one more ``from_json`` per required field);
* **from_json**: one ``from_json`` and nothing else, the least any typed parse costs;
* **keyshift**: the job's ``Classifier``: the validation in force;
* **one-parse**: the values taken from the VARIANT itself (each field as a variant, its kind
  checked by ``schema_of_variant``, then cast), no ``from_json``: issue 43's "parse once",
  measured as the alternative (scalar fields only; not the job's rule).

It prints wall µs per event of each above the floor (medians of ``--repeats``, modes interleaved so
noise hits all), keyshift / native, keyshift / from_json and one-parse / keyshift, and what the
strictness costs a batch of ``--batch`` events on the machine's cores over each of the two
baselines: the part of ``input`` (``bench stream``'s STAGES) that the peer does not pay.

    .venv/bin/python -m bench classify                    # 200,000 events, 7 repeats
    .venv/bin/python -m bench classify --events 50000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP = "wordcount"
# the variant kinds (schema_of_variant) that from_json reads as the declared type; None: any
KINDS = {"STRING": None, "BIGINT": ("BIGINT",), "INT": ("BIGINT",), "BOOLEAN": ("BOOLEAN",),
         "DOUBLE": ("BIGINT", "DOUBLE", "DECIMAL")}


def records(n: int, seed: int = 1) -> list[tuple[bytes, str, int, int]]:
    """``n`` events of the shipped generator as Kafka rows (value, topic, partition, offset),
    the value the bytes the producer sends."""
    from keyshift.workloads import make_generator

    events = make_generator(APP, skew="zipf:1.0", seed=seed).batch(n, 0.0, 1_700_000_000_000)
    return [(json.dumps(e, separators=(",", ":")).encode(), "t", i % 4, i)
            for i, e in enumerate(events)]


def one_parse(classifier):
    """The classifier with its values from the VARIANT instead of ``from_json``: each field
    once as a variant (presence), its kind checked, then cast (CAST would turn a JSON string
    "1" into a BIGINT, which from_json refuses)."""
    from pyspark.sql import functions as F

    from keyshift.apps import event_schema

    columns = event_schema(APP).columns
    unknown = [c.type for c in columns if c.type.upper() not in KINDS]
    if unknown:
        raise SystemExit(f"one-parse handles {sorted(KINDS)} only, not {unknown}")
    parsed = [c for c in classifier._parsed if "from_json" not in str(c)]
    fields = F.try_variant_get("_v", "$[0]", "struct<" + ",".join(
        f"`{c.name}`:variant" for c in columns) + ">")

    def typed(c):
        value = F.col(f"_f.{c.name}")
        kinds = KINDS[c.type.upper()]
        cast = F.try_variant_get(value, "$", c.type.lower())
        if kinds is None:  # any JSON value; an object's text comes with its keys sorted
            return cast.alias(c.name)
        kind = F.regexp_extract(F.schema_of_variant(value), r"^[A-Z]+", 0)
        return F.when(kind.isin(*kinds), cast).alias(c.name)

    def run(raw):
        with_fields = raw.select(*parsed).select("*", fields.alias("_f"))
        return with_fields.select("*", F.struct(*[typed(c) for c in columns]).alias("_t")) \
            .drop("_f").select(*classifier._present).select(*classifier._classified)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=100_000,
                    help="events a batch, for the strictness's seconds a batch")
    ap.add_argument("--cores", type=int, default=2, help="local[N]: the stream bench's")
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from bench.bench_stream import native_parse
    from keyshift.apps import event_schema
    from keyshift.streaming.ingest import Classifier

    cores = args.cores
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("bench_classify")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    raw = (spark.createDataFrame(records(args.events),
                                 "value binary, topic string, partition int, offset long")
           .withColumn("timestamp", F.current_timestamp()).cache())
    raw.count()
    classifier = Classifier(APP)
    text = F.col("value").cast("string")
    modes = {
        "floor": lambda d: d.select("topic", "partition", "offset", "timestamp",
                                    text.alias("text")),
        "native": native_parse,
        "from_json": lambda d: d.select("partition", "offset", F.from_json(
            text, event_schema(APP).ddl()).alias("e")).select("partition", "offset", "e.*"),
        "keyshift": classifier,
        "one-parse": one_parse(classifier),
    }
    same = sorted(modes["one-parse"](raw).collect()) == sorted(classifier(raw).collect())
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.repeats + 1):  # the first round warms the JIT and is dropped
        for mode, build in modes.items():
            t0 = time.perf_counter()
            build(raw).write.format("noop").mode("overwrite").save()
            times[mode].append(time.perf_counter() - t0)
    med = {m: statistics.median(t[1:]) for m, t in times.items()}
    us = {m: (med[m] - med["floor"]) / args.events * 1e6 for m in modes}
    print(f"# {args.events:,} {APP} events, local[{cores}], medians of {args.repeats} "
          f"(host cpus {os.cpu_count()})")
    print(f"{'mode':<10} {'s':>7} {'us/event over floor':>20}")
    for mode in modes:
        print(f"{mode:<10} {med[mode]:7.3f} {us[mode]:20.2f}")
    for base in ("native", "from_json"):
        print(f"RATIO keyshift / {base} (over floor): {us['keyshift'] / us[base]:.2f}")
    print(f"RATIO one-parse / keyshift (over floor): {us['one-parse'] / us['keyshift']:.2f}"
          f" (same rows as keyshift's: {same})")
    for base, what in (("native", "the native peer's parse"), ("from_json", "one from_json")):
        extra = (us["keyshift"] - us[base]) * args.batch / 1e6  # wall µs on local[cores]
        print(f"BOUND strictness over {what}: {extra:+.3f} s of a {args.batch:,}-event "
              f"batch on {cores} cores")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
