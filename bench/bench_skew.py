"""The balancer where skew hurts: a CPU-heavy operator, engines = cores, against KG and plain Spark.

keyshift's engine stage is one task per engine; when the operator's work dominates a batch
and there are as many engines as cores, the busiest engine's task *is* the batch, and key
skew makes it longer. This bench measures what DLB (and the other policies) win there, and
what a Spark user who does not use keyshift gets from Spark's own answers to skew.

One private broker (free ports, temporary home) holds one topic per (operator, skew), each
filled once with the same events for every system (4 partitions). Every system drains that
backlog with an ``availableNow`` trigger and ``maxOffsetsPerTrigger`` = ``--batch``, in ONE
Spark session (local[2] here), runs interleaved within each repeat:

* **keyshift** (``StreamJob``, the code ``keyshift run --available-now`` runs) with the policies
  ``kg`` (key grouping: the baseline), ``dlb-h``, ``dlb-s``, ``elb``, and ``dc``/``wc`` where the
  operator offers a summary (word count), at each ``--engines`` value;
* **plain Spark peers written here with the same per-key rule** (the operator's own
  ``process`` over the key's events in the same order, its state as the operator's snapshot
  bytes): ``applyInPandasWithState`` (``apws``) and Spark 4's ``transformWithStateInPandas``
  (``tws``, RocksDB state store) at 2 and 4 shuffle partitions and at Spark's default 200 —
  over-partitioning is what a Spark user does about skew: 200 tasks on 2 cores are handed out
  as cores free up, so a hot partition no longer waits for a cold one; for word count also the
  JVM's own windowed count (``jvm``: partial aggregation before the shuffle, Spark's answer to
  a hot key).

Skews: ``uniform``, ``zipf:1.0``, ``zipf:1.5`` and a moving hot set (``moving``: Zipf 1.5
whose ranks move half the key domain on halfway through the topic, ``zipf:1.5@0,1.5@T+R``;
the topic's events are produced at a virtual rate, so T is halfway whatever the host's speed).

Per run: events/s = events / Σ batch durations (Spark's ``triggerExecution`` for every system;
keyshift writes its query's progress at stop), batch p50 / p95, the slowest task's share of
its batch (Spark's REST API: the longest task of any stage of the batch over the batch's
duration; the UI is on in this session for that), and the RSTD of the stateful stage's
per-task records (keyshift: the engines' loads). Every run's complex events are checked equal
to KG's in the same repeat (none lost, none doubled, none different); a mismatch is printed,
never hidden. Ratios to KG and to the best plain-Spark peer are printed with the targets,
and the **bound**: from the topic's measured per-group loads, the shortest engine stage a
key-granular plan can reach relative to KG's (max(hottest group, total / engines) over KG's
busiest engine), and what that allows for events/s given the engine stage's measured share
of KG's batch (Amdahl). Nothing is asserted.

    .venv/bin/python bench/bench_skew.py                        # heavy, engines 2 and 4, all skews
    .venv/bin/python bench/bench_skew.py --ops heavy,fsd --engines 2 --repeats 3
    .venv/bin/python bench/bench_skew.py --quick                 # 1 repeat, small topics
    make bench BENCH=skew BENCH_ARGS="--skews zipf:1.5 --systems kg,dlb-h,apws-200"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))

from bench_stream import _data_batches, _progress, percentile, spark_durations  # noqa: E402

KEYSHIFT_POLICIES = ("kg", "dlb-h", "dlb-s", "elb", "dc", "wc")
PEERS = ("apws-2", "apws-4", "apws-200", "tws-2", "tws-4", "tws-200", "jvm")
SKEWS = {"uniform": "uniform", "zipf:1.0": "zipf:1.0", "zipf:1.5": "zipf:1.5",
         "zipf:2.0": "zipf:2.0", "moving": None}  # moving: built from the topic's virtual span (moving_skew)
OUT_DDL = "key STRING, ts BIGINT, kind STRING, detail STRING, event_id STRING"
PARTITIONS = 4
VIRTUAL_SPAN_S = 60.0  # the topic's events are stamped over this much schedule time
TARGETS = {"zipf:1.0": 1.15, "zipf:1.5": 1.15, "moving": 1.15, "uniform": 0.97}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def moving_skew(keys: int) -> str:
    """Zipf 1.5 whose ranks move half the key domain on halfway through the schedule."""
    return f"zipf:1.5@0,1.5@{VIRTUAL_SPAN_S / 2:g}+{max(1, keys // 2)}"


# --- the topics ------------------------------------------------------------------------------
@dataclass
class Topic:
    """One filled topic and what the bound needs: each batch's per-group input."""

    name: str
    app: str
    skew: str
    events: int
    batch_loads: list[Any] = field(default_factory=list)  # per batch: np.ndarray of groups


