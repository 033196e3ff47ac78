"""Replay a run's input, batch by batch, under a policy: what each engine task gets.

The per-batch group loads of the run (optionally scaled) are routed through a plan that
evolves as the job's would: for an online policy (its declared kind: dlb-h, dlb-l, dlb-s, elb,
or an installed one) keyshift's own
control loop (:func:`keyshift.control.loop_from_config` with the run's ``[controller]``
section, the planner off) is stepped at every statistic window's last batch, exactly where
``streaming/controller.py`` steps it, on the window's summed loads; the plan it puts in force
routes the following batches, and the groups it moves are migrated in the next batch, their
state restored by the receiving engine's task. ``kg`` is the fixed hash plan. ``dc`` and
``wc`` keep KG's plan and split the head of the last window's loads as the job does
(:func:`keyshift.policies.hot_split.hot_groups`): a split group's events are summarized in
the input tasks (spread over the cores), and its home engine applies one summary per input
task (``engines`` of them), each costed as one event (stated, not fitted: no run of a
summarizing operator is needed to calibrate the rest). ``spark-200`` is plain Spark
over-partitioned: the groups hashed into 200 partitions, a task each, no plan, no
migration, no controller.

State sizes are not in ``batches.jsonl`` per group; a group's state is taken as the run's
measured state bytes per group seen (the engine tasks' ``state_bytes`` over the groups seen),
from the batch it is first seen on. DLB-S weighs moves by it; migrations carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from keyshift.metrics import rstd as imb_score
from keyshift.plan import Plan
from keyshift.policies.base import PolicyInputError, PolicyKind
from keyshift.policies.registry import policy_kind, policy_names

from .model import CostModel
from .run import CalibrationError, Run



def _kind(policy: str) -> PolicyKind | None:
    """The policy's declared kind (keyshift.policies.registry), None for an unknown name."""
    try:
        return policy_kind(policy)
    except PolicyInputError:
        return None
SPARK_PARTITIONS = 200
# Per-task fixed cost of a plain Spark task when no keyshift run gives one (the fit found
# none): Spark's task launch, a Python worker's Arrow batch and a state-store load, of the
# order measured for an engine task of an empty keyed batch on this 2-core machine.
SPARK_TASK_FIXED_S = 0.02


@dataclass(frozen=True)
class BatchWork:
    """What one batch asks of the engines under the replayed plan."""

    batch_id: int
    events: float
    engine_events: np.ndarray  # per task (slot, or partition for spark-200)
    restored: np.ndarray  # groups restored per task
    restored_bytes: np.ndarray
    moved_groups: int
    moved_bytes: float
    window_end: bool
    split_events: float = 0.0  # summarized in the input tasks (dc, wc)
    controlled: bool = True  # spark-200 has no controller and no staged bookkeeping
    commit_s: float = 0.0  # seconds of the background commit that ended in it (the run's)

    @property
    def rstd(self) -> float:
        return imb_score(self.engine_events)


def state_per_group(run: Run) -> float:
    """Bytes of state per group seen, from the last batch's tasks (0 when not recorded)."""
    seen: set[int] = set()
    for b in run.batches:
        seen.update(int(g) for g in b.groups)
    return run.state_bytes / len(seen) if seen and run.state_bytes > 0 else 0.0


def _loop(run: Run, policy: str):
    from keyshift.config import load_config
    from keyshift.control import MemoryControlStore, loop_from_config

    try:
        cfg = load_config(env={}, controller={**run.controller, "policy": "dlb-h"},
                          planner={"enabled": False})
    except ValueError as exc:
        raise CalibrationError(f"job.json: its controller section is not valid: {exc}") \
            from None
    params = run.policy_params if policy == run.policy else {}
    return loop_from_config(cfg, MemoryControlStore(), policy, params=params, clock=lambda: 0.0)


