"""Project a calibrated run to more engines: the same input, scaled, under each policy.

For E engines on C cores (default C = E) the run's per-batch group loads are multiplied by
E / (the run's engines): more events per batch, the same key distribution over the run's p
key groups, the same number of batches and statistic windows. Each policy's plan evolves
over those loads (:func:`keyshift.sim.calibrate.replay.evolve`) and the fitted cost model
times every batch on C cores. The run's first batch (the warm-up) is left out of the rows:
they describe the steady state.

Rows: ``kg``, ``dlb-h``, ``dlb-s`` (the control loop with the run's ``[controller]``
settings), ``dc`` and ``wc`` only for an operator that summarizes (its hot keys can be
split), and ``spark-200`` (plain Spark: 200 hashed partitions, no balancing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import CostModel, list_schedule
from .replay import SPARK_TASK_FIXED_S, BatchWork, evolve, predict, state_per_group
from .run import Run

POLICIES = ("kg", "dlb-h", "dlb-s")
SPLITTING = ("dc", "wc")
SPARK = "spark-200"


def summarizes(app: str, params: dict[str, Any] | None = None) -> bool:
    """Whether the run's operator, in the form its parameters build (heavy with
    ``mergeable: true`` splits, its chain form does not), offers the summary hooks key
    splitting needs. ``app`` is read from the run's ``job.json``: looked up among the
    shipped and installed operators, never imported (:func:`keyshift.apps.known_operator`);
    one this host does not know is projected without dc and wc."""
    from keyshift.apps import known_operator

    cls = known_operator(app)
    if cls is None:
        return False
    try:
        return bool(type(cls(**params)).summarizes() if params else cls.summarizes())
    except Exception:  # noqa: BLE001 -- parameters this version refuses: no split projected
        return False


def policies_for(app: str, params: dict[str, Any] | None = None) -> tuple[str, ...]:
    return POLICIES + (SPLITTING if summarizes(app, params) else ()) + (SPARK,)


def spark_task_fixed_s(model: CostModel) -> tuple[float, str]:
    """The per-task fixed cost of a plain Spark task: the fitted engine task's t0 (a keyed
    task with its state, as a stateful Spark operator's task), else the stated constant."""
    if model.task_fixed_s > 0:
        return model.task_fixed_s, "fitted (engine task t0)"
    return SPARK_TASK_FIXED_S, "constant (no t0 fitted from this run)"


def row(engines: int, cores: int, policy: str, work: list[BatchWork], model: CostModel,
        first_batch: int, task_fixed_s: float | None = None) -> dict[str, Any]:
    secs = predict(model, work, cores, first_batch, task_fixed_s)
    steady = [i for i, w in enumerate(work) if w.batch_id != first_batch] or \
        list(range(len(work)))
    s = secs[steady]
    events = float(sum(work[i].events for i in steady))
    busy = float(s.sum())
    if policy == SPARK:  # the load per core the schedule gives, not per partition
        rs = []
        for i in steady:
            w = work[i]
            _, core = list_schedule(model.task_s(w.engine_events), cores)
            rs.append(_rstd(np.bincount(core, weights=w.engine_events, minlength=cores)))
    else:
        rs = [work[i].rstd for i in steady]
    return {
        "engines": engines, "cores": cores, "policy": policy,
        "events_per_s": events / busy if busy > 0 else 0.0,
        "batch_p95_s": float(np.quantile(s, 0.95)) if s.size else 0.0,
        "batch_p50_s": float(np.quantile(s, 0.5)) if s.size else 0.0,
        "rstd": float(np.mean(rs)) if rs else 0.0,
        "moved_groups": int(sum(work[i].moved_groups for i in steady)),
    }


def _rstd(loads: np.ndarray) -> float:
    from keyshift.metrics import rstd

    return rstd(loads)


def project(run: Run, model: CostModel, engines: list[int],
            cores: int | None = None) -> list[dict[str, Any]]:
    """Rows for every E in ``engines`` and every policy (C = ``cores`` or E)."""
    bpg = state_per_group(run)
    first = run.batches[0].batch_id
    spark_t0, _ = spark_task_fixed_s(model)
    rows = []
    for e in engines:
        c = cores or e
        scale = e / run.engines
        for policy in policies_for(run.app, run.app_params):
            work = evolve(run, policy, e, scale, bpg)
            t0 = spark_t0 if policy == SPARK else None
            rows.append(row(e, c, policy, work, model, first, t0))
    return rows
