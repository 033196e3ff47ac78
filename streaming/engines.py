"""Engines: one Spark task per engine per micro-batch, each running the operator over the key
groups the plan gives it, with its working state durable off the executor.

Why this shape (numbers in docs/engines.md, "Benchmarks", and bench/results/):

* The micro-batch is routed (group → engine through the plan of this batch) and shuffled with
  an identity partitioner over engine slots, so partition *e* is engine *e*: exactly one task
  per engine, and the task index is the engine id (the ``TASK`` record proves it per batch).
* An engine's state is durable in a per-engine changelog on the warehouse filesystem and
  cached on the executor that ran it last (:mod:`keyshift.streaming.engine_state`). A batch loads only
  the groups it touches, runs the operator, and writes back only those groups, locally and
  to the changelog, under the batch's version. A re-executed batch (task retry, the query
  restarting after a crash, the task landing on another executor) starts from exactly the
  state as of the batch before it.
* Migration happens in the engines' own Spark job (dlb §3.3): in a batch whose plan differs
  from the last one's, each receiving engine's task reads the arriving groups' state as of
  the last batch from the source engine (its executor cache when this executor holds it,
  else its durable changelog) and installs it *before* it processes the groups' events of
  this batch, while the source's task drops them in the same batch version. So no event
  waits in a buffer, a group has one owner in every batch version, no extra stage or task
  runs, and the driver never holds state bytes.
* A hot key split (``dc``, ``wc``, :mod:`keyshift.policies.hot_split`): the input tasks that
  read its group's events turn them into the operator's summary per key
  (:meth:`keyshift.apps.base.Operator.summarize`, :func:`arrow_split`) before the engines'
  shuffle, a combiner in the same stage; the summary rows go to the group's home engine,
  which combines them and applies them to the key's state in the same batch, so the
  outputs, the state and its one owner are those of key grouping.
* Everything a task produces goes back into Spark as rows (complex events, dead letters, key
  loads, one task record). The driver collects the key loads and the task records
  (O(groups + engines) per batch) and, when a task's complex events weigh at most
  ``BatchSpec.fetch_bytes`` (``OUT_FETCHED``), those too, committing them itself
  (:mod:`keyshift.streaming.output_appends`); the executors write the rest to Delta. The
  task also stages its key loads for the run's next bookkeeping commit
  (:mod:`keyshift.streaming.staging`).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property, partial
from typing import Any

from keyshift.apps import make_operator
from keyshift.quantiles import sketch

from .engine_state import DurableState, cache_root, open_store, read_moved

# Record tags of what an engine task yields.
OUT, LOAD, TASK, DEAD = "out", "load", "task", "dead"
# a complex event the driver fetches with the small rows and commits itself
# (keyshift.streaming.output_appends): a task's outputs no heavier than BatchSpec.fetch_bytes
OUT_FETCHED = "out-fetched"

# The engine stage as Spark sees it (``mapInArrow``): rows in and out travel as Arrow batches,
# so neither side pickles a row, and the outputs are JVM rows that the executors write to
# Delta (or the driver fetches as Arrow, OUT_FETCHED) without another trip through Python.
# The input's columns, in this order; ``event`` is the operator's typed event (a STRUCT of its
# event schema's columns, parsed once in the JVM, NULL on a rejected record or a summary),
# ``pkey`` places a row in partition = engine, and ``summary`` (JSON) is set only on rows
# :func:`arrow_split` makes: a key's summary {"k", "s", "n", "e"} for its home engine, or
# {"task": record} (an input task's split record, which engine 0 passes on).
ENGINE_INPUT = ("grp", "partition", "offset", "event", "reason", "raw", "kafka_ts", "pkey",
                "summary")
ENGINE_OUTPUT = ("tag STRING, engine INT, grp INT, key STRING, ts BIGINT, kind STRING, "
                 "detail STRING, event_id STRING, n BIGINT, size BIGINT, partition INT, "
                 "offset BIGINT, kafka_ts DOUBLE, raw STRING, reason STRING, task STRING")
_OUT_BATCH = 8192  # rows per Arrow batch handed back to the JVM
OUT_ROW_BYTES = 96  # an output row's fixed columns and the run's, about (its strings apart)


class _InputClock:
    """Times how long a task waits for its first input batch.

    A Python engine task starts before its rows have arrived from the JVM (shuffle fetch,
    worker hand-over); in a small batch that wait is most of the task. It is not engine work,
    so it must not count in Lat (seconds of engine work per tuple): a Lat inflated by it,
    measured in a quiet window, made the planner provision for a load that had already gone.
    """

    def __init__(self, rows: Iterable[Any]) -> None:
        self._rows = rows
        self.wait_s = 0.0

    def __iter__(self) -> Iterator[Any]:
        t = time.perf_counter()
        first = True
        for row in self._rows:
            if first:
                self.wait_s, first = time.perf_counter() - t, False
            yield row
        if first:  # no row at all: the whole loop was waiting
            self.wait_s = time.perf_counter() - t


def work_seconds(tasks: Iterable[Mapping[str, Any]]) -> float:
    """Engine work of a batch's tasks: their durations without the wait for input (Lat's
    numerator, for the scaler and the ``metrics`` table alike)."""
    return sum(t["duration_s"] - t.get("input_wait_s", 0.0) for t in tasks)


@dataclass(frozen=True)
class BatchSpec:
    """Everything an engine task needs to know about this batch, shipped in the closure."""

    batch_id: int
    app: str
    params: dict[str, Any]
    run_key: str  # names the executors' cache folder of this run
    state_uri: str  # the durable changelog of this run's engines
    compact_every: int = 100
    moves_out: dict[int, list[int]] = field(default_factory=dict)  # engine → groups leaving
    moves_in: dict[int, list[int]] = field(default_factory=dict)  # engine → groups arriving
    caches: dict[int, str] = field(default_factory=dict)  # engine → cache id of batch − 1
    ingest_only: bool = False  # count and validate only: no operator, no state (keyshift stream)
    staging: str | None = None  # where tasks stage bookkeeping rows (keyshift.streaming.staging)
    started: datetime | None = None  # the batch's start (key_loads, state_snapshots)
    plan_version: int = 0  # the plan routing this batch
    migration_id: str | None = None  # the plan change this batch realizes, if any
    split_homes: dict[int, int] = field(default_factory=dict)  # split group → home's pkey
    engine0_pkey: int = 0  # where dead letters and the split tasks' records go
    fetch_bytes: int = 0  # a task's outputs up to this weight are OUT_FETCHED (0: all OUT)

    @cached_property
    def sources(self) -> dict[int, int]:
        """Moving group → the engine it leaves (the receiving task reads its state there)."""
        return {g: e for e, gs in self.moves_out.items() for g in gs}

    def stage(self, name: str, engine: int, rows: list[dict[str, Any]]) -> None:
        """Stage a task's bookkeeping rows for the run's next commit (keyshift.streaming.staging)."""
        if self.staging is not None and rows:
            from .staging import stage_rows

            stage_rows(self.staging, name, self.batch_id, f"e{engine}", rows)

    @property
    def durable(self) -> DurableState:
        return DurableState(self.state_uri, self.compact_every)

    def open(self, engine: int):
        return open_store(cache_root(self.run_key), self.durable, engine, self.batch_id,
                          self.caches.get(engine))


def fetch_arrivals(spec: BatchSpec, engine: int, op: Any) -> dict[int, bytes]:
    """Migration, receiving side: the state of the groups arriving at ``engine`` in this
    batch, as of the batch before, read from each source engine (:func:`read_moved`); a
    group that never had state arrives as the operator's empty snapshot."""
    arriving = sorted(spec.moves_in.get(engine, []))
    by_source: dict[int, list[int]] = {}
    for g in arriving:
        by_source.setdefault(spec.sources[g], []).append(g)
    root = cache_root(spec.run_key)
    got: dict[int, bytes] = {}
    for src, groups in sorted(by_source.items()):
        got.update(read_moved(root, spec.durable, src, spec.batch_id, spec.caches.get(src),
                              groups))
    return {g: got.get(g) or op.snapshot(g) for g in arriving}


