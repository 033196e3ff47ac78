"""CLB, correlation-based load balancing (elb-clb §4, Algorithm 2).

CLB runs every m windows (the caller's period; CLB itself just recomputes) and ignores
state movement, amortised over the period. It splits the groups into n subsets so that
groups whose load series rise and fall together land on different engines: by Eq. 5 the
covariance *across* subsets is what the split removes from the engines' load variance.

Semantics chosen where Algorithm 2 is garbled, and why:

* **Threshold.** The paper states 0 ≤ θ < 1 while comparing it to covariances, which
  only makes sense for a scale-free covariance; we compare θ (``threshold``) with the
  correlation coefficient ρ_ij, and use the covariances themselves as weights.
* **Weights (lines 2–7).** ω_i = Σ cov(X_i, X_j) over the j in i's subset with
  ρ_ij ≥ θ: the cross covariance a split around i could create.
* **Runs (lines 8–23).** s_k = argmax ω among groups whose subset still has two or more
  members; every other member s_i of s_k's subset with ρ_ki ≥ θ moves to the new subset
  S_r (the text's "≥ θ", and the only reading that separates correlated groups; line 12's
  "≤" contradicts the text). If none qualifies, the member most covariant with s_k moves,
  so each run really creates a subset. Lines 14–18 become exact recomputations:
  ω_j −= Σ_{i moved} W_ji for those left behind, ω_j = Σ_{i ∈ S_r} W_ji for the movers.
  n − 1 runs give n subsets; n defaults to the live engines (``subsets`` may ask fewer).
* **Subsets → engines.** Subsets are anonymous, so they are put on the live slots that
  already hold most of their state (:func:`match_to_plan`): fewer moves, same balance.
* **Caveat, reported not hidden.** Eq. 3–4's claimed equivalence drops the Σ η_i² term:
  minimising the engines' *variance over time* does not balance their *mean* loads.
  CLB can therefore leave engines with very different mean loads (the paper's own Table 1
  shows CLB with the highest imbalance). ``info`` reports ħ = Σ_t var(L_t) over the
  history before and after, the objective CLB is meant to lower.

Cost: one p × p covariance (a matrix product over m windows) and O(p²) for all runs:
p = 4,096, m = 120 is well under a second; float32 keeps the matrices at 64 MB each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, Window
from keyshift.policies.relabel import match_to_plan


def covariance_split(history: np.ndarray, subsets: int, threshold: float) -> tuple[np.ndarray, int]:
    """Subset label per group from Algorithm 2; also the number of fallback splits.

    Only two p × p matrices are ever held (allocation dominates at p = 4,096): the
    correlations R, thresholded in place, and the boolean "qualifies" mask. Any weight sum
    Σ_{j∈M} W_ij = σ_i · Σ_{j∈M} R_ij σ_j is then one matrix-vector product.
    """
    m, p = history.shape
    x = (history - history.mean(axis=0)).astype(np.float32)
    corr = x.T @ x
    corr /= np.float32(m)
    sigma = np.sqrt(np.clip(np.diag(corr), 0, None))
    flat = sigma <= 0  # ρ is undefined for a constant series: such a group never qualifies
    safe = np.where(flat, np.float32(1), sigma).astype(np.float32)
    corr /= safe[:, None]
    corr /= safe[None, :]
    qualifies = corr >= np.float32(threshold)
    qualifies[flat, :] = False
    qualifies[:, flat] = False
    np.fill_diagonal(qualifies, False)
    corr *= qualifies
    sig = sigma.astype(np.float32)

    def weight_within(rows: np.ndarray, members: np.ndarray) -> np.ndarray:
        """Σ_{j ∈ members} W_ij for i in ``rows`` (members ⊆ rows): only the rows' block
        is read, so later runs on smaller subsets cost far less than a full product."""
        if rows.size == p:
            return sig * (corr @ (sig * members))
        s_rows = sig[rows]
        return s_rows * (corr[np.ix_(rows, rows)] @ (s_rows * members[rows]))

    label = np.zeros(p, dtype=np.int64)
    everyone = np.arange(p)
    omega = weight_within(everyone, np.ones(p, dtype=np.float32)).astype(np.float64)
    size = np.zeros(subsets, dtype=np.int64)
    size[0] = p
    fallbacks = 0
    for r in range(1, min(subsets, p)):
        splittable = size[label] >= 2
        k = int(np.argmax(np.where(splittable, omega, -np.inf)))
        h = label[k]
        same = label == h
        moving = same & qualifies[k]
        if not moving.any():
            others = np.flatnonzero(same)
            others = others[others != k]
            cov_k = x[:, k] @ x[:, others]
            moving = np.zeros(p, dtype=bool)
            moving[others[int(np.argmax(cov_k))]] = True
            fallbacks += 1
        rows = np.flatnonzero(same)
        pulled = weight_within(rows, moving.astype(np.float32)).astype(np.float64)
        stays = ~moving[rows]
        omega[rows[stays]] -= pulled[stays]
        omega[rows[~stays]] = pulled[~stays]
        label[moving] = r
        size[h] -= int(moving.sum())
        size[r] = int(moving.sum())
    return label, fallbacks


def hbar(history: np.ndarray, engine_of: np.ndarray, engines: int) -> float:
    """ħ(F) = Σ_t var(L_t) (elb-clb §2.2) over the history windows."""
    onehot = np.zeros((engine_of.size, engines))
    onehot[np.arange(engine_of.size), engine_of] = 1.0
    return float((history @ onehot).var(axis=1).sum())


class CorrelationLoadBalancing(Policy):
    name = "clb"

    def __init__(self, threshold: float = 0.0, subsets: int | None = None) -> None:
        self.threshold = threshold
        self.subsets = subsets

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        try:
            threshold = float(self.threshold)
        except (TypeError, ValueError):
            raise PolicyInputError("threshold", f"must be a number, got {self.threshold!r}") from None
        if not -1.0 <= threshold < 1.0:
            raise PolicyInputError("threshold", f"is a correlation, must be in [-1, 1), got {threshold}")
        n = plan.parallelism
        subsets = n if self.subsets in (None, 0) else self.subsets
        if isinstance(subsets, bool) or not isinstance(subsets, int | np.integer) or not 1 <= subsets <= n:
            raise PolicyInputError("subsets", f"must be an integer in [1, {n}], got {self.subsets!r}")
        history = window.history
        if history is None or history.shape[0] < 2:
            raise PolicyInputError("history", "CLB needs at least 2 windows of group loads")
        label, fallbacks = covariance_split(history, int(subsets), threshold)
        assignment = match_to_plan(label, int(subsets), plan, window.state)
        dense = plan.dense_index
        info = {
            "subsets": int(subsets),
            "threshold": threshold,
            "windows": int(history.shape[0]),
            "fallback_splits": fallbacks,
            "hbar_before": hbar(history, dense[plan.assignment], n),
            "hbar_after": hbar(history, dense[assignment], n),
        }
        return plan.with_assignment(assignment), info, None