def fill_topic(cfg, app: str, skew: str, events: int, keys: int, batch: int,
               seed: int = 3) -> Topic:
    """Create a topic and fill it with ``events`` events of ``app`` under ``skew``.

    Schedule time advances with the count (``VIRTUAL_SPAN_S`` over the topic), not with the
    wall clock, so a moving hot set moves at the same event on any host. The per-group
    loads of each ``batch`` consecutive events are kept for the bound (Kafka spreads a batch
    over partitions, so a real batch's mix differs slightly: the bound is approximate).
    """
    import numpy as np

    from keyshift.groups import group_of
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.producer import connect
    from keyshift.workloads.events import make_generator

    name = f"skew-{app}-{uuid.uuid4().hex[:6]}"
    create_topic(cfg.kafka.bootstrap, name, PARTITIONS)
    gen = make_generator(app, skew=skew, seed=seed, keys=keys)
    producer = connect(cfg.kafka.bootstrap)
    topic = Topic(name, app, skew, events)
    groups = cfg.groups.count
    now = int(time.time() * 1000)
    sent = 0
    while sent < events:
        n = min(batch, events - sent)
        t_s = VIRTUAL_SPAN_S * sent / events
        chunk = gen.batch(n, t_s, now + int(1000 * t_s))  # event time follows schedule time
        for e in chunk:
            producer.send(name, key=e["key"].encode(),
                          value=json.dumps(e, separators=(",", ":")).encode())
        topic.batch_loads.append(np.bincount([group_of(e["key"], groups) for e in chunk],
                                             minlength=groups).astype(float))
        sent += n
    producer.flush(timeout=60)
    producer.close()
    return topic


def split_bound(topic: Topic, engines: int) -> float:
    """The shortest engine stage a plan that splits keys reaches, as a fraction of KG's:
    total / engines per batch (every event's work anywhere), over KG's busiest engine."""
    import numpy as np

    from keyshift.plan import Plan

    kg_plan = Plan.hashed(len(topic.batch_loads[0]), engines).assignment
    even = sum(loads.sum() / engines for loads in topic.batch_loads)
    kg = sum(np.bincount(kg_plan, weights=loads, minlength=engines).max()
             for loads in topic.batch_loads)
    return float(even / kg)


def stage_bound(topic: Topic, engines: int) -> float:
    """The shortest engine stage a key-granular plan reaches, as a fraction of KG's.

    Per batch a plan that keeps each group on one engine cannot make its busiest engine
    lighter than max(hottest group, total / engines); KG's busiest engine is what the hash
    gave. Summed over batches (the stage of every batch adds to the run's time). Counts
    stand in for work: the heavy rule's cost per event is the same for every key.
    """
    import numpy as np

    from keyshift.plan import Plan

    kg_plan = Plan.hashed(len(topic.batch_loads[0]), engines).assignment
    best = kg = 0.0
    for loads in topic.batch_loads:
        best += max(loads.max(), loads.sum() / engines)
        kg += np.bincount(kg_plan, weights=loads, minlength=engines).max()
    return best / kg


# --- one run ---------------------------------------------------------------------------------
@dataclass
class Sample:
    """One system's drain of one topic."""

    system: str
    app: str
    skew: str
    engines: int  # keyshift's engines; 0 for a peer (its partitions are in its name)
    rows: list[int]
    durations_s: list[float]
    task_share: list[float]  # per batch: the longest task over the batch's duration
    rstd: list[float]  # per batch: RSTD of the stateful stage's per-task records
    outputs: int
    check: str = "?"
    moved_groups: int = 0
    engine_share: float = float("nan")  # keyshift: engine stage seconds / batch seconds

    def stats(self) -> dict[str, float]:
        busy = sum(self.durations_s)
        return {"events_per_s": sum(self.rows) / busy if busy else 0.0,
                "p50": percentile(self.durations_s, 50), "p95": percentile(self.durations_s, 95),
                "task_share": statistics.median(self.task_share) if self.task_share else float("nan"),
                "rstd": statistics.mean(self.rstd) if self.rstd else float("nan"),
                "moved": self.moved_groups, "engine_share": self.engine_share}