def run_engine(spec: BatchSpec, engine: int, batches: Iterable[Any]) -> Iterator[tuple]:
    """The body of engine ``engine``'s one task in batch ``spec.batch_id``.

    ``batches`` are Arrow record batches of :data:`ENGINE_INPUT` (:func:`input_batch` builds
    one from rows); records that failed validation (``reason`` set) ride along to engine 0
    so that the whole batch is one Spark job. Yields tagged records: OUT complex events,
    DEAD rejected records, LOAD per-group load and state size, and one TASK record (task
    identity, timings, the cache id for the next batch). The steps: the arriving groups'
    state, the input, the touched groups' state, the operator, the state saved, the records.
    """
    if spec.ingest_only:
        yield from _count_only(engine, batches)
        return
    tm = _Timings()
    with tm.step("open_s"):
        store, rebuilt = spec.open(engine)
    try:
        op = make_operator(spec.app, **spec.params)
        leaving = spec.moves_out.get(engine, [])
        # the arriving groups' state is read before the input (it overlaps the shuffle fetch)
        with tm.step("fetch_s"):
            arrived = fetch_arrivals(spec, engine, op)
        stage_snapshots(spec, engine, arrived)
        clock = _InputClock(batches)
        got = yield from _read_input(clock)
        touched = sorted((set(got.groups) | set(got.summarized)) - set(arrived))
        tm.seconds["load_s"] = _restore_state(op, store, spec.batch_id, touched, arrived)
        with tm.step("operator_s"):
            outs = yield from _apply_operator(op, got)
        with tm.step("save_s"):
            snapshots = {g: op.snapshot(g) for g in sorted(set(touched) | set(arrived))}
            compacted = _save_state(spec, engine, store,
                                    {**{g: None for g in leaving}, **snapshots})
        weight = output_weight(outs)
        tag = OUT_FETCHED if outs and weight <= spec.fetch_bytes else OUT
        for g, ce in outs:
            yield (tag, (engine, g, ce.key, ce.ts, ce.kind, ce.detail, ce.event_id))
        yield from _load_records(engine, got, snapshots)
        yield (TASK, {
            **_task_identity(engine),
            "cache_id": store.cache_id, "rebuilt": rebuilt, "compacted": compacted,
            **_task_counts(got, outs, leaving, arrived, snapshots),
            "output_bytes": weight, "outputs_fetched": tag == OUT_FETCHED,
            **tm.seconds, "input_wait_s": clock.wait_s, "started_at": tm.started_at,
            "worker_forked_at": worker_forked_at(),
            # the Kafka times of the events that made complex events: the batch's
            # end-to-end latency once the outputs commit (keyshift.control.batch_cost)
            "out_kts": sketch(_producing_kafka_times(got, outs)),
            "duration_s": time.perf_counter() - tm.t0,
        })
    finally:
        store.close()


