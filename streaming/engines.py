"""Engines: one Spark task per engine per micro-batch, each running the application's operator
over the key groups the plan gives it, with its working state in a versioned local store.

Why this shape (numbers in docs/engines.md):

* The micro-batch is routed (group → engine through the plan of this batch) and shuffled with
  an identity partitioner over engine slots, so partition *e* is engine *e*: exactly one task
  per engine, and the task index is the engine id (``TaskRecord`` proves it per batch).
* The working state of an engine lives in an :class:`EngineStore`, a small SQLite file per
  engine slot on the engine's local disk, keyed by (group, batch version). A batch loads only
  the groups it touches (their last version), runs the operator, and writes back only those
  groups under the batch's version. Nothing is reloaded from Delta per batch; Delta only sees
  the state of *moving* groups (``state_snapshots``). Versioning makes a batch idempotent: a
  re-executed batch (task retry, or the query restarting after a crash) first drops every
  version ≥ its own and therefore starts from exactly the state the first attempt saw.
* Migration inside the batch (dlb §3.3 steps i–v): the old engine snapshots and drops each
  group that leaves it, the new engine buffers that group's events of this batch in its store
  (it has no state for it yet); the driver writes the snapshots to Delta, reads them back, and
  a restore task per receiving engine installs them and replays the buffer in event-time order.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keyshift.apps import make_operator, order_key

# Record tags of what an engine task returns to the driver.
OUT, SNAP, LOAD, TASK, DEAD = "out", "snap", "load", "task", "dead"


class EngineStore:
    """Versioned group → state bytes of one engine slot (plus the migration buffer).

    Rows carry the batch version that wrote them; ``state IS NULL`` marks a group dropped in
    that batch (it left the engine). Older versions are pruned as soon as a newer one has
    been written on top of the version a batch loaded, so at most two versions per group
    exist: the one a re-executed batch would start from, and the newest.
    """

    def __init__(self, root: str | os.PathLike[str], engine: int) -> None:
        self.path = Path(root) / f"engine-{engine:04d}.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS state (grp INTEGER, version INTEGER, data BLOB, "
            "PRIMARY KEY (grp, version))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS buffer (grp INTEGER, version INTEGER, seq INTEGER, "
            "event TEXT, PRIMARY KEY (grp, version, seq))"
        )

    def close(self) -> None:
        self._db.close()

    def rollback(self, version: int) -> None:
        """Forget everything a (failed or repeated) attempt of batch ≥ ``version`` wrote."""
        with self._tx():
            self._db.execute("DELETE FROM state WHERE version >= ?", (version,))
            self._db.execute("DELETE FROM buffer WHERE version >= ?", (version,))

    def load(self, groups: Iterable[int], before: int) -> dict[int, bytes]:
        """Newest state of each group written before batch ``before`` (dropped ones omitted)."""
        gs = sorted(set(int(g) for g in groups))
        found: dict[int, bytes | None] = {}
        for chunk in _chunks(gs, 500):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT grp, data FROM state WHERE grp IN ({marks}) AND version < ? "
                "ORDER BY grp, version",
                (*chunk, before),
            )
            for g, data in rows:
                found[g] = data
        return {g: d for g, d in found.items() if d is not None}

    def save(self, version: int, states: Mapping[int, bytes | None]) -> None:
        """Write the groups' state under ``version`` (None = dropped) and prune old versions."""
        if not states:
            return
        with self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO state VALUES (?, ?, ?)",
                [(int(g), version, d) for g, d in states.items()],
            )
            self._db.executemany(
                "DELETE FROM state WHERE grp = ? AND version < (SELECT MAX(version) FROM state "
                "WHERE grp = ? AND version < ?)",
                [(int(g), int(g), version) for g in states],
            )

    def buffer(self, version: int, events: list[tuple[int, dict[str, Any]]]) -> None:
        """Keep events of groups whose state has not arrived yet, in processing order."""
        if not events:
            return
        with self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO buffer VALUES (?, ?, ?, ?)",
                [(g, version, i, json.dumps(e)) for i, (g, e) in enumerate(events)],
            )

    def buffered(self, version: int, groups: Iterable[int]) -> list[tuple[int, dict[str, Any]]]:
        gs = sorted(set(int(g) for g in groups))
        out: list[tuple[int, dict[str, Any]]] = []
        for chunk in _chunks(gs, 500):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT grp, event FROM buffer WHERE version = ? AND grp IN ({marks}) "
                "ORDER BY seq",
                (version, *chunk),
            )
            out.extend((g, json.loads(e)) for g, e in rows)
        return out

    def clear_buffer(self, version: int, groups: Iterable[int]) -> None:
        with self._tx():
            self._db.executemany(
                "DELETE FROM buffer WHERE version = ? AND grp = ?",
                [(version, int(g)) for g in groups],
            )

    def owned(self) -> set[int]:
        """Groups whose newest version holds state (a dropped group is not owned)."""
        rows = self._db.execute(
            "SELECT s.grp, s.data IS NOT NULL FROM state s JOIN (SELECT grp, MAX(version) v "
            "FROM state GROUP BY grp) m ON s.grp = m.grp AND s.version = m.v"
        )
        return {g for g, has in rows if has}

    def _tx(self) -> _Tx:
        return _Tx(self._db)


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