class TaskTimes:
    """The longest task of each micro-batch and its stateful stage's per-task records, read
    from Spark's REST API (this session's UI). Jobs are matched to a query by their job group
    (the query's run id) and to a batch by the ``batch`` in their description."""

    def __init__(self, spark) -> None:
        sc = spark.sparkContext
        self.base = (f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
                     if sc.uiWebUrl else None)

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=30) as r:  # noqa: S310 (loopback UI)
            return json.loads(r.read())

    def per_batch(self, run_id: str, stateful_tasks: int | None, prefix: str = ""
                  ) -> dict[int, tuple[float, list[int]]]:
        """{batch: (longest task s, records read per task of its stateful stage)}; a job is
        the query's when its group is the query's run id or its description starts with
        ``prefix`` (keyshift names its batches' jobs "keyshift RUN batch N")."""
        if self.base is None:
            return {}
        out: dict[int, tuple[float, list[int]]] = {}
        try:
            jobs = [j for j in self._get("/jobs") if j.get("jobGroup") == run_id
                    or (prefix and (j.get("description") or "").startswith(prefix))]
            for job in jobs:
                m = re.search(r"batch\s*=?\s*(\d+)", job.get("description", "") or "")
                if not m:
                    continue
                batch = int(m.group(1))
                longest, records = out.get(batch, (0.0, []))
                for stage in job.get("stageIds", []):
                    try:
                        tasks = self._get(f"/stages/{stage}/0/taskList?length=100000")
                    except Exception:  # skipped stage (its shuffle output reused)
                        continue
                    done = [t for t in tasks if t.get("status") == "SUCCESS"]
                    if not done:
                        continue
                    longest = max(longest, max(t.get("duration", 0) for t in done) / 1000)
                    reads = [t.get("taskMetrics", {}).get("shuffleReadMetrics", {})
                             .get("recordsRead", 0) for t in done]
                    if (stateful_tasks is not None and len(done) == stateful_tasks
                            and sum(reads) > 0):
                        records = reads
                out[batch] = (longest, records)
        except Exception as exc:  # the UI is a convenience: the table shows "-" without it
            print(f"(task times unavailable: {exc})", file=sys.stderr)
        return out


def _rstd(loads: Sequence[float]) -> float:
    import numpy as np

    from keyshift.metrics import rstd

    return float(rstd(np.asarray(loads, dtype=float))) if len(loads) > 1 and sum(loads) else 0.0


def run_keyshift(spark, cfg, topic: Topic, policy: str, engines: int, batch: int,
                 app_params: dict[str, Any]) -> tuple[Sample, set]:
    """Drain the topic with ``StreamJob`` (what ``keyshift run --available-now`` runs)."""
    from keyshift.lakehouse.delta import read_run
    from keyshift.streaming.job import JobOptions, StreamJob

    run_id = f"skew-{policy}-{uuid.uuid4().hex[:6]}"
    job = StreamJob(spark, cfg, JobOptions(
        app=topic.app, policy=policy, topic=topic.name, engines=engines,
        max_offsets_per_trigger=batch, run_id=run_id, app_params=dict(app_params),
        available_now=True))
    query = job.start()
    try:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"{policy}: query failed: {query.exception()}")
    finally:
        job.stop()
    lines = [json.loads(x) for x in (job.run_dir / "batches.jsonl").read_text().splitlines()]
    lines = [b for b in lines if any(t["events"] for t in b["tasks"])]
    durations = spark_durations(job.run_dir) or [b["duration_s"] for b in lines]
    rows = [sum(t["events"] for t in b["tasks"]) + sum(t["events"] for t in b["split_tasks"])
            for b in lines]
    # the engine stage's critical path, as bench_engines reads it: its slowest engine task
    # (plus the slowest input task's split work before it when a hot key is split)
    share = [(max(t["duration_s"] for t in b["tasks"] if not t.get("restore"))
              + max((t["duration_s"] for t in b.get("split_tasks", [])), default=0.0)) / d
             for b, d in zip(lines, durations, strict=False) if d > 0]
    engine_loads = [[t["events"] for t in b["tasks"] if not t.get("restore")] for b in lines]
    outs = read_run(spark, cfg, "events_out", run_id).select(
        "key", "ts", "kind", "detail", "event_id").collect()
    got = [tuple(r) for r in outs]
    busy = sum(b["duration_s"] for b in lines)
    sample = Sample(policy, topic.app, topic.skew, engines, rows, durations, share,
                    [_rstd(x) for x in engine_loads], len(got),
                    moved_groups=sum(b["moved_groups"] for b in lines),
                    engine_share=sum(b["engines_s"] for b in lines) / busy if busy else 0.0)
    return sample, _as_set(got, sample)