@dataclass
class _Timings:
    """A task's clocks: its start (for the batch's stages) and the seconds of its steps,
    the ``*_s`` fields of its TASK record."""

    t0: float = field(default_factory=time.perf_counter)
    started_at: float = field(default_factory=time.time)
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t


def _task_counts(got: _TaskInput, outs: list, leaving: list[int],
                 arrived: Mapping[int, bytes | None],
                 snapshots: Mapping[int, bytes]) -> dict[str, Any]:
    """What a task did, counted: the TASK record's events, outputs, moves and state."""
    return {
        "events": len(got.events), "outputs": len(outs), "dead": got.dead,
        "kafka_ts_first": got.kafka_first, "kafka_ts_last": got.kafka_last,
        "released": len(leaving), "restored": len(arrived),
        "summarized": sum(got.summarized.values()),
        "restored_bytes": sum(len(s or b"") for s in arrived.values()),
        "state_bytes": sum(len(s) for s in snapshots.values()),
    }


def output_weight(outs: list) -> int:
    """What a task's complex events weigh as rows, about (their strings' characters and
    :data:`OUT_ROW_BYTES` a row): the driver fetches a task's outputs only when they are
    light, so a batch never brings it more than it can hold."""
    return sum(OUT_ROW_BYTES + len(str(ce.key)) + len(str(ce.kind)) + len(str(ce.detail))
               + len(str(ce.event_id)) for _, ce in outs)


def _producing_kafka_times(got: _TaskInput, outs: list) -> list[float]:
    """The Kafka append time of the event behind each complex event (matched by event id;
    a split group's outputs, whose events the input tasks summarized, have none here)."""
    if not outs:
        return []
    by_id = {e["id"]: kafka_ts for e, kafka_ts in zip(got.events, got.kafka_ts, strict=True)
             if kafka_ts}
    return [by_id[ce.event_id] for _, ce in outs if ce.event_id in by_id]