def _chunks(seq: list[int], n: int) -> Iterator[list[int]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


class _InputClock:
    """Times how long a task waits for its first input row.

    A Python engine task starts before its rows have arrived from the JVM (shuffle fetch,
    worker hand-over); in a small batch that wait is most of the task. It is not engine work,
    so it must not count in Lat (seconds of engine work per tuple): a Lat inflated by it,
    measured in a quiet window, made the planner provision for a load that had already gone.
    """

    def __init__(self, rows: Iterable[tuple]) -> None:
        self._rows = rows
        self.wait_s = 0.0

    def __iter__(self) -> Iterator[tuple]:
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
    store_root: str
    moves_out: dict[int, list[int]] = field(default_factory=dict)  # engine → groups leaving
    moves_in: dict[int, list[int]] = field(default_factory=dict)  # engine → groups arriving


def run_engine(spec: BatchSpec, engine: int, rows: Iterable[tuple]) -> Iterator[tuple]:
    """The body of engine ``engine``'s one task in batch ``spec.batch_id``.

    ``rows`` are ``(engine, (group, partition, offset, event_json, reason, raw, kafka_ts))``
    for this engine; records that failed validation (``reason`` set) ride along to engine 0
    so that the whole batch is one Spark job. Yields tagged records: OUT complex events, SNAP
    snapshots of groups leaving, LOAD per-group load and state size, DEAD rejected records,
    and one TASK record (task identity and timings).
    """
    from pyspark import TaskContext

    t0 = time.perf_counter()
    ctx = TaskContext.get()
    store = EngineStore(spec.store_root, engine)
    try:
        store.rollback(spec.batch_id)
        op = make_operator(spec.app, **spec.params)
        # (i) groups leaving: snapshot and drop (the state is the one before this batch)
        leaving = spec.moves_out.get(engine, [])
        snaps = store.load(leaving, spec.batch_id)
        for g in leaving:
            yield (SNAP, (g, engine, snaps.get(g, op.snapshot(g))))
        store.save(spec.batch_id, {g: None for g in leaving})
        t_release = time.perf_counter()

        events: list[tuple[int, dict[str, Any]]] = []
        kafka_first, kafka_last = float("inf"), float("-inf")
        dead = 0
        clock = _InputClock(rows)
        for _, (group, partition, offset, value, reason, raw, kts) in clock:
            if reason is not None:
                dead += 1
                yield (DEAD, (partition, offset, kts, raw, reason))
                continue
            e = json.loads(value)
            e["partition"], e["offset"] = partition, offset
            events.append((group, e))
            if kts:
                kafka_first, kafka_last = min(kafka_first, kts), max(kafka_last, kts)
        events.sort(key=lambda ge: order_key(ge[1]))
        arriving = set(spec.moves_in.get(engine, []))
        waiting = [ge for ge in events if ge[0] in arriving]
        ready = [ge for ge in events if ge[0] not in arriving]
        # (iv) events of an arriving group wait in the buffer until its state is restored
        store.buffer(spec.batch_id, waiting)

        touched = sorted({g for g, _ in ready})
        t_load0 = time.perf_counter()
        for g, data in store.load(touched, spec.batch_id).items():
            op.restore(g, data)
        t_load = time.perf_counter() - t_load0
        outs = op.process_many((e for _, e in ready), (g for g, _ in ready))
        t_save0 = time.perf_counter()
        snapshots = {g: op.snapshot(g) for g in touched}
        store.save(spec.batch_id, snapshots)
        t_save = time.perf_counter() - t_save0
        for g, ce in outs:
            yield (OUT, (engine, g, ce.key, ce.ts, ce.kind, ce.detail, ce.event_id))
        counts: dict[int, int] = {}
        for g, _ in events:
            counts[g] = counts.get(g, 0) + 1
        for g, n in counts.items():
            size = len(snapshots[g]) if g in snapshots else 0
            yield (LOAD, (g, engine, n, size))
        yield (
            TASK,
            {
                "engine": engine,
                "partition": ctx.partitionId() if ctx else -1,
                "stage": ctx.stageId() if ctx else -1,
                "attempt": ctx.attemptNumber() if ctx else -1,
                "pid": os.getpid(),
                "events": len(events),
                "dead": dead,
                "kafka_ts_first": kafka_first if events else None,
                "kafka_ts_last": kafka_last if events else None,
                "buffered": len(waiting),
                "released": len(leaving),
                "release_s": t_release - t0,
                "load_s": t_load,
                "save_s": t_save,
                "state_bytes": sum(len(s) for s in snapshots.values()),
                "input_wait_s": clock.wait_s,
                "duration_s": time.perf_counter() - t0,
            },
        )
    finally:
        store.close()


def run_restore(spec: BatchSpec, engine: int, rows: Iterable[tuple]) -> Iterator[tuple]:
    """Restore task of a receiving engine: install snapshots, replay buffered events in order.

    ``rows`` are ``(engine, (group, state_bytes))``: the old engines' snapshots, already
    durable in Delta ``state_snapshots`` when this task starts.
    """
    t0 = time.perf_counter()
    store = EngineStore(spec.store_root, engine)
    try:
        op = make_operator(spec.app, **spec.params)
        clock = _InputClock(rows)
        snaps = {g: data for _, (g, data) in clock}
        for g, data in snaps.items():
            if data is not None:
                op.restore(g, data)
        waiting = store.buffered(spec.batch_id, snaps)
        outs = op.process_many((e for _, e in waiting), (g for g, _ in waiting))
        states = {g: op.snapshot(g) for g in snaps}
        store.save(spec.batch_id, states)
        store.clear_buffer(spec.batch_id, snaps)
        for g, ce in outs:
            yield (OUT, (engine, g, ce.key, ce.ts, ce.kind, ce.detail, ce.event_id))
        yield (
            TASK,
            {"engine": engine, "restored": len(snaps), "replayed": len(waiting),
             "input_wait_s": clock.wait_s, "duration_s": time.perf_counter() - t0,
             "restore": True},
        )
    finally:
        store.close()


def engine_partitioner(engine: int) -> int:
    """Identity partitioner: partition e holds engine e's rows (one task per engine)."""
    return int(engine)