def _as_set(got: list[tuple], sample: Sample) -> set:
    out = set(got)
    if len(out) != len(got):
        sample.check = f"MISMATCH: {len(got) - len(out)} complex events doubled"
    return out


# --- the plain Spark peers -------------------------------------------------------------------
def _events(spark, cfg, topic: Topic, batch: int):
    """The topic as typed events of the operator's schema, with Kafka partition and offset."""
    from pyspark.sql import functions as F

    from keyshift.apps import resolve_operator

    spec = resolve_operator(topic.app)
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", cfg.kafka.bootstrap)
           .option("subscribe", topic.name).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(batch)).option("failOnDataLoss", "false")
           .load())
    names = [c.name for c in spec.schema.columns]
    parsed = raw.select(F.from_json(F.col("value").cast("string"), spec.schema.ddl()).alias("e"),
                        "partition", "offset")
    needed = ("id", "key", "ts", *spec.cls.required)
    return (parsed.select(*[F.col(f"e.{n}").alias(n) for n in names], "partition", "offset")
            .where(" AND ".join(f"{n} IS NOT NULL" for n in needed)))


def _key_events(frames: Iterator[Any]) -> list[dict[str, Any]]:
    import pandas as pd

    chunks = list(frames)
    pdf = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
    pdf = pdf.sort_values(["ts", "partition", "offset", "id"], kind="stable")
    return pdf.to_dict("records")


def _outputs_frame(outs: list) -> Any:
    import pandas as pd

    return pd.DataFrame([{"key": ce.key, "ts": ce.ts, "kind": ce.kind, "detail": ce.detail,
                          "event_id": ce.event_id} for _, ce in outs])


def apws_fn(app: str, params: dict[str, Any]) -> Callable:
    """applyInPandasWithState's per-key function: the operator's rule, state = its snapshot."""
    def fn(key: tuple, frames: Iterator[Any], state) -> Iterator[Any]:
        from keyshift.apps import make_operator

        op = make_operator(app, **params)
        if state.exists:
            op.restore(0, bytes(state.get[0]))
        events = _key_events(frames)
        outs = op.process_many(events, [0] * len(events))
        state.update((op.snapshot(0),))
        if outs:
            yield _outputs_frame(outs)

    return fn