def worker_forked_at() -> float | None:
    """Wall time this Python worker process started (Linux ``/proc``; None elsewhere): the
    driver counts a worker forked during the batch as the batch's worker start."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _TaskInput:
    """A task's valid input in processing order (:func:`keyshift.apps.order_key`): each
    event's group, the event and its Kafka time, and the rows themselves as Arrow (a
    rejection's dead letter reads its raw text there); a split group's partial summaries per
    (group, key) and the events those stand for per group; the dead letters so far and the
    span of the events' Kafka times (None without events)."""

    groups: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kafka_ts: list[float | None] = field(default_factory=list)
    rows: Any = None
    summaries: dict[tuple[int, str], list[tuple[int, Any]]] = field(default_factory=dict)
    summarized: dict[int, int] = field(default_factory=dict)
    dead: int = 0
    kafka_first: float | None = None
    kafka_last: float | None = None

    def drop(self, rejected: Iterable[int]) -> None:
        """Forget the events at these positions (the operator refused them)."""
        import pyarrow as pa

        gone = set(rejected)
        keep = [i for i in range(len(self.events)) if i not in gone]
        self.groups = [self.groups[i] for i in keep]
        self.events = [self.events[i] for i in keep]
        self.kafka_ts = [self.kafka_ts[i] for i in keep]
        self.rows = self.rows.take(pa.array(keep, pa.int64()))


def _read_input(batches: Iterable[Any]) -> Generator[tuple, None, _TaskInput]:
    """Read the task's Arrow input column by column: the records that failed validation are
    yielded as dead letters, a split task's record is passed on to the driver, a summary is
    kept for its group; returns the valid events sorted into processing order.

    Columnar, so what Python does per event is one dict: the filters, the sort and the
    Kafka times' span run in Arrow (bench/bench_engine_task.py)."""
    import pyarrow.compute as pc

    got = _TaskInput()
    table = _input_table(batches)
    if table is None:
        return got
    valid = yield from _without_dead(table)
    got.dead, table = table.num_rows - valid.num_rows, valid
    if table["summary"].null_count < table.num_rows:
        parts = table.filter(pc.is_valid(table["summary"]))
        for group, text in zip(parts["grp"].to_pylist(), parts["summary"].to_pylist(),
                               strict=True):
            part = json.loads(text)
            if "task" in part:  # a split task's record, passed on to the driver
                yield (TASK, part["task"])
                continue
            got.summaries.setdefault((group, part["k"]), []).append((part["e"], part["s"]))
            got.summarized[group] = got.summarized.get(group, 0) + part["n"]
        table = table.filter(pc.is_null(table["summary"]))
    _set_events(got, table)
    return got


def _input_table(batches: Iterable[Any]) -> Any:
    """The task's input batches as one Arrow table (None without a row)."""
    import pyarrow as pa

    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None


def _without_dead(table: Any) -> Generator[tuple, None, Any]:
    """Yield the records that failed validation as DEAD records (engine 0 receives them);
    return the other rows."""
    import pyarrow.compute as pc

    if table["reason"].null_count == table.num_rows:
        return table
    dead = table.filter(pc.is_valid(table["reason"]))
    for rec in zip(*(dead[c].to_pylist() for c in ("partition", "offset", "kafka_ts", "raw",
                                                   "reason")), strict=True):
        yield (DEAD, rec)
    return table.filter(pc.is_null(table["reason"]))


