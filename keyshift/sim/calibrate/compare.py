"""Predicted against measured: the calibration replay and its held-out check.

The model is fitted on the run's batches, then the run's own input is replayed under the
run's policy on the run's engines and cores (the plan re-decided by the policy, not copied
from the run), and three relative errors |pred − meas| / meas are reported: batch p50,
batch p95 and events/s (events over the summed batch times). Fitting and scoring on the
same batches flatters the model, so ``holdout`` fits on the first half of the batches and
scores the replay's second half only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import CostModel, fit
from .replay import evolve, predict, summary
from .run import CalibrationError, Run

ERRORS = ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err")


def rel_err(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas if meas > 0 else float("inf")


def errors(measured: dict[str, Any], predicted: dict[str, Any]) -> dict[str, float]:
    return {
        "batch_p50_rel_err": rel_err(predicted["batch_p50_s"], measured["batch_p50_s"]),
        "batch_p95_rel_err": rel_err(predicted["batch_p95_s"], measured["batch_p95_s"]),
        "events_per_s_rel_err": rel_err(predicted["events_per_s"], measured["events_per_s"]),
    }


def calibration(run: Run, model: CostModel) -> dict[str, Any]:
    """The replay of the run under its own policy, engines and cores, against the run."""
    work = evolve(run, run.policy, run.engines)
    pred = predict(model, work, run.cores, run.batches[0].batch_id)
    meas = np.array([b.measured_s for b in run.batches])
    events = np.array([b.events for b in run.batches])
    measured, predicted = summary(events, meas), summary(events, pred)
    same_moves = sum(int(w.moved_groups == b.moved_groups)
                     for w, b in zip(work, run.batches, strict=True))
    task_err = _task_events_error(run, work)
    out: dict[str, Any] = {
        **errors(measured, predicted), "measured": measured, "predicted": predicted,
        "batches_with_same_moves": same_moves,
        "engine_events_rel_err": task_err,
        "per_batch": [{"batch_id": b.batch_id, "measured_s": float(m), "predicted_s": float(p)}
                      for b, m, p in zip(run.batches, meas, pred, strict=True)],
    }
    out["holdout"] = holdout(run)
    return out


def _task_events_error(run: Run, work) -> float:
    """How far the replayed plan's per-engine events are from the tasks' (sum |Δ| / events):
    0 when the replay routed every batch as the run did."""
    diff, total = 0.0, 0.0
    for b, w in zip(run.batches, work, strict=True):
        got = np.zeros(max(len(w.engine_events), 1 + max((t.engine for t in b.tasks),
                                                         default=0)))
        for t in b.tasks:
            got[t.engine] += t.events
        want = np.zeros_like(got)
        want[:len(w.engine_events)] = w.engine_events
        diff += float(np.abs(got - want).sum())
        total += float(got.sum())
    return diff / total if total > 0 else 0.0


def holdout(run: Run) -> dict[str, Any]:
    """Fit on the first half of the batches, score the replay on the second half."""
    n = len(run.batches)
    half = n // 2
    if half < 2 or n - half < 2:
        return {"skipped": f"{n} batches: too few to hold half out"}
    model = fit(run.batches[:half], run.cores, run.batches[0].batch_id)
    work = evolve(run, run.policy, run.engines)
    pred = predict(model, work, run.cores, run.batches[0].batch_id)[half:]
    tail = run.batches[half:]
    meas = np.array([b.measured_s for b in tail])
    events = np.array([b.events for b in tail])
    measured, predicted = summary(events, meas), summary(events, pred)
    return {"fit_batches": half, "eval_batches": n - half, **errors(measured, predicted),
            "measured": measured, "predicted": predicted}


def against(model: CostModel, calibrated_on: Run, other: Run) -> dict[str, Any]:
    """The model fitted on one run predicts another run of the same operator (its input
    replayed under its own policy, engines and cores) — the honest test of a counterfactual:
    a model fitted on a KG run must predict the DLB-H run on the same input, which it never
    saw. Refused when the operators differ (their per-event cost is the model's core)."""
    if other.app != calibrated_on.app:
        raise CalibrationError(
            f"against: run {other.run_id} ran operator {other.app!r}, the model was fitted on "
            f"{calibrated_on.app!r} (run {calibrated_on.run_id}); compare runs of one operator")
    work = evolve(other, other.policy, other.engines)
    pred = predict(model, work, other.cores, other.batches[0].batch_id)
    meas = np.array([b.measured_s for b in other.batches])
    events = np.array([b.events for b in other.batches])
    measured, predicted = summary(events, meas), summary(events, pred)
    return {"run_id": other.run_id, "policy": other.policy, "engines": other.engines,
            "cores": other.cores, **errors(measured, predicted), "measured": measured,
            "predicted": predicted}