def tws_processor(app: str, params: dict[str, Any]) -> Any:
    """transformWithStateInPandas's processor: the same rule, state in one ValueState."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class OperatorProcessor(StatefulProcessor):
        def init(self, handle) -> None:
            self.state = handle.getValueState("operator", "blob BINARY")

        def handleInputRows(self, key, rows, timerValues) -> Iterator[Any]:
            from keyshift.apps import make_operator

            op = make_operator(app, **params)
            if self.state.exists():
                op.restore(0, bytes(self.state.get()[0]))
            events = _key_events(rows)
            outs = op.process_many(events, [0] * len(events))
            self.state.update((op.snapshot(0),))
            if outs:
                yield _outputs_frame(outs)

        def close(self) -> None:
            pass

    return OperatorProcessor()


def _ship_by_value() -> None:
    """The peers' per-key functions live in this script, which the executors cannot import
    when it was imported as a module (a test) rather than run: pickle it by value then, as
    Spark does for ``__main__``."""
    if __name__ != "__main__":
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])


def run_peer(spark, cfg, topic: Topic, system: str, batch: int, app_params: dict[str, Any],
             workdir: Path, tasks: TaskTimes, window_s: float) -> tuple[Sample, set | None]:
    """One plain-Spark drain of the topic; returns its sample and its complex events
    (None for ``jvm``, whose rows are counts, checked against KG's in :func:`check_jvm`)."""
    from pyspark.sql import functions as F

    _ship_by_value()

    kind, _, parts = system.partition("-")
    n = int(parts) if parts else cfg.spark.shuffle_partitions
    frame = _events(spark, cfg, topic, batch)
    old_parts = spark.conf.get("spark.sql.shuffle.partitions")
    old_provider = spark.conf.get(PROVIDER, None)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    if kind == "apws":
        out = frame.groupBy("key").applyInPandasWithState(
            apws_fn(topic.app, app_params), OUT_DDL, "blob BINARY", "append", "NoTimeout")
    elif kind == "tws":
        spark.conf.set(PROVIDER, ROCKSDB)  # transformWithState runs on RocksDB only
        out = frame.groupBy("key").transformWithStateInPandas(
            tws_processor(topic.app, app_params), OUT_DDL, "Append", "None")
    else:  # jvm: the windowed count, partial aggregation before the shuffle
        width = f"{int(window_s * 1000)} milliseconds"
        out = (frame.withColumn("event_time", F.expr("timestamp_millis(ts)"))
               .withWatermark("event_time", width)
               .groupBy(F.window("event_time", width), "key").count()
               .select(F.expr("unix_millis(window.start)").alias("window_start"), "key", "count"))
    path = workdir / f"{system}-{uuid.uuid4().hex[:6]}"
    try:
        query = (out.writeStream.format("delta").outputMode("append")
                 .option("checkpointLocation", str(path / "checkpoint"))
                 .trigger(availableNow=True).start(str(path / "out")))
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"{system}: query failed: {query.exception()}")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old_parts)
        if old_provider is None:
            spark.conf.unset(PROVIDER)
        else:
            spark.conf.set(PROVIDER, old_provider)
    data = _data_batches(_progress(query))
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in data]
    times = tasks.per_batch(str(query.runId), n if kind != "jvm" else None)
    share = [times[p["batchId"]][0] / d for p, d in zip(data, durations, strict=True)
             if p["batchId"] in times and d > 0]
    rstds = [_rstd(times[p["batchId"]][1]) for p in data
             if p["batchId"] in times and times[p["batchId"]][1] and n <= 8]
    rows = spark.read.format("delta").load(str(path / "out")).collect()
    sample = Sample(system, topic.app, topic.skew, 0, [int(p["numInputRows"]) for p in data],
                    durations, share, rstds, len(rows))
    if kind == "jvm":
        sample.extra_counts = {(r["window_start"], r["key"]): r["count"] for r in rows}  # type: ignore[attr-defined]
        return sample, None
    got = [(r["key"], r["ts"], r["kind"], r["detail"], r["event_id"]) for r in rows]
    return sample, _as_set(got, sample)


def check(sample: Sample, got: set | None, reference: set, events: int) -> None:
    """Mark ``sample.check``: its complex events equal KG's, and it read every event."""
    if sample.check.startswith("MISMATCH"):
        return
    if sum(sample.rows) != events:
        sample.check = f"MISMATCH: read {sum(sample.rows)} of {events} events"
    elif got is None:
        sample.check = check_jvm(getattr(sample, "extra_counts", {}), reference)
    elif got != reference:
        sample.check = (f"MISMATCH: {len(reference - got)} of KG's {len(reference)} complex "
                        f"events missing, {len(got - reference)} others")
    else:
        sample.check = "ok"


def check_jvm(counts: dict[tuple[int, str], int], reference: set) -> str:
    """The JVM count agrees with every window KG's word count emitted (the JVM emits more:
    its watermark also closes each key's last window, which the operator keeps open)."""
    wrong = 0
    for key, _ts, _kind, detail, _id in reference:
        d = json.loads(detail)
        if counts.get((d["window_start"], key)) != d["count"]:
            wrong += 1
    return "ok" if not wrong else f"MISMATCH: {wrong} of KG's {len(reference)} windows differ"


# --- the tables ------------------------------------------------------------------------------
def _fmt(x: float, spec: str) -> str:
    return "-" if x != x else format(x, spec)