def _set_events(got: _TaskInput, table: Any) -> None:
    """The valid rows, sorted in Arrow by :func:`keyshift.apps.order_key`'s fields (event
    time, Kafka partition and offset, id: typed BIGINT and STRING columns, so Arrow's order
    is Python's), made the operator's dicts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not table.num_rows:
        return
    event = table["event"]
    keys = pa.table({"ts": pc.struct_field(event, "ts"), "partition": table["partition"],
                     "offset": table["offset"], "id": pc.struct_field(event, "id")})
    order = [(k, "ascending") for k in keys.column_names]
    table = table.take(pc.sort_indices(keys, sort_keys=order))
    got.rows = table
    got.groups = table["grp"].to_pylist()
    got.kafka_ts = table["kafka_ts"].to_pylist()
    got.events = event_dicts(table["event"].combine_chunks(),
                             partition=table["partition"].to_pylist(),
                             offset=table["offset"].to_pylist())
    span = pc.min_max(table["kafka_ts"]).as_py()
    got.kafka_first, got.kafka_last = span["min"], span["max"]


def _restore_state(op: Any, store: Any, batch_id: int, touched: list[int],
                   arrived: Mapping[int, bytes | None]) -> float:
    """The touched groups' state from the engine's store, then the arriving groups' moved
    state (installed before their events, dlb step v); returns the seconds it took."""
    t0 = time.perf_counter()
    for g, data in store.load(touched, batch_id).items():
        op.restore(g, data)
    for g, data in arrived.items():
        if data:
            op.restore(g, data)
    return time.perf_counter() - t0


def _apply_operator(op: Any, got: _TaskInput) -> Generator[tuple, None, list]:
    """The operator over the events in order, then the split groups' summaries; an event
    it rejects is a dead letter (yielded), not a failed task. Returns the complex events."""
    rejected: dict[int, str] = {}  # event index → reason

    def reject(i: int, exc: Exception) -> None:
        rejected[i] = f"rejected by operator: {exc}"

    outs = op.process_many(got.events, got.groups, reject)
    for i, reason in rejected.items():
        e = got.events[i]
        yield (DEAD, (e["partition"], e["offset"], got.kafka_ts[i],
                      got.rows["raw"][i].as_py(), reason))
    if rejected:
        got.dead += len(rejected)
        got.drop(rejected)
    return outs + apply_summaries(op, got.summaries)


def _save_state(spec: BatchSpec, engine: int, store: Any,
                changes: dict[int, bytes | None]) -> bool:
    """The batch's state changes (None: a group that left) to the executor's cache and the
    durable changelog, a compacted base every ``compact_every`` batches; True when it
    compacted."""
    head = store.head(spec.batch_id)  # the durable file this batch's files follow
    store.save(spec.batch_id, changes)
    spec.durable.write_changes(engine, spec.batch_id, changes, prev=head)
    if changes:
        head = spec.batch_id
        store.set_head(head)
    store.mark_applied(spec.batch_id)
    compacted = bool(spec.compact_every) and spec.batch_id % spec.compact_every == 0 \
        and spec.batch_id > 0
    if compacted:
        spec.durable.write_base(engine, spec.batch_id, store.newest(), prev=head)
        store.set_head(spec.batch_id)
    return compacted


def _load_records(engine: int, got: _TaskInput,
                  snapshots: Mapping[int, bytes]) -> Iterator[tuple]:
    """One LOAD record per group the task ran: its events (a split group's at its home)
    and its state's size."""
    counts = Counter(got.groups)
    counts.update(got.summarized)
    for g, n in counts.items():
        yield (LOAD, (g, engine, n, len(snapshots[g]) if g in snapshots else 0))


def _task_identity(engine: int) -> dict[str, Any]:
    """Which task, process, host and folder ran the engine (-1 outside Spark)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return {
        "engine": engine,
        "partition": ctx.partitionId() if ctx else -1,
        "stage": ctx.stageId() if ctx else -1,
        "attempt": ctx.attemptNumber() if ctx else -1,
        "pid": os.getpid(),
        "host": os.uname().nodename,
        "workdir": os.getcwd(),  # the executor's folder: which worker ran it
    }


def _count_only(engine: int, batches: Iterable[Any]) -> Iterator[tuple]:
    """Ingestion only (``keyshift stream``): the same routing, validation, loads and task
    record as an engine, without an operator or state, so both modes share one pipeline, one
    metrics row and one meaning of Lat (work seconds per tuple). Counted in Arrow: no
    per-event Python at all."""
    import pyarrow.compute as pc
    from pyspark import TaskContext

    t0, started_at = time.perf_counter(), time.time()
    ctx = TaskContext.get()
    clock = _InputClock(batches)
    table = _input_table(clock)
    dead = events = 0
    span: dict[str, Any] = {"min": None, "max": None}
    if table is not None:
        valid = yield from _without_dead(table)
        dead, events = table.num_rows - valid.num_rows, valid.num_rows
        for count in pc.value_counts(valid["grp"]).to_pylist():
            yield (LOAD, (count["values"], engine, count["counts"], 0))
        span = pc.min_max(valid["kafka_ts"]).as_py()
    yield (TASK, {"engine": engine, "partition": ctx.partitionId() if ctx else -1,
                  "stage": ctx.stageId() if ctx else -1,
                  "attempt": ctx.attemptNumber() if ctx else -1, "pid": os.getpid(),
                  "host": os.uname().nodename, "workdir": os.getcwd(), "cache_id": "",
                  "rebuilt": False, "events": events,
                  "outputs": 0, "dead": dead, "released": 0, "restored": 0,
                  "compacted": False, "kafka_ts_first": span["min"],
                  "kafka_ts_last": span["max"],
                  "input_wait_s": clock.wait_s, "started_at": started_at,
                  "worker_forked_at": worker_forked_at(),
                  "duration_s": time.perf_counter() - t0})


def apply_summaries(op: Any, summaries: Mapping[tuple[int, str], list[tuple[int, Any]]],
                    ) -> list[tuple[int, Any]]:
    """The home engine's side of a split key: its parts' summaries combined (in the split
    engines' order, though any order gives the same) and applied to the key's state."""
    outs: list[tuple[int, Any]] = []
    for (g, key), parts in sorted(summaries.items()):
        total = op._new_summary()
        for _, part in sorted(parts, key=lambda p: p[0]):
            total = op.combine(total, part)
        outs.extend((g, ce) for ce in op.apply_summary(g, key, total))
    return outs


def run_split(spec: BatchSpec, part: int, batches: Iterable[Any]) -> Iterator[tuple]:
    """A split key's side in an input task (``part``, the task's partition): the split
    groups' events it read (Arrow batches of :data:`ENGINE_INPUT`, valid events only),
    summarized per key, as rows of :data:`ENGINE_INPUT` for each group's home engine, then
    the task's record (for engine 0 to pass on). An event the operator refuses becomes a
    dead letter for engine 0. Stateless: a retry is free."""
    from pyspark import TaskContext

    t0 = time.perf_counter()
    ctx = TaskContext.get()
    op = make_operator(spec.app, **spec.params)
    got = _TaskInput()
    table = _input_table(batches)
    if table is not None:
        _set_events(got, table)
    # each key's events, in processing order (the input's), with their positions there
    by_key: dict[tuple[int, str], list[tuple[dict[str, Any], float, int]]] = {}
    for i, (group, e, kafka_ts) in enumerate(zip(got.groups, got.events, got.kafka_ts,
                                                 strict=True)):
        by_key.setdefault((group, str(e.get("key"))), []).append((e, kafka_ts, i))
    per_group = Counter(got.groups)
    n = len(got.events)
    dead = 0
    for (g, key), events in sorted(by_key.items()):
        refused: dict[int, str] = {}
        summary = op.summarize((x[0] for x in events), partial(_refuse, refused))
        for i, why in refused.items():
            e, kafka_ts, at = events[i]
            yield (g, e["partition"], e["offset"], None, f"rejected by operator: {why}",
                   got.rows["raw"][at].as_py(), kafka_ts, spec.engine0_pkey, None)
        dead += len(refused)
        kept = len(events) - len(refused)
        if kept:
            yield (g, None, None, None, None, None, None, spec.split_homes[g],
                   json.dumps({"k": key, "e": part, "n": kept, "s": summary}))
    if not n:
        return
    record = {"engine": None, "split": True, "partition": part,
              "stage": ctx.stageId() if ctx else -1,
              "attempt": ctx.attemptNumber() if ctx else -1, "pid": os.getpid(),
              "host": os.uname().nodename, "events": n - dead, "outputs": 0, "dead": dead,
              "keys": len(by_key), "kafka_ts_first": got.kafka_first,
              "groups": {str(g): per_group[g] for g in sorted(per_group)},
              "kafka_ts_last": got.kafka_last, "input_wait_s": 0.0,
              "duration_s": time.perf_counter() - t0}
    yield (-1, None, None, None, None, None, None, spec.engine0_pkey,
           json.dumps({"task": record}))


def _refuse(refused: dict[int, str], i: int, exc: Exception) -> None:
    refused[i] = str(exc)


def arrow_split(spec: BatchSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function that splits hot keys where their events are read, before
    the engines' shuffle: :data:`ENGINE_INPUT` rows in and out. The other rows pass through
    untouched as Arrow (no Python per row); the split groups' valid events are replaced by
    their summaries (:func:`run_split`)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        ctx = TaskContext.get()
        schema = None  # the input's, every column nullable (the summaries have no event)
        split = pa.array(sorted(spec.split_homes), type=pa.int32())
        hot = []
        for b in batches:
            schema = schema or pa.schema([f.with_nullable(True) for f in b.schema])
            mask = pc.fill_null(pc.and_(pc.is_in(b.column("grp"), value_set=split),
                                        pc.is_null(b.column("reason"))), False)
            rest = b.filter(pc.invert(mask))
            if rest.num_rows:  # in the declared schema: the input's nullability may differ
                yield pa.RecordBatch.from_arrays(rest.columns, schema=schema)
            if pc.any(mask).as_py():
                hot.append(b.filter(mask))
        rows = list(run_split(spec, ctx.partitionId() if ctx else 0, hot))
        if rows:
            cols = list(zip(*rows, strict=True))
            yield pa.RecordBatch.from_arrays(
                [pa.array(list(c), type=f.type) for c, f in zip(cols, schema, strict=True)],
                schema=schema)

    return run


def stage_snapshots(spec: BatchSpec, engine: int, arrived: Mapping[int, bytes]) -> None:
    """The arriving groups' state, staged by the receiving task as the migration's
    ``state_snapshots`` rows: the record of what moved (a re-executed batch reads the same
    state again from the source, so the record is the same too)."""
    spec.stage("state_snapshots", engine,
               [{"run_id": spec.run_key, "migration_id": spec.migration_id,
                 "plan_version": spec.plan_version, "group": g, "from_engine": spec.sources[g],
                 "to_engine": engine, "state": state, "bytes": len(state),
                 "batch_id": spec.batch_id, "created_at": spec.started}
                for g, state in sorted(arrived.items())])


def arrow_engine(spec: BatchSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of the engine stage: partition index = engine id; Arrow
    batches of :data:`ENGINE_INPUT` rows in, :data:`ENGINE_OUTPUT` rows out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        engine = ctx.partitionId() if ctx else 0  # 0 outside Spark (a bench, a test)
        out = _OutputColumns()
        loads = []
        for tag, rec in run_engine(spec, engine, batches):
            out.add(tag, rec)
            if tag == LOAD:
                loads.append(rec)
            if len(out) >= _OUT_BATCH:
                yield out.batch()
        stage_loads(spec, engine, loads)
        yield out.batch()

    return run


def stage_loads(spec: BatchSpec, engine: int, loads: list[tuple[int, int, int, int]]) -> None:
    """The task's ``key_loads`` rows, staged for the run's next bookkeeping commit
    (:mod:`keyshift.streaming.staging`) by the executor itself: no Spark job, no Delta commit."""
    head = {"run_id": spec.run_key, "batch_id": spec.batch_id, "window_start": spec.started,
            "plan_version": spec.plan_version}
    spec.stage("key_loads", engine, [{**head, "group": g, "engine": e, "load": n,
                                      "state_bytes": size} for g, e, n, size in loads])


def input_batch(app: str, rows: Iterable[tuple]) -> Any:
    """Rows ``(group, partition, offset, event, reason, raw, kafka_ts, summary)``, the event
    a dict (or None), as one Arrow batch of :data:`ENGINE_INPUT`, typed as the job's parse
    and routing give it to an engine task (tests and benches feed tasks with it)."""
    import pyarrow as pa

    from keyshift.apps import event_schema
    from keyshift.lakehouse.delta_arrow import arrow_type

    schema = event_schema(app)
    fields = {c.name: arrow_type(c.type) for c in schema.columns}
    floats = {n for n, t in fields.items() if pa.types.is_floating(t)}  # JSON's 1 is 1.0 there
    types = {"grp": pa.int32(), "partition": pa.int32(), "offset": pa.int64(),
             "event": pa.struct(list(fields.items())),
             "reason": pa.string(), "raw": pa.string(), "kafka_ts": pa.float64(),
             "pkey": pa.int64(), "summary": pa.string()}
    cols = list(zip(*rows, strict=True)) or [()] * 8
    names = [n for n in ENGINE_INPUT if n != "pkey"]

    def typed(e: dict[str, Any]) -> dict[str, Any]:
        return {c: float(e[c]) if c in floats and e.get(c) is not None else e.get(c)
                for c in fields}

    arrays = {n: pa.array([None if e is None else typed(e) for e in col] if n == "event"
                          else list(col),
                          type=types[n])
              for n, col in zip(names, cols, strict=True)}
    arrays["pkey"] = pa.array([0] * len(arrays["grp"]), pa.int64())
    return pa.RecordBatch.from_arrays([arrays[n] for n in ENGINE_INPUT],
                                      names=list(ENGINE_INPUT))


def event_dicts(events: Any, **extra: list[Any]) -> list[dict[str, Any] | None]:
    """A batch's typed events (an Arrow STRUCT array) as the dicts an operator reads, one per
    row (None for a row without an event), each field its declared type's Python value, plus
    the ``extra`` fields (the engine adds the Kafka partition and offset).

    Field by field, not ``to_pylist`` of the struct: the same dicts at a fifth of the cost
    of parsing each event's JSON (bench/bench_engine_task.py), and a MAP field becomes a dict
    (Arrow's default is a list of pairs) without slowing the other fields down."""
    names = [f.name for f in events.type] + list(extra)
    values = [events.field(i).to_pylist(maps_as_pydicts="strict") if _has_map(f.type)
              else events.field(i).to_pylist() for i, f in enumerate(events.type)]
    # not zip(strict=True): every list is a column of the same batch, and the check costs a
    # third of the dicts' time
    dicts: list[dict[str, Any] | None] = list(map(dict, map(partial(zip, names),
                                                            zip(*values, *extra.values()))))
    if events.null_count:  # a null row's fields are whatever its children hold
        for i, ok in enumerate(events.is_valid().to_pylist()):
            if not ok:
                dicts[i] = None
    return dicts


def _has_map(t: Any) -> bool:
    import pyarrow.types as pt

    if pt.is_map(t):
        return True
    if pt.is_struct(t):
        return any(_has_map(f.type) for f in t)
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t):
        return _has_map(t.value_type)
    return False


class _OutputColumns:
    """Tagged records gathered by tag, made Arrow batches of ENGINE_OUTPUT column by column:
    a record is appended as it is, and each column is built by a few list extensions per tag
    (a row of sixteen cells per record cost 16 µs a record)."""

    # the ENGINE_OUTPUT columns a tag's record fills, in the record's order
    FIELDS: dict[str, tuple[str, ...]] = {
        OUT: ("engine", "grp", "key", "ts", "kind", "detail", "event_id"),
        OUT_FETCHED: ("engine", "grp", "key", "ts", "kind", "detail", "event_id"),
        LOAD: ("grp", "engine", "n", "size"),
        DEAD: ("partition", "offset", "kafka_ts", "raw", "reason"),
        TASK: ("task",),
    }

    def __init__(self) -> None:
        self._recs: dict[str, list[tuple]] = {tag: [] for tag in self.FIELDS}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, tag: str, rec: Any) -> None:
        self._recs[tag].append((json.dumps(rec),) if tag == TASK else rec)
        self._n += 1

    def batch(self) -> Any:
        import pyarrow as pa

        schema = _arrow_schema()
        cols: dict[str, list] = {name: [] for name in schema.names}
        for tag, recs in self._recs.items():
            if not recs:
                continue
            cols["tag"].extend([tag] * len(recs))
            filled = dict(zip(self.FIELDS[tag], zip(*recs, strict=True), strict=True))
            for name in schema.names[1:]:
                cols[name].extend(filled.get(name) or [None] * len(recs))
        self._recs, self._n = {tag: [] for tag in self.FIELDS}, 0
        return pa.RecordBatch.from_arrays(
            [pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


@cache
def _arrow_schema() -> Any:
    """The engine stage's output DDL (:data:`ENGINE_OUTPUT`) as an Arrow schema,
    so each column's name and type are written once."""
    import pyarrow as pa

    from keyshift.lakehouse.delta_arrow import arrow_type

    return pa.schema([(n, arrow_type(t))
                      for n, t in (c.split() for c in ENGINE_OUTPUT.split(", "))])
