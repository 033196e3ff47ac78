"""Migration of key groups between engines through Delta (dlb §3.3, elastic-cep §III-D).

A plan change takes effect at a batch boundary. In the first batch of the new plan:

1. the old engine snapshots each group that leaves it and drops it (engine task);
2. the snapshots go to ``state_snapshots`` (idempotent per batch) and a ``migrations`` row
   with status ``started`` records groups, engines, bytes and the start;
3. the new engine has buffered the groups' events of this batch (engine task);
4. once the snapshots are durable in Delta, a restore task per receiving engine installs
   them and replays the buffer in event-time order;
5. a ``completed`` row closes the migration.

The restore takes the snapshot bytes the driver collected in step 1 — the very bytes step 2
made durable — instead of scanning ``state_snapshots`` again: that scan was one more Spark
job and Delta snapshot per migration, inside the pause. Delta stays the record a crash
recovers from: a batch re-executed after a crash rolls the engine stores back, snapshots
again (the same bytes) and skips the appends it already committed.

All moves of one plan change form one migration (several groups at once). A group never has
two owners: the old engine drops it in the same batch version in which the new one takes it,
and a re-executed batch rolls both engine stores back to before that version. ELB's changes
of the engine count are the same thing: new slots receive groups, removed slots hand theirs
over, and a removed slot's task still runs in that batch to release its groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from keyshift.config import Config
from keyshift.plan import Plan

from .txn import append, concurrently

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def record_started(
    spark: SparkSession, cfg: Config, run_id: str, m: Migration,
    snapshots: list[tuple[int, int, bytes]], started_at: datetime,
) -> int:
    """Write the snapshots and the ``started`` row; returns the bytes moved."""
    dest = m.destination()
    now = datetime.now(UTC)
    rows = [
        {"run_id": run_id, "migration_id": m.migration_id, "plan_version": m.plan_version,
         "group": g, "from_engine": src, "to_engine": dest[g], "state": bytearray(data),
         "bytes": len(data), "batch_id": m.batch_id, "created_at": now}
        for g, src, data in sorted(snapshots)
    ]
    moved = sum(r["bytes"] for r in rows)
    concurrently(
        lambda: append(spark, cfg, "state_snapshots", rows, f"{run_id}/state_snapshots",
                       m.batch_id),
        lambda: append(spark, cfg, "migrations",
                       [_row(run_id, m, moved, "started", started_at, None)],
                       f"{run_id}/migrations/started", m.batch_id),
    )
    return moved


def record_completed(
    spark: SparkSession, cfg: Config, run_id: str, m: Migration, moved: int,
    started_at: datetime, ended_at: datetime,
) -> None:
    append(spark, cfg, "migrations", [_row(run_id, m, moved, "completed", started_at, ended_at)],
           f"{run_id}/migrations/completed", m.batch_id)


def restore_rows(m: Migration, snapshots: list[tuple[int, int, bytes]]) -> list[tuple]:
    """``(to_engine, (group, state))`` for the restore tasks, from the engines' snapshots."""
    dest = m.destination()
    return [(dest[g], (g, data)) for g, _, data in sorted(snapshots)]


def _row(run_id: str, m: Migration, moved: int, status: str, start: datetime,
         end: datetime | None) -> dict:
    return {
        "run_id": run_id, "migration_id": m.migration_id, "plan_version": m.plan_version,
        "groups": m.groups.tolist(), "from_engines": m.src.tolist(), "to_engines": m.dst.tolist(),
        "bytes": moved, "status": status, "started_at": start, "ended_at": end,
        "batch_start": m.batch_id, "batch_end": m.batch_id if end is not None else None,
    }