def report(console, samples: list[Sample], topics: dict[tuple[str, str], list[Topic]],
           engines_list: Sequence[int], repeats: int, args) -> dict[str, Any]:
    """Medians per (operator, skew, engines, system), ratios, targets and the bound."""
    from rich.table import Table

    def med(rows: list[Sample], key: str) -> float:
        vals = [s.stats()[key] for s in rows]
        vals = [v for v in vals if v == v]
        return statistics.median(vals) if vals else float("nan")

    summary: dict[str, Any] = {}
    for app in args.ops:
        for engines in engines_list:
            table = Table(title=f"{app} ({args.params_of(app)}), engines = {engines} on "
                                f"{os.cpu_count()} cores, {args.events} events, batches of "
                                f"{args.batch}, median of {repeats}", show_lines=False)
            for col in ("skew", "system", "events/s", "× KG", "× best peer", "batch p50 s",
                        "batch p95 s", "slowest task / batch", "RSTD %", "moved groups",
                        "outputs = KG"):
                table.add_column(col, justify="right")
            for skew in args.skews:
                mine = [s for s in samples if s.app == app and s.skew == skew
                        and s.engines in (engines, 0)]
                systems = list(dict.fromkeys(s.system for s in mine))
                by = {sys_: [s for s in mine if s.system == sys_] for sys_ in systems}
                if "kg" not in by:
                    continue
                kg = med(by["kg"], "events_per_s")
                peers = {s: med(r, "events_per_s") for s, r in by.items() if s in PEERS}
                best_peer = max(peers, key=peers.get) if peers else None
                for sys_, rows in by.items():
                    eps = med(rows, "events_per_s")
                    checks = {s.check for s in rows}
                    table.add_row(
                        skew, sys_, f"{eps:.0f}", f"{eps / kg:.2f}",
                        f"{eps / peers[best_peer]:.2f}" if best_peer else "-",
                        _fmt(med(rows, "p50"), ".2f"), _fmt(med(rows, "p95"), ".2f"),
                        _fmt(100 * med(rows, "task_share"), ".0f") + "%",
                        _fmt(med(rows, "rstd"), ".1f"),
                        f"{med(rows, 'moved'):.0f}" if sys_ in KEYSHIFT_POLICIES else "-",
                        "ok" if checks == {"ok"} else "; ".join(sorted(checks)))
                    summary[f"{app}|{engines}|{skew}|{sys_}"] = {
                        "events_per_s": eps, "vs_kg": eps / kg,
                        "vs_best_peer": eps / peers[best_peer] if best_peer else None,
                        "best_peer": best_peer, "p50": med(rows, "p50"), "p95": med(rows, "p95"),
                        "task_share": med(rows, "task_share"), "rstd": med(rows, "rstd"),
                        "checks": sorted(checks)}
                table.add_section()
            console.print(table)
            ratio_lines(console, app, engines, args, by_skew=lambda skew: [
                s for s in samples if s.app == app and s.skew == skew
                and s.engines in (engines, 0)], topics=topics, med=med, summary=summary)
    return summary


def ratio_lines(console, app: str, engines: int, args, by_skew, topics, med,
                summary: dict[str, Any]) -> None:
    """DLB-H against KG and the best peer, with the target and the bound for each skew."""
    for skew in args.skews:
        rows = by_skew(skew)
        kg = [s for s in rows if s.system == "kg"]
        dlb = [s for s in rows if s.system == "dlb-h"]
        if not kg or not dlb:
            continue
        peers = {p: med([s for s in rows if s.system == p], "events_per_s")
                 for p in {s.system for s in rows} if p in PEERS}
        best_peer = max(peers, key=peers.get) if peers else None
        vs_kg = med(dlb, "events_per_s") / med(kg, "events_per_s")
        stage = statistics.median(stage_bound(t, engines) for t in topics[(app, skew)])
        share = med(kg, "task_share")  # only the busiest engine task's time can shrink
        allowed = 1.0 / (1.0 - share * (1.0 - stage)) if share == share else float("nan")
        target = TARGETS.get(skew, 1.0)
        peer_txt = (f"; vs best plain-Spark peer ({best_peer}) "
                    f"{med(dlb, 'events_per_s') / peers[best_peer]:.2f} (target >= 1.0)"
                    if best_peer else "")
        console.print(
            f"RATIO {app} engines={engines} {skew}: DLB-H/KG events/s = {vs_kg:.2f} "
            f"(target >= {target:.2f}){peer_txt}")
        console.print(
            f"  bound: no key-granular plan makes the engine stage shorter than {stage:.2f}x "
            f"KG's (the topic's per-group loads); KG's slowest engine task is "
            f"{100 * share:.0f}% of its batch (median), so events/s can rise at most "
            f"{allowed:.2f}x over KG (Amdahl), before DLB's first window (under KG's plan) "
            f"and its migrations")
        summary[f"{app}|{engines}|{skew}|bound"] = {"stage": stage, "engine_share": share,
                                                    "max_vs_kg": allowed, "target": target}
        split_lines(console, app, engines, skew, rows, topics, med, dlb, share, summary)


