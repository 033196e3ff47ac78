"""Decide: the window's one decision, the vetoes a candidate plan must pass, and the audit
rows (``decisions``) that say what was decided and why.

The order inside a window (docs/design.md, "Control loop": balancing and scaling as one
loop): the scaler first; a change of N is the window's plan change (realized by
:func:`~keyshift.control.scaling.scale_plan`, already balanced around the new mean) and the
balancer waits for the next window; otherwise the balancer's policy decides on the unchanged
plan, and its candidate must pass the vetoes (``controller.min_gain``). The scaler's own
limits (min/max engines, cooldown, maximum step, dry run) are applied by
:class:`~keyshift.elastic.scaler.Scaler`, once for the planner and every baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.elastic.decision import ScalingDecision
from keyshift.metrics import live_loads
from keyshift.plan import Plan
from keyshift.policies import Decision, Moves

from .evaluate import Evaluation
from .floor import FLOOR_COLUMNS, Floor

if TYPE_CHECKING:
    from .guard import Verdict

ACTIONS = ("none", "rebalance", "scale_out", "scale_in", "declined", "ineffective")
"""``none``: nothing to do; ``declined``: a candidate failed a veto (or the scaler's change
was held by the guardrails, :mod:`keyshift.control.guard`); ``ineffective``: the verdict on
an earlier scale-out that did not help (its own row, beside the window's decision); the
others change the plan (or, not realized, are what the loop recommends)."""

RECOMMEND = "recommend only, not realized: "
DRY_RUN = "dry run, not applied: "


def plan_action(old: Plan, new: Plan) -> str:
    """What going from ``old`` to ``new`` does (the plan diff's name)."""
    if new.parallelism > old.parallelism:
        return "scale_out"
    if new.parallelism < old.parallelism:
        return "scale_in"
    return "rebalance" if not np.array_equal(old.assignment, new.assignment) else "none"


def plan_diff(old: Plan, new: Plan, state: np.ndarray) -> Moves:
    """The groups that change engine, with their state: the one plan diff of the loop (the
    policies compute theirs through the same :meth:`Moves.between`)."""
    return Moves.between(old, new, state)


def min_gain_veto(old: Plan, new: Plan, loads: np.ndarray, gain: float) -> str:
    """Why a rebalance is not worth its migration ('' when it is).

    A micro-batch lasts as long as its most loaded engine, so a move pays only if it lowers
    that engine's load. When one group alone outweighs the mean (a hot key under Zipf 1.5),
    imbScore stays above θ whatever the plan, and the policy would shuffle the light
    engines' groups every window: each shuffle is a migration pause for no shorter batch.
    ``controller.min_gain`` (a fraction; 0 turns the check off) is the least relative drop
    of the maximum engine load a rebalance must promise. Changes of the engine count (ELB)
    are not rebalances and always pass.
    """
    if not gain or new.parallelism != old.parallelism:
        return ""
    before = float(live_loads(old.assignment, loads, old.live).max(initial=0.0))
    after = float(live_loads(new.assignment, loads, new.live).max(initial=0.0))
    if before <= 0 or (before - after) >= gain * before:
        return ""
    return (f"the most loaded engine would go {before:.0f} -> {after:.0f} "
            f"({(before - after) / before:.1%} < controller.min_gain {gain:.0%})")


def balancer_reason(d: Decision) -> str:
    why = d.info.reason
    text = (f"imbScore {d.before.rstd:.1f}% -> {d.after.rstd:.1f}%, "
            f"{len(d.moves)} groups moved, psi={d.moves.total_state:.0f}")
    return f"{text}; {why}" if why else text


@dataclass(frozen=True)
class ControlDecision:
    """One window's decision: its ``action`` (see :data:`ACTIONS`), who made it, why,
    whether it was realized, the plans before and after (equal when nothing was realized),
    the candidate and its moves, the evaluation, and both components' raw results."""

    batch_id: int
    window: int
    action: str
    component: str
    reason: str
    realized: bool
    before: Plan
    after: Plan
    candidate: Plan | None
    moves: Moves
    evaluation: Evaluation
    scaling: ScalingDecision | None = None
    balancing: Decision | None = None
    rows: tuple[dict[str, Any], ...] = ()
    verdict: Verdict | None = None  # an earlier scale-out judged at this window's end

    @property
    def changed(self) -> bool:
        """A new plan version is in force from the next batch."""
        return self.realized and self.after is not self.before

    @property
    def plan(self) -> Plan:
        return self.after

    def progress(self) -> str:
        """One line for a per-batch progress display."""
        n = f"N {self.before.parallelism}->{self.after.parallelism}" \
            if self.after.parallelism != self.before.parallelism else \
            f"N {self.before.parallelism}"
        done = "" if self.realized or self.action in ("none", "declined") else " (recommended)"
        return (f"window {self.window}: {self.action}{done} by {self.component}, {n}, "
                f"{self.evaluation.summary()}")


def audit_row(run_id: str, batch_id: int, component: str, policy: str, action: str,
              reason: str, rstd_before: float | None, rstd_after: float | None,
              moved: int | None, psi: float | None, engines_before: int, engines_after: int,
              version: int | None, floor: Floor | None = None,
              effectiveness: float | None = None,
              hold_until: int | None = None) -> dict[str, Any]:
    """A row of ``decisions`` (keyshift.schemas.TABLES['decisions']), written, never read;
    ``floor`` is the window's (:mod:`keyshift.control.floor`), null columns without one;
    ``effectiveness`` and ``hold_until`` a scale-out's verdict (:mod:`keyshift.control.guard`)."""
    return {
        "run_id": run_id, "batch_id": int(batch_id), "decided_at": datetime.now(UTC),
        "component": component, "policy": policy, "action": action, "reason": reason,
        "rstd_before": rstd_before, "rstd_after": rstd_after, "moved_groups": moved,
        "moved_state": psi, "engines_before": int(engines_before),
        "engines_after": int(engines_after), "plan_version": version,
        **(floor.columns() if floor is not None else dict.fromkeys(FLOOR_COLUMNS)),
        "effectiveness": effectiveness, "hold_until_window": hold_until,
    }

