"""The exact reference: a MILP (HiGHS via ``scipy.optimize.milp``) for small instances.

It exists so every heuristic can be reported as a ratio to the optimum of *the same*
objective. Two objectives (``objective``):

* ``"min_moved_state"``: the least ψ (elb-clb Eq. 2, Σ state of moved groups) over all
  plans of the groups onto the live engines with imbScore ≤ θ (dlb Eq. 2). This is DLB's
  own goal: stop once imbScore ≤ θ, moving as little as possible.
* ``"min_imbalance"``: the least var(L) (elb-clb Eq. 1; with the mean fixed this is also
  the least imbScore) over all plans with ψ ≤ ``budget`` (no budget: plain balance).

Formulation. Binary x_ge (group g on live engine e), continuous t_e ≥ 0. The nonlinear
part is the convex quadratic Σ_e (L_e − μ)² with L_e = Σ_g y_g x_ge and μ = w/n fixed:
imbScore ≤ θ  ⇔  Σ_e (L_e − μ)² ≤ n(θμ/100)². Each t_e is held above tangent planes of
(L_e − μ)² (t_e ≥ (a − μ)² + 2(a − μ)(L_e − a) for cut points a). Tangents under-estimate
a convex function, so the MILP is a relaxation: its optimum is a bound. We solve, evaluate
the true quadratic at the solution, and if it violates (min_moved_state) or exceeds t by
more than a tolerance (min_imbalance) we add the tangents at the solution's loads and
solve again (Kelley's cutting planes, made finite by the finitely many integer points).
On exit the solution is feasible for the true problem and optimal for a relaxation, hence
optimal: exact for min_moved_state; for min_imbalance within ``tol`` (relative to μ²n) of
the optimum, and ``info["lower_bound"]`` gives the bound.

Small instances only (default ≤ 64 groups × 8 live engines): larger input is refused
with an error naming the field, and an infeasible θ is reported as such.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, PolicyKind, Window
from keyshift.policies.dlb import check_theta

if TYPE_CHECKING:
    from scipy.optimize import LinearConstraint

OBJECTIVES = ("min_moved_state", "min_imbalance")
_CUT_FRACTIONS = np.array([0.0, 0.5, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0])


@contextmanager
def _native_stdout_silenced() -> Iterator[None]:
    """HiGHS' C++ code prints debug lines straight to file descriptor 1 in some MIP paths;
    ``keyshift rebalance`` owns stdout for its JSON, so silence the descriptor meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class ExactReference(Policy):
    name = "optimal"
    kind = PolicyKind.REFERENCE

    def __init__(
        self,
        objective: str = "min_moved_state",
        theta: float = 15.0,
        budget: float | None = None,
        time_limit: float = 60.0,
        tol: float = 1e-7,
        max_groups: int = 64,
        max_engines: int = 8,
        max_rounds: int = 200,
    ) -> None:
        self.objective = objective
        self.theta = theta
        self.budget = budget
        self.time_limit = time_limit
        self.tol = tol
        self.max_groups = max_groups
        self.max_engines = max_engines
        self.max_rounds = max_rounds

    def _check(self, plan: Plan, window: Window) -> tuple[float, float | None]:
        if self.objective not in OBJECTIVES:
            raise PolicyInputError(
                "objective", f"must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        theta = check_theta(self.theta)
        for field in ("time_limit", "tol"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise PolicyInputError(field, f"must be a number > 0, got {value!r}")
        for field in ("max_groups", "max_engines", "max_rounds"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PolicyInputError(field, f"must be an integer >= 1, got {value!r}")
        budget = self.budget
        if budget is not None:
            try:
                budget = float(budget)
            except (TypeError, ValueError):
                raise PolicyInputError("budget", f"must be a number, got {budget!r}") from None
            if not budget >= 0:
                raise PolicyInputError("budget", f"must be >= 0, got {self.budget!r}")
        if window.groups > self.max_groups:
            raise PolicyInputError(
                "loads", f"{window.groups} groups is too large for the exact MILP "
                f"(max_groups={self.max_groups})"
            )
        if plan.parallelism > self.max_engines:
            raise PolicyInputError(
                "engines", f"{plan.parallelism} live engines is too large for the exact MILP "
                f"(max_engines={self.max_engines})"
            )
        return theta, budget

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        # scipy's MILP here, not at import: listing the policies imports this module
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_matrix

        theta, budget = self._check(plan, window)
        slots = plan.live_engines
        n, p = slots.size, window.groups
        here = plan.dense_index[plan.assignment]
        y, d = window.loads, window.state
        mu = float(y.sum()) / n
        info: dict[str, Any] = {"objective": self.objective}
        if mu <= 0 or p == 0:
            info.update(optimal=True, value=0.0, lower_bound=0.0, rounds=0)
            return plan, info, None

        # Work in units of the mean load (μ = 1): HiGHS is numerically happier with O(1)
        # coefficients than with squared tuple counts.
        ys = y / mu
        nx = p * n
        stay = np.zeros(nx + n)
        stay[np.arange(p) * n + here] = d  # Σ d_g x_g,here(g) = state that stays
        # Σ_e x_ge = 1
        rows = np.repeat(np.arange(p), n)
        assign = LinearConstraint(
            csr_matrix((np.ones(nx), (rows, np.arange(nx))), shape=(p, nx + n)), 1, 1
        )
        fixed: list[LinearConstraint] = [assign]
        cost = np.zeros(nx + n)
        radius2 = n * (theta / 100.0) ** 2
        best, best_dev2 = None, np.inf
        if self.objective == "min_moved_state":
            cost -= stay  # min ψ = Σd − Σ d·x_here
            fixed.append(LinearConstraint(np.r_[np.zeros(nx), np.ones(n)][None, :], -np.inf, radius2))
            reach2 = radius2
        else:
            cost[nx:] = 1.0
            if budget is not None:
                fixed.append(LinearConstraint(-stay[None, :], -np.inf, budget - float(d.sum())))
            # incumbents: the current plan (ψ = 0), and LPT if the budget affords it
            for choice in (here, self._lpt(plan, window, plan.dense_index)):
                if budget is None or float(d[choice != here].sum()) <= budget:
                    dev2 = float(((np.bincount(choice, weights=ys, minlength=n) - 1.0) ** 2).sum())
                    if dev2 < best_dev2:
                        best, best_dev2 = choice, dev2
            reach2 = best_dev2
        # Σ_e (L_e − 1)² ≤ D with Σ_e (L_e − 1) = 0 bounds each |L_e − 1| by √(D(n−1)/n):
        # a valid box that makes the relaxation far tighter than the tangents alone.
        reach = np.sqrt(reach2 * (n - 1) / n) + 1e-9
        box = csr_matrix((np.tile(ys, n), (np.repeat(np.arange(n), p),
                          (np.arange(p)[None, :] * n + np.arange(n)[:, None]).ravel())),
                         shape=(n, nx + n))
        fixed.append(LinearConstraint(box, 1.0 - reach, 1.0 + reach))

        points = list(_CUT_FRACTIONS)
        lower = np.zeros(nx + n)
        upper = np.r_[np.ones(nx), np.full(n, np.inf)]
        if self.objective == "min_imbalance" and (budget is None or budget >= float(d.sum())):
            # Nothing ties a group to an engine: engines are interchangeable, so keep only
            # plans whose engines are numbered in order of first use (group g on an engine
            # ≤ g). Every plan has such a renaming, and HiGHS stops exploring n! copies.
            g, e = np.meshgrid(np.arange(min(p, n)), np.arange(n), indexing="ij")
            upper[(g * n + e)[e > g]] = 0.0
            info["symmetry_broken"] = True
        integrality = np.r_[np.ones(nx), np.zeros(n)]
        tol = float(self.tol) * n
        bound = 0.0
        for rounds in range(1, int(self.max_rounds) + 1):
            problem = {
                "c": cost,
                "integrality": integrality,
                "bounds": Bounds(lower, upper),
                "constraints": [*fixed, self._cuts(points, ys, 1.0, p, n)],
            }
            options = {"time_limit": float(self.time_limit), "mip_rel_gap": 0.0}
            with _native_stdout_silenced():
                res = milp(**problem, options=options)
                if res.status == 4:  # HiGHS' presolve occasionally fails here; solve as is
                    res = milp(**problem, options={**options, "presolve": False})
            if res.status == 2:  # infeasible relaxation ⇒ infeasible problem
                raise PolicyInputError(
                    "theta", f"no plan of {p} groups onto {n} engines reaches imbScore <= {theta}"
                    if self.objective == "min_moved_state"
                    else f"infeasible (budget={budget})",
                )
            if res.x is None and best is not None:  # keep the incumbent, say it is unproven
                proven = done = False
                info["solver"] = res.message
                break
            if res.x is None:
                raise PolicyInputError(
                    "time_limit", f"HiGHS found no solution in {self.time_limit} s ({res.message})"
                )
            x = res.x[:nx].reshape(p, n)
            choice = np.argmax(x, axis=1)
            loads = np.bincount(choice, weights=ys, minlength=n)
            dev2 = float(((loads - 1.0) ** 2).sum())
            moved = float(d[choice != here].sum())
            proven = res.status == 0
            if self.objective == "min_moved_state":
                done = dev2 <= radius2 * (1 + 1e-9) + 1e-12
                best, bound = choice, moved
            else:
                bound = max(bound, float(res.x[nx:].sum()))
                if dev2 < best_dev2:
                    best, best_dev2 = choice, dev2
                done = best_dev2 - bound <= tol
            if done:
                break
            points.extend(loads.tolist())
        else:
            proven = False
        value = moved if self.objective == "min_moved_state" else best_dev2 * mu * mu / n
        info.update(
            optimal=bool(proven and done),
            value=value,
            lower_bound=bound if self.objective == "min_moved_state" else bound * mu * mu / n,
            rounds=rounds,
            cuts=len(points),
        )
        if self.objective == "min_moved_state":
            info["moved_state"] = moved
        else:
            info["var"] = value
        return plan.with_assignment(slots[best]), info, None

    @staticmethod
    def _lpt(plan: Plan, window: Window, dense: np.ndarray) -> np.ndarray:
        from keyshift.policies.lptf import lpt_partition
        from keyshift.policies.relabel import match_to_plan

        labels = lpt_partition(window.loads, plan.parallelism)
        return dense[match_to_plan(labels, plan.parallelism, plan, window.state)]

    @staticmethod
    def _cuts(points: list[float], y: np.ndarray, mu: float, p: int, n: int) -> LinearConstraint:
        """t_e − 2(a−μ)·L_e ≥ μ² − a² for every engine e and cut point a."""
        from scipy.optimize import LinearConstraint
        from scipy.sparse import coo_matrix, vstack

        a = np.unique(np.asarray(points))
        k = a.size
        blocks = []
        for e in range(n):
            # rows: one per cut point; columns: x_ge for all g (weight y_g), t_e
            r = np.repeat(np.arange(k), p + 1)
            c = np.tile(np.r_[np.arange(p) * n + e, p * n + e], k)
            v = np.concatenate([np.r_[-2.0 * (ai - mu) * y, 1.0] for ai in a])
            blocks.append(coo_matrix((v, (r, c)), shape=(k, p * n + n)))
        return LinearConstraint(vstack(blocks).tocsr(), np.tile(mu * mu - a * a, n), np.inf)
