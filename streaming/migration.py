"""Migration of key groups between engines (dlb §3.3, elastic-cep §III-D).

A plan change takes effect at a batch boundary, inside the batch's one engine stage:

1. each engine task that receives groups reads their state as of the batch before from the
   groups' old engines (:func:`keyshift.streaming.engines.fetch_arrivals`: the old engine's executor
   cache when this executor holds it, else its durable changelog), stages it as the
   migration's ``state_snapshots`` rows, and installs it before it processes the groups'
   events of the batch;
2. the old engine's task, in the same batch, drops the groups (its changelog says so under
   the batch's version), so every batch version has one owner per group;
3. the ``migrations`` rows (``started``, ``completed``) are staged when the batch has run.

Nothing waits in a buffer, no extra stage or task runs for a migration, the driver never
holds the bytes, and no Delta commit stands between the plan change and the engines. A crash
recovers from the engines' durable changelog (:mod:`keyshift.streaming.engine_state`): a batch
re-executed after a crash reads the same state again (as of the batch before, which
compaction keeps), and the staged records of an unfinished batch are staged again
(:mod:`keyshift.streaming.staging`).

All moves of one plan change form one migration (several groups at once). ELB's changes of
the engine count are the same thing: new slots receive groups, removed slots hand theirs
over, and a removed slot's task still runs in that batch to drop its groups.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from keyshift.elastic.reconfiguration import MeasuredMigration
from keyshift.plan import Plan

if TYPE_CHECKING:
    from keyshift.lakehouse.delta import Stager


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


def record(stager: Stager, m: Migration, moved: int, started_at: datetime,
           ended_at: datetime) -> None:
    """The migration's ``started`` and ``completed`` rows, staged with the run's bookkeeping
    once the batch that realized it has run (its engines hold the moved state)."""
    stager.put("migrations", [
        _row(stager.run_id, m, moved, "started", started_at, None),
        _row(stager.run_id, m, moved, "completed", started_at, ended_at)], m.batch_id)


def _row(run_id: str, m: Migration, moved: int, status: str, start: datetime,
         end: datetime | None) -> dict:
    return {
        "run_id": run_id, "migration_id": m.migration_id, "plan_version": m.plan_version,
        "groups": m.groups.tolist(), "from_engines": m.src.tolist(), "to_engines": m.dst.tolist(),
        "bytes": moved, "status": status, "started_at": start, "ended_at": end,
        "batch_start": m.batch_id, "batch_end": m.batch_id if end is not None else None,
    }


class PauseMeter:
    """What a realized migration cost, as the control loop learns from it
    (keyshift.elastic.reconfiguration): its pause is the engine stage's seconds beyond the
    median of the last ``calm`` batches that moved nothing (reading and installing the moved
    state), plus a scale-out's wait for its executors (``waited_s``, the part of their
    start-up the batch did not overlap), so the learned RC prices executor start-up too."""

    def __init__(self, calm: int = 20) -> None:
        self._calm: deque[float] = deque(maxlen=calm)

    def calm_batch(self, engines_s: float) -> None:
        """A batch that moved nothing (and split nothing) took ``engines_s`` in its engines."""
        self._calm.append(float(engines_s))

    def measure(self, migration: Migration, prev: Plan, plan: Plan, moved: int,
                engines_s: float, rate: float, waited_s: float = 0.0) -> MeasuredMigration:
        calm = float(np.median(self._calm)) if self._calm else engines_s
        return MeasuredMigration(
            migration.batch_id, len(migration), int(moved),
            max(engines_s - calm, 0.0) + waited_s, float(rate),
            prev.parallelism != plan.parallelism, prev.parallelism, plan.parallelism)