def evolve(run: Run, policy: str, engines: int, scale: float = 1.0,
           bytes_per_group: float | None = None) -> list[BatchWork]:
    """The run's batches, loads times ``scale``, under ``policy`` on ``engines`` engines."""
    from keyshift.control import WindowStats

    p = run.groups
    bpg = state_per_group(run) if bytes_per_group is None else bytes_per_group
    seen = np.zeros(p, dtype=bool)
    out: list[BatchWork] = []
    if policy == "spark-200":
        part = np.arange(p) % SPARK_PARTITIONS
        for b in run.batches:
            loads = b.loads(p, scale)
            ev = np.bincount(part, weights=loads, minlength=SPARK_PARTITIONS)
            zero = np.zeros(SPARK_PARTITIONS)
            out.append(BatchWork(b.batch_id, float(loads.sum()), ev, zero, zero, 0, 0.0,
                                 False, controlled=False))
        return out
    loop, splitter = None, None
    plan = Plan.hashed(p, engines, version=0)
    kind = _kind(policy)
    if kind is PolicyKind.ONLINE:
        loop = _loop(run, policy)
        loop.start(plan)
    elif kind is PolicyKind.SPLITTER:
        from keyshift.policies import make_policy
        from keyshift.policies.hot_split import hot_groups, splitting_policy

        splitter = splitting_policy(make_policy(policy))
    elif kind is not PolicyKind.FIXED:
        raise CalibrationError(
            f"policy: cannot replay {policy!r} ({kind.value if kind else 'unknown'}); the "
            f"replay knows kg, the online policies ({', '.join(policy_names(['online']))}), "
            "the splitters and spark-200 (a batch-layer plan lives in Delta)")
    window = None
    w = 0  # the run's windows, as it closed them
    last_window_loads = np.zeros(p)
    prev = plan
    for b in run.batches:
        if window is None or window.index != w:
            if window is not None and splitter is not None:
                last_window_loads = window.loads.copy()
            window = WindowStats.empty(w, p, b.batch_id)
        loads = b.loads(p, scale)
        cur = loop.plan_for(b.batch_id) if loop is not None else plan
        moved = np.flatnonzero(prev.assignment != cur.assignment) \
            if prev.assignment.shape == cur.assignment.shape else np.arange(p)
        slots = max(cur.slots, prev.slots)
        carried = moved[seen[moved]]
        restored = np.bincount(cur.assignment[carried], minlength=slots).astype(float)
        ev = np.bincount(cur.assignment, weights=loads, minlength=slots)
        split_events = 0.0
        if splitter is not None and w > 0:
            head = np.asarray(hot_groups(splitter, last_window_loads, cur), dtype=np.int64)
            if head.size:
                split_events = float(loads[head].sum())
                ev = ev - np.bincount(cur.assignment[head], weights=loads[head],
                                      minlength=slots)
                # the home engine applies one summary per input task (engines of them)
                applied = np.where(loads[head] > 0, float(cur.parallelism), 0.0)
                ev = ev + np.bincount(cur.assignment[head], weights=applied, minlength=slots)
        seen |= loads > 0
        out.append(BatchWork(b.batch_id, float(loads.sum()), ev, restored, restored * bpg,
                             int(moved.size), float(carried.size * bpg),
                             b.closes_window, split_events,
                             commit_s=b.commit_behind_s))
        window.add_batch(b.batch_id, loads, np.where(seen, bpg, 0.0))
        if b.closes_window:
            window.last_batch = b.batch_id
            if loop is not None:
                loop.step(window)
            w += 1
        prev = cur
    return out


def predict(model: CostModel, work: list[BatchWork], cores: int | None = None,
            first_batch: int | None = None, task_fixed_s: float | None = None) -> np.ndarray:
    """Predicted seconds of each batch of ``work`` on ``cores`` cores (default: the run's)."""
    c = cores or model.cores
    first = work[0].batch_id if first_batch is None and work else first_batch
    out = np.empty(len(work))
    for i, w in enumerate(work):
        secs = model.task_s(w.engine_events, w.restored, w.restored_bytes)
        if task_fixed_s is not None:
            secs = secs - model.task_fixed_s + task_fixed_s
        stage = model.stage_s(secs, w.events, c, extra_s=model.event_s * w.split_events)
        out[i] = model.batch_s(stage, w.moved_groups, w.moved_bytes,
                               w.window_end and w.controlled, w.batch_id == first,
                               w.commit_s if w.controlled else 0.0)
    return out


def summary(events: np.ndarray, seconds: np.ndarray) -> dict[str, Any]:
    """events/s over the batches' summed time, batch p50 / p95 (numpy's linear quantile,
    as ``keyshift run --json``)."""
    busy = float(np.sum(seconds))
    return {
        "batches": int(seconds.size), "events": float(np.sum(events)), "busy_s": busy,
        "events_per_s": float(np.sum(events)) / busy if busy > 0 else 0.0,
        "batch_p50_s": float(np.quantile(seconds, 0.5)) if seconds.size else 0.0,
        "batch_p95_s": float(np.quantile(seconds, 0.95)) if seconds.size else 0.0,
    }
