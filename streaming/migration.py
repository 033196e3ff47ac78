"""Migration of key groups between engines through Delta (dlb §3.3, elastic-cep §III-D).

A plan change takes effect at a batch boundary. In the first batch of the new plan:

1. a release task per old engine reads the state, as of the batch before, of each group
   that leaves it (:func:`streaming.engines.run_release`); the executors append those
   snapshots to ``state_snapshots`` (idempotent per batch), and a ``migrations`` row with
   status ``started`` records groups, engines, bytes and the start;
2. the engine stage reads this migration's rows back from Delta and routes each snapshot to
   its new engine, which installs it before it processes the group's events of the batch,
   while the old engine drops the group in the same batch version;
3. a ``completed`` row closes the migration.

Nothing waits in a buffer (the batch's events of a moving group wait in Spark's shuffle
until the state is there), the driver never holds the bytes, and Delta is the record a
crash recovers from: a batch re-executed after a crash reads the same state (as of the
batch before), Delta skips the appends it already committed, and the read-back returns the
rows of the first attempt.

All moves of one plan change form one migration (several groups at once). ELB's changes of
the engine count are the same thing: new slots receive groups, removed slots hand theirs
over, and a removed slot's task still runs in that batch to release its groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from keyshift.config import Config
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, table

from .delta import read_run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .delta import RunAppends
    from .engines import BatchSpec


@dataclass(frozen=True)
class Migration:
    """The moves between the plans of two consecutive batches."""

    migration_id: str
    plan_version: int
    batch_id: int
    groups: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @classmethod
    def between(cls, run_id: str, batch_id: int, old: Plan, new: Plan) -> Migration:
        if old.groups != new.groups:
            raise ValueError(f"plans differ in groups: {old.groups} vs {new.groups}")
        g = np.flatnonzero(old.assignment != new.assignment)
        return cls(
            migration_id=f"{run_id}/b{batch_id}/v{new.version}",
            plan_version=new.version,
            batch_id=batch_id,
            groups=g,
            src=old.assignment[g],
            dst=new.assignment[g],
        )

    def __len__(self) -> int:
        return int(self.groups.size)

    def moves_out(self) -> dict[int, list[int]]:
        return _by_engine(self.src, self.groups)

    def moves_in(self) -> dict[int, list[int]]:
        return _by_engine(self.dst, self.groups)

    def destination(self) -> dict[int, int]:
        return {int(g): int(d) for g, d in zip(self.groups, self.dst, strict=True)}


def _by_engine(engines: np.ndarray, groups: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for e, g in zip(engines.tolist(), groups.tolist(), strict=True):
        out.setdefault(e, []).append(g)
    return out


def release(spark: SparkSession, cfg: Config, appends: RunAppends, m: Migration,
            spec: BatchSpec, slots: int) -> tuple[DataFrame, int]:
    """Step 1: the moving groups' snapshots into ``state_snapshots`` by the executors, then
    read back as ``(group, to_engine, state)`` for the engine stage; returns them and the
    bytes moved (ψ)."""
    from pyspark.sql import functions as F

    from .engines import run_release

    run_id = appends.run_id
    sources = sorted(m.moves_out())
    now = datetime.now(UTC)
    mid, version, batch = m.migration_id, m.plan_version, m.batch_id
    rows = (
        spark.sparkContext.parallelize(sources, max(1, min(len(sources), slots)))
        .flatMap(lambda e: run_release(spec, e))
        .map(lambda r: (SCHEMA_VERSION, run_id, mid, version, r[0], r[1], r[2],
                        bytearray(r[3]), len(r[3]), batch, now))
    )
    appends.append("state_snapshots", spark.createDataFrame(rows, table("state_snapshots").ddl()),
                   batch)
    back = (
        read_run(spark, cfg, "state_snapshots", run_id).where(F.col("migration_id") == mid)
        .select("group", "to_engine", "state", "bytes")
    )
    moved = back.agg(F.coalesce(F.sum("bytes"), F.lit(0))).first()[0]
    return back.select("group", "to_engine", "state"), int(moved)


def record_started(appends: RunAppends, m: Migration, moved: int,
                   started_at: datetime) -> None:
    """The ``started`` row: the snapshots are durable in ``state_snapshots``."""
    appends.append_rows("migrations", [_row(appends.run_id, m, moved, "started", started_at,
                                            None)],
                        m.batch_id, match={"migration_id": m.migration_id, "status": "started"})


def record_completed(appends: RunAppends, m: Migration, moved: int, started_at: datetime,
                     ended_at: datetime) -> None:
    """The ``completed`` row: the new engines hold the groups' state."""
    appends.append_rows("migrations", [_row(appends.run_id, m, moved, "completed", started_at,
                                            ended_at)],
                        m.batch_id, match={"migration_id": m.migration_id,
                                           "status": "completed"})


def _row(run_id: str, m: Migration, moved: int, status: str, start: datetime,
         end: datetime | None) -> dict:
    return {
        "run_id": run_id, "migration_id": m.migration_id, "plan_version": m.plan_version,
        "groups": m.groups.tolist(), "from_engines": m.src.tolist(), "to_engines": m.dst.tolist(),
        "bytes": moved, "status": status, "started_at": start, "ended_at": end,
        "batch_start": m.batch_id, "batch_end": m.batch_id if end is not None else None,
    }
