"""The micro-batch cost model and its least-squares fit to a measured run.

A batch b of the Spark job costs (seconds)::

    D_b = F                                  batch fixed: plan, routing set-up, writes, commit
        + S0 + s_in · events_b / C           engine stage beyond its tasks: Spark job, input
                                             read, routing and shuffle (parallel on C cores)
        + makespan_C( t0 + c_ev · e_j + c_rg · r_j + c_rb · R_j  for each engine task j )
        + m_mig · [b migrates] + m_g · moved_groups_b + m_B · moved_bytes_b
                                             a migration's bookkeeping beyond the tasks
        + k · [b closes a statistic window]  the controller's step
        + κ · commit_b                       the staged bookkeeping's Delta commit, run
                                             behind the stream on the driver every
                                             warehouse.commit_interval_s and sharing the
                                             cores with the batch: commit_b is the seconds
                                             of the commit that ended in b (0 if none)
        + W · [b is the run's first batch]   warm-up (Python workers, caches, first plan)

where e_j is task j's events, r_j / R_j the groups / bytes of state it restored (a
migration's receiving side runs inside the task) and makespan_C lists the tasks, in engine
order, onto C cores, each task to the core that frees first (Spark's local and standalone
schedulers hand a stage's tasks to free cores in partition order; with more engines than
cores tasks queue).

The terms are fitted by non-negative least squares in separate problems, each on what the
run measured directly, so that every term has one source:

1. task terms (``batches.jsonl`` ``tasks``): c_rg, c_rb from the restoring tasks' own
   ``fetch_s`` against their restored groups and bytes; t0, c_ev from every task's
   ``duration_s`` less that fetch, against its events;
2. stage terms: the engine stage's wall ``engines_s`` less the makespan of the batch's
   *measured* task durations on C cores, against [1, events/C, commit_b]; s_in only when batch
   sizes vary enough to tell it from S0 (else folded into S0, ``s_in_fitted`` false);
3. batch terms: the measured batch time less ``engines_s``, against [1, migrates, moved
   groups, moved bytes, window end, commit_b]; the per-group and per-byte migration terms
   only when at least three batches migrated different numbers of groups (else a
   migration costs m_mig whatever its size, ``per_group_fitted`` false).

κ is the sum of its stage and batch parts. The first batch is left out of all fits, and W
is its residual afterwards.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy.optimize import nnls

from .run import Batch, CalibrationError

# batch sizes must differ this much (relative to the median), in at least this share of the
# batches, for the input stage's per-event term to be told apart from its constant
SIZE_SPREAD = 0.2
SIZE_SHARE = 0.25


def list_schedule(durations: Sequence[float], cores: int) -> tuple[float, np.ndarray]:
    """Tasks, in order, each to the core that frees first: (makespan, core of each task)."""
    if cores < 1:
        raise ValueError(f"cores: must be >= 1, got {cores}")
    durations = np.asarray(durations, dtype=np.float64)
    free = [(0.0, c) for c in range(min(cores, max(1, durations.size)))]
    heapq.heapify(free)
    where = np.empty(durations.size, dtype=np.int64)
    end = 0.0
    for i, d in enumerate(durations):
        t, c = heapq.heappop(free)
        where[i] = c
        t += float(d)
        end = max(end, t)
        heapq.heappush(free, (t, c))
    return end, where


@dataclass(frozen=True)
class CostModel:
    """The fitted terms (seconds; per event, per group, per byte as named)."""

    cores: int
    task_fixed_s: float = 0.0  # t0
    event_s: float = 0.0  # c_ev
    restore_group_s: float = 0.0  # c_rg
    restore_byte_s: float = 0.0  # c_rb
    stage_fixed_s: float = 0.0  # S0
    stage_event_s: float = 0.0  # s_in (per event, divided by the cores)
    batch_fixed_s: float = 0.0  # F
    migration_s: float = 0.0  # m_mig
    move_group_s: float = 0.0  # m_g
    move_byte_s: float = 0.0  # m_B
    controller_s: float = 0.0  # k
    commit_share: float = 0.0  # κ: batch seconds lost per second of background commit
    warmup_s: float = 0.0  # W
    s_in_fitted: bool = False
    per_group_fitted: bool = False

    def task_s(self, events: np.ndarray, restored: np.ndarray | float = 0.0,
               restored_bytes: np.ndarray | float = 0.0) -> np.ndarray:
        return (self.task_fixed_s + self.event_s * np.asarray(events, dtype=np.float64)
                + self.restore_group_s * np.asarray(restored, dtype=np.float64)
                + self.restore_byte_s * np.asarray(restored_bytes, dtype=np.float64))

    def stage_s(self, task_seconds: np.ndarray, events: float, cores: int | None = None,
                extra_s: float = 0.0) -> float:
        """The engine stage: its tasks list-scheduled on ``cores`` plus the stage's own
        terms; ``extra_s`` is input-side work spread over the cores (a split key's
        summaries)."""
        c = cores or self.cores
        return (self.stage_fixed_s + (self.stage_event_s * events + extra_s) / c
                + list_schedule(task_seconds, c)[0])

    def batch_s(self, stage_s: float, moved_groups: float = 0.0, moved_bytes: float = 0.0,
                window_end: bool = False, first: bool = False, commit_s: float = 0.0) -> float:
        return (self.batch_fixed_s + stage_s + self.migration_s * float(moved_groups > 0)
                + self.move_group_s * moved_groups + self.move_byte_s * moved_bytes
                + self.controller_s * float(window_end) + self.commit_share * commit_s
                + self.warmup_s * float(first))

    def terms(self) -> dict[str, float | int | bool]:
        return asdict(self)


def _nnls(columns: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on columns that may be all zero (their term is 0)."""
    x = np.zeros(len(columns))
    used = [i for i, c in enumerate(columns) if np.any(c != 0)]
    if not used or y.size == 0:
        return x
    a = np.column_stack([columns[i] for i in used])
    # scale columns to unit norm: the terms span 1e-9 (per byte) to 1 (fixed seconds)
    norms = np.linalg.norm(a, axis=0)
    sol, _ = nnls(a / norms, y)
    x[used] = sol / norms
    return x