def split_lines(console, app: str, engines: int, skew: str, rows, topics, med, dlb,
                share: float, summary: dict[str, Any]) -> None:
    """dc / wc against DLB-H (issue 42's target >= 1.2x) with a split's own bound: the
    engine stage can fall to total / engines, so events/s can rise at most by Amdahl's
    1 / (1 - share x (1 - that stage))."""
    for policy in ("dc", "wc"):
        runs = [s for s in rows if s.system == policy]
        if not runs:
            continue
        vs_dlb = med(runs, "events_per_s") / med(dlb, "events_per_s")
        stage = statistics.median(split_bound(t, engines) for t in topics[(app, skew)])
        allowed = 1.0 / (1.0 - share * (1.0 - stage)) if share == share else float("nan")
        console.print(
            f"RATIO {app} engines={engines} {skew}: {policy}/DLB-H events/s = {vs_dlb:.2f} "
            f"(target >= 1.20); a split's bound: the engine stage at best {stage:.2f}x KG's "
            f"(total / engines), so at most {allowed:.2f}x KG's events/s (Amdahl, KG's "
            f"slowest task {100 * share:.0f}% of its batch)")
        summary[f"{app}|{engines}|{skew}|{policy}"] = {"vs_dlb_h": vs_dlb, "stage": stage,
                                                       "max_vs_kg": allowed}


