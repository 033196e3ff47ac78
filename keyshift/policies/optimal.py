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
the optimum, and ``info.details["lower_bound"]`` gives the bound.

Small instances only (default ≤ 64 groups × 8 live engines): larger input is refused
with an error naming the field, and an infeasible θ is reported as such.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import DecisionInfo, Policy, PolicyInputError, PolicyKind, Window
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

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        theta, budget = self._check(plan, window)
        n, p = plan.live_engines.size, window.groups
        mu = float(window.loads.sum()) / n
        details: dict[str, Any] = {"objective": self.objective}
        if mu <= 0 or p == 0:
            details.update(optimal=True, value=0.0, lower_bound=0.0, rounds=0)
            return plan, DecisionInfo(details=details), None
        model = self._model(plan, window, theta, budget, mu)
        if model.symmetry_broken:
            details["symmetry_broken"] = True
        found = self._solve(model, theta, budget)
        if found.message:
            details["solver"] = found.message
        min_moved = self.objective == "min_moved_state"
        value = found.moved if min_moved else found.best_dev2 * mu * mu / n
        details.update(
            optimal=bool(found.proven and found.done),
            value=value,
            lower_bound=found.bound if min_moved else found.bound * mu * mu / n,
            rounds=found.rounds,
            cuts=found.cuts,
        )
        details["moved_state" if min_moved else "var"] = value
        return plan.with_assignment(plan.live_engines[found.best]), \
            DecisionInfo(details=details), None

    def _model(self, plan: Plan, window: Window, theta: float, budget: float | None,
               mu: float) -> _Model:
        """The MILP in units of the mean load (μ = 1: HiGHS is numerically happier with
        O(1) coefficients than with squared tuple counts), without its tangent cuts, and
        the incumbent plan of ``min_imbalance``."""
        from scipy.optimize import LinearConstraint
        from scipy.sparse import csr_matrix

        n, p = plan.live_engines.size, window.groups
        here = plan.dense_index[plan.assignment]
        ys, d = window.loads / mu, window.state
        nx = p * n
        stay = np.zeros(nx + n)
        stay[np.arange(p) * n + here] = d  # Σ d_g x_g,here(g) = state that stays
        # Σ_e x_ge = 1
        rows = np.repeat(np.arange(p), n)
        assign = LinearConstraint(
            csr_matrix((np.ones(nx), (rows, np.arange(nx))), shape=(p, nx + n)), 1, 1
        )
        m = _Model(ys=ys, here=here, state=d, n=n, cost=np.zeros(nx + n), fixed=[assign],
                   lower=np.zeros(nx + n), upper=np.r_[np.ones(nx), np.full(n, np.inf)],
                   radius2=n * (theta / 100.0) ** 2)
        if self.objective == "min_moved_state":
            m.cost -= stay  # min ψ = Σd − Σ d·x_here
            m.fixed.append(LinearConstraint(np.r_[np.zeros(nx), np.ones(n)][None, :], -np.inf,
                                            m.radius2))
            reach2 = m.radius2
        else:
            m.cost[nx:] = 1.0
            if budget is not None:
                m.fixed.append(LinearConstraint(-stay[None, :], -np.inf, budget - float(d.sum())))
            # incumbents: the current plan (ψ = 0), and LPT if the budget affords it
            for choice in (here, self._lpt(plan, window, plan.dense_index)):
                if budget is None or float(d[choice != here].sum()) <= budget:
                    dev2 = float(((np.bincount(choice, weights=ys, minlength=n) - 1.0) ** 2).sum())
                    if dev2 < m.best_dev2:
                        m.best, m.best_dev2 = choice, dev2
            reach2 = m.best_dev2
        # Σ_e (L_e − 1)² ≤ D with Σ_e (L_e − 1) = 0 bounds each |L_e − 1| by √(D(n−1)/n):
        # a valid box that makes the relaxation far tighter than the tangents alone.
        reach = np.sqrt(reach2 * (n - 1) / n) + 1e-9
        box = csr_matrix((np.tile(ys, n), (np.repeat(np.arange(n), p),
                          (np.arange(p)[None, :] * n + np.arange(n)[:, None]).ravel())),
                         shape=(n, nx + n))
        m.fixed.append(LinearConstraint(box, 1.0 - reach, 1.0 + reach))
        if self.objective == "min_imbalance" and (budget is None or budget >= float(d.sum())):
            # Nothing ties a group to an engine: engines are interchangeable, so keep only
            # plans whose engines are numbered in order of first use (group g on an engine
            # ≤ g). Every plan has such a renaming, and HiGHS stops exploring n! copies.
            g, e = np.meshgrid(np.arange(min(p, n)), np.arange(n), indexing="ij")
            m.upper[(g * n + e)[e > g]] = 0.0
            m.symmetry_broken = True
        return m

    def _solve(self, m: _Model, theta: float, budget: float | None) -> _Found:
        """Cutting planes: solve, add a tangent of (L_e − 1)² at every engine's load, until
        the best plan is within ``tol`` of the bound (or meets θ, for min_moved_state)."""
        p, n = m.here.size, m.n
        nx = p * n
        found = _Found(best=m.best, best_dev2=m.best_dev2, cuts=len(_CUT_FRACTIONS))
        points = list(_CUT_FRACTIONS)
        tol = float(self.tol) * n
        for rounds in range(1, int(self.max_rounds) + 1):
            found.rounds = rounds
            res = self._milp(m, points, theta, budget)
            if res.x is None and found.best is not None:  # keep the incumbent, unproven
                found.proven = found.done = False
                found.message = res.message
                break
            if res.x is None:
                raise PolicyInputError(
                    "time_limit", f"HiGHS found no solution in {self.time_limit} s ({res.message})"
                )
            choice = np.argmax(res.x[:nx].reshape(p, n), axis=1)
            loads = np.bincount(choice, weights=m.ys, minlength=n)
            dev2 = float(((loads - 1.0) ** 2).sum())
            found.moved = float(m.state[choice != m.here].sum())
            found.proven = res.status == 0
            if self.objective == "min_moved_state":
                found.done = dev2 <= m.radius2 * (1 + 1e-9) + 1e-12
                found.best, found.bound = choice, found.moved
            else:
                found.bound = max(found.bound, float(res.x[nx:].sum()))
                if dev2 < found.best_dev2:
                    found.best, found.best_dev2 = choice, dev2
                found.done = found.best_dev2 - found.bound <= tol
            if found.done:
                break
            points.extend(loads.tolist())
        else:
            found.proven = False
        found.cuts = len(points)
        return found

    def _milp(self, m: _Model, points: list[float], theta: float, budget: float | None) -> Any:
        """One round of HiGHS on the model and the cuts at ``points``; an infeasible one is
        a PolicyInputError naming what cannot be met."""
        from scipy.optimize import Bounds, milp

        p, n = m.here.size, m.n
        problem = {
            "c": m.cost,
            "integrality": np.r_[np.ones(p * n), np.zeros(n)],
            "bounds": Bounds(m.lower, m.upper),
            "constraints": [*m.fixed, self._cuts(points, m.ys, 1.0, p, n)],
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
        return res

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


@dataclass
class _Model:
    """The MILP of one decision: variables x_ge (group g on engine e, p·n of them) then t_e
    (n epigraph variables of (L_e − 1)²), loads ``ys`` in units of the mean, the current
    engine of each group, the state per group, and the incumbent (min_imbalance)."""

    ys: np.ndarray
    here: np.ndarray
    state: np.ndarray
    n: int
    cost: np.ndarray
    fixed: list[Any]
    lower: np.ndarray
    upper: np.ndarray
    radius2: float
    best: np.ndarray | None = None
    best_dev2: float = np.inf
    symmetry_broken: bool = False


@dataclass
class _Found:
    """What the cutting-plane rounds found: the best plan (engine position per group), its
    Σ(L_e − 1)², the bound, the state it moves, whether it is proven and done, the rounds,
    the cuts, and HiGHS' message when it stopped with the incumbent."""

    best: np.ndarray | None
    best_dev2: float
    cuts: int
    bound: float = 0.0
    moved: float = 0.0
    proven: bool = False
    done: bool = False
    rounds: int = 0
    message: str = ""