def predict_batch(model: CostModel, b: Batch, first: bool) -> float:
    """The model's seconds for a measured batch as it ran (its tasks' events and restores)."""
    secs = model.task_s([t.events for t in b.tasks], [t.restored for t in b.tasks],
                        [t.restored_bytes for t in b.tasks])
    return model.batch_s(model.stage_s(secs, b.events), b.moved_groups, b.moved_bytes,
                         b.closes_window, first, b.commit_behind_s)


def fit(batches: Sequence[Batch], cores: int, first_batch: int | None = None) -> CostModel:
    """Fit the model to ``batches`` (the run's, or a part of them) on ``cores`` cores.
    ``first_batch`` is the run's first batch id (its warm-up); default the first given."""
    if not batches:
        raise CalibrationError("batches.jsonl: no batch to fit the cost model on")
    first = batches[0].batch_id if first_batch is None else first_batch
    steady = [b for b in batches if b.batch_id != first] or list(batches)

    # 1. tasks: the restore from the restoring tasks' fetch, the rest from every task
    tasks = [t for b in steady for t in b.tasks]
    if not tasks:
        raise CalibrationError("batches.jsonl: the batches record no engine tasks")
    moving = [t for t in tasks if t.restored > 0]
    c_rg, c_rb = _nnls([np.array([t.restored for t in moving], dtype=np.float64),
                        np.array([t.restored_bytes for t in moving], dtype=np.float64)],
                       np.array([t.fetch_s for t in moving]))
    ev = np.array([t.events for t in tasks], dtype=np.float64)
    dur = np.array([t.duration_s - t.fetch_s for t in tasks], dtype=np.float64)
    t0, c_ev = _nnls([np.ones_like(ev), ev], dur)

    # 2. the stage beyond its tasks
    resid = np.array([b.engines_s - list_schedule([t.duration_s for t in b.tasks], cores)[0]
                      for b in steady])
    commit = np.array([b.commit_behind_s for b in steady])
    sizes = np.array([b.events for b in steady])
    med = float(np.median(sizes)) if sizes.size else 0.0
    spread = (np.abs(sizes - med) > SIZE_SPREAD * med).mean() if med > 0 else 0.0
    s_in_fitted = bool(spread >= SIZE_SHARE and len(steady) >= 4)
    per_core = sizes / cores if s_in_fitted else np.zeros_like(sizes)
    s0, s_in, kappa_stage = _nnls([np.ones_like(sizes), per_core, commit], resid)

    # 3. the batch beyond its engine stage
    rest = np.array([b.measured_s - b.engines_s for b in steady])
    ends = np.array([float(b.closes_window) for b in steady])
    mg = np.array([b.moved_groups for b in steady], dtype=np.float64)
    mb = np.array([b.moved_bytes for b in steady], dtype=np.float64)
    per_group = bool(len({int(g) for g in mg if g > 0}) >= 3)
    if not per_group:
        mg, mb = np.zeros_like(mg), np.zeros_like(mb)
    migrates = np.array([float(b.moved_groups > 0) for b in steady])
    f, m_mig, m_g, m_b, k, kappa_rest = _nnls(
        [np.ones_like(rest), migrates, mg, mb, ends, commit], rest)

    model = CostModel(cores=cores, task_fixed_s=t0, event_s=c_ev, restore_group_s=c_rg,
                      restore_byte_s=c_rb, stage_fixed_s=s0, stage_event_s=s_in,
                      batch_fixed_s=f, migration_s=m_mig, move_group_s=m_g, move_byte_s=m_b,
                      controller_s=k, commit_share=kappa_stage + kappa_rest,
                      s_in_fitted=s_in_fitted, per_group_fitted=per_group)
    warm = [b for b in batches if b.batch_id == first]
    if warm and len(batches) > 1:
        pred = predict_batch(model, warm[0], False)
        model = replace(model, warmup_s=max(0.0, warm[0].measured_s - pred))
    return model