# --- main ------------------------------------------------------------------------------------
def systems_for(app: str, engines_list: Sequence[int], wanted: Sequence[str],
                params: dict[str, Any] | None = None
                ) -> tuple[list[tuple[str, int]], list[str]]:
    """((keyshift policy, engines) runs, peers) that apply to ``app``: dc/wc only for an
    operator with a summary, ``jvm`` only for word count. A policy written ``NAME@E`` runs
    at ``E`` engines only, a bare name at every ``--engines`` value."""
    from keyshift.apps import make_operator

    summarizes = type(make_operator(app, **(params or {}))).summarizes()
    mine: list[tuple[str, int]] = []
    for engines in engines_list:
        for item in wanted:
            name, _, at = item.partition("@")
            if name not in KEYSHIFT_POLICIES or (at and int(at) != engines):
                continue
            if summarizes or name not in ("dc", "wc"):
                mine.append((name, engines))
    peers = [p for p in PEERS if p in wanted and (p != "jvm" or app == "wordcount")]
    return mine, peers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="heavy", help="operators, comma list (heavy, fsd, wordcount)")
    p.add_argument("--engines", default="2,4", help="keyshift engine counts, comma list")
    p.add_argument("--skews", default=",".join(SKEWS), help=f"comma list of {', '.join(SKEWS)}")
    p.add_argument("--systems", default=",".join(KEYSHIFT_POLICIES + PEERS),
                   help="comma list of keyshift policies (NAME@E: at E engines only) and peers")
    p.add_argument("--events", type=int, default=16_000, help="events per topic")
    p.add_argument("--batch", type=int, default=2_000, help="max records per micro-batch")
    p.add_argument("--keys", type=int, default=500, help="distinct keys")
    p.add_argument("--work-us", type=float, default=1000.0, help="heavy: µs of work per event")
    p.add_argument("--theta", type=float, default=5.0, help="DLB's imbScore threshold (%%)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--slow-peer-repeats", type=int, default=1,
                   help="repeats of the 200-partition peers (each takes minutes a run here)")
    p.add_argument("--slow-peer-skews", default="",
                   help="comma list: run the 200-partition peers on these skews only "
                        "(default: every skew)")
    p.add_argument("--mergeable", action="store_true",
                   help="heavy in its mergeable form (dc/wc split its hot keys; issue 42)")
    p.add_argument("--quick", action="store_true", help="1 repeat, 6,000 events, work 300 µs")
    p.add_argument("--json", help="write the samples and the summary to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.events, args.work_us = 1, 6_000, 300.0
    args.ops = [x.strip() for x in args.ops.split(",") if x.strip()]
    args.skews = [x.strip() for x in args.skews.split(",") if x.strip()]
    args.systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    args.engines_list = [int(x) for x in args.engines.split(",") if x.strip()]
    args.slow_peer_skews = [x.strip() for x in args.slow_peer_skews.split(",") if x.strip()]
    bad = [s for s in args.skews if s not in SKEWS]
    bad += [s for s in args.systems if s.partition("@")[0] not in KEYSHIFT_POLICIES + PEERS
            or (s.partition("@")[2] and not s.partition("@")[2].isdigit())]
    if bad:
        p.error(f"unknown skew or system: {', '.join(bad)}")
    if "kg" not in args.systems:
        p.error("kg is the baseline every ratio is taken to: keep it in --systems")
    params = {"heavy": {"work_us": args.work_us, **({"mergeable": True} if args.mergeable
                                                    else {})},
              "wordcount": {"window_s": 1.0}}
    args.app_params = lambda app: dict(params.get(app, {}))
    args.params_of = lambda app: json.dumps(args.app_params(app)) if args.app_params(app) else "defaults"
    return args


def _over_partitioned(peer: str) -> bool:
    """A peer with Spark's default 200 partitions: 200 state-store tasks a batch make it
    one to two orders of magnitude slower here, so it may run in fewer repeats."""
    return peer.endswith("-200")


def warm_up(spark, cfg, plan, args, home: Path, tasks: TaskTimes) -> None:
    """One small drain per kind of system before any is timed: the session's first query
    pays for the JVM's code paths, Python workers and Delta's first commits, and whoever ran
    first would carry that cost."""
    for app, _skew, mine, peers in plan[:1]:
        topic = fill_topic(cfg, app, "zipf:1.0", min(args.events, 2 * args.batch), args.keys,
                           args.batch)
        for name, engines in mine[:1]:
            run_keyshift(spark, cfg, topic, name, engines, args.batch, args.app_params(app))
        for kind in ("apws", "tws", "jvm"):
            peer = next((p for p in peers if p.startswith(kind)), None)
            if peer:
                run_peer(spark, cfg, topic, peer, args.batch, args.app_params(app),
                         home / "peers", tasks, 1.0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rich.console import Console
    from rich.progress import Progress

    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark
    from keyshift.streaming.broker import Broker, free_port

    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-skew-"))
    cfg = load_config(env={}, home=str(home), groups={"count": 4096},
                      kafka={"port": free_port(), "controller_port": free_port()},
                      spark={"trigger_s": 1.0, "shuffle_partitions": 2, "ui": True},
                      controller={"window_s": 1.0, "theta": args.theta})
    broker = Broker.from_config(cfg)
    console = Console(width=230)
    console.print(f"broker: {broker.start()}")
    samples: list[Sample] = []
    topics: dict[tuple[str, str], list[Topic]] = {}
    try:
        spark = get_spark(cfg, app_name="keyshift-bench-skew")
        tasks = TaskTimes(spark)
        plan = [(app, skew, *systems_for(app, args.engines_list, args.systems,
                                              args.app_params(app)))
                for app in args.ops for skew in args.skews]
        total = sum(args.repeats * (len(m) + len(p)) - sum(
            args.repeats - (args.slow_peer_repeats if not args.slow_peer_skews
                            or skew in args.slow_peer_skews else 0)
            for x in p if _over_partitioned(x)) for _, skew, m, p in plan)
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("runs", total=total)
            warm_up(spark, cfg, plan, args, home, tasks)
            for repeat in range(args.repeats):
                for app, skew, mine, peers in plan:
                    spec = moving_skew(args.keys) if skew == "moving" else SKEWS[skew]
                    topic = fill_topic(cfg, app, spec, args.events, args.keys, args.batch)
                    topic.skew = skew
                    topics.setdefault((app, skew), []).append(topic)
                    params = args.app_params(app)
                    done: list[tuple[Sample, set | None]] = []
                    # interleaved, and every other repeat in reverse, so no system always
                    # runs right after the same one (page cache, JIT, the OS's scheduler)
                    order = [("ks", x) for x in mine] + [
                        ("peer", (p, 0)) for p in peers
                        if not _over_partitioned(p) or (repeat < args.slow_peer_repeats and (
                            not args.slow_peer_skews or skew in args.slow_peer_skews))]
                    for kind, (name, engines) in (order if repeat % 2 == 0 else order[::-1]):
                        if kind == "ks":
                            done.append(run_keyshift(spark, cfg, topic, name, engines,
                                                     args.batch, params))
                        else:
                            done.append(run_peer(spark, cfg, topic, name, args.batch, params,
                                                 home / "peers", tasks, 1.0))
                        bar.advance(task)
                    reference = next(got for s, got in done if s.system == "kg")
                    for s, got in done:
                        check(s, got, reference or set(), args.events)
                        samples.append(s)
                        if s.check != "ok":
                            console.print(f"[red]{app} {skew} {s.system} e={s.engines}: "
                                          f"{s.check}[/red]")
    finally:
        broker.stop()
    summary = report(console, samples, topics, args.engines_list, args.repeats, args)
    out = Path(args.json) if args.json else home / "bench_skew.json"
    out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                        if not callable(v)},
                               "samples": [asdict(s) for s in samples],
                               "summary": summary}, indent=1, default=str))
    console.print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
