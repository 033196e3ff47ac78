"""Migration of key groups between engines (dlb §3.3, elastic-cep §III-D).

A plan change takes effect at a batch boundary. In the first batch of the new plan, in one
Spark job:

1. a release task per old engine reads the state, as of the batch before, of each group
   that leaves it (:func:`streaming.engines.run_release`) and stages it as the migration's
   ``state_snapshots`` rows;
2. the released rows are routed, with the batch's events, to the groups' new engines, each
   of which installs the state before it processes the group's events of the batch, while
   the old engine drops the group in the same batch version;
3. the ``migrations`` rows (``started``, ``completed``) are staged when the batch has run.

Nothing waits in a buffer (the batch's events of a moving group wait in Spark's shuffle
until the state is there), the driver never holds the bytes, and no Delta commit stands
between the plan change and the engines. What a crash recovers from is the engines'
durable changelog (:mod:`streaming.engine_state`): a batch re-executed after a crash
releases the same state again (as of the batch before, which compaction keeps), and the
staged records of an unfinished batch are dropped and staged again (:mod:`streaming.staging`).

All moves of one plan change form one migration (several groups at once). ELB's changes of
the engine count are the same thing: new slots receive groups, removed slots hand theirs
over, and a removed slot's task still runs in that batch to release its groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from keyshift.plan import Plan

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


def release(spark: SparkSession, m: Migration, spec: BatchSpec,
            placement: list[int]) -> DataFrame:
    """Step 1 as a frame: one release task per old engine (its leaving groups' state as of
    the batch before) giving engine-stage rows of kind SNAPSHOT, placed on the groups' new
    engines (``placement[engine]`` = its placement key); the engine stage reads them in the
    same Spark job."""
    from .engines import ENGINE_INPUT, arrow_release

    sources = sorted(m.moves_out())
    return (spark.range(0, len(sources), 1, max(1, len(sources)))
            .mapInArrow(arrow_release(spec, sources, placement), ENGINE_INPUT))


def record(appends: RunAppends, m: Migration, moved: int, started_at: datetime,
           ended_at: datetime) -> None:
    """The migration's ``started`` and ``completed`` rows, staged with the run's bookkeeping
    once the batch that realized it has run (its engines hold the moved state)."""
    appends.defer("migrations", [
        _row(appends.run_id, m, moved, "started", started_at, None),
        _row(appends.run_id, m, moved, "completed", started_at, ended_at)], m.batch_id)


def _row(run_id: str, m: Migration, moved: int, status: str, start: datetime,
         end: datetime | None) -> dict:
    return {
        "run_id": run_id, "migration_id": m.migration_id, "plan_version": m.plan_version,
        "groups": m.groups.tolist(), "from_engines": m.src.tolist(), "to_engines": m.dst.tolist(),
        "bytes": moved, "status": status, "started_at": start, "ended_at": end,
        "batch_start": m.batch_id, "batch_end": m.batch_id if end is not None else None,
    }
