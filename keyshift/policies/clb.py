"""CLB, correlation-based load balancing (elb-clb §4), rebuilt so it lowers its own objective.

CLB runs every m windows (the caller's period; CLB itself just recomputes) and ignores
state movement, amortised over the period. Its objective is ħ(F) = Σ_t var(L_t) over the
history windows (elb-clb §2.2).

Why not Algorithm 2 as printed. With μ_t the (fixed) mean engine load of window t,

    n·ħ(F) = Σ_t Σ_k L_kt² − n·Σ_t μ_t²,

so lowering ħ means lowering Σ_k Σ_t L_kt². Eq. 3–4 claim this equals lowering
Σ_k var(N_k), the *covariance* part only; the step drops Σ_k η_k², the squared *mean*
loads of the subsets. Algorithm 2 then splits off all of a seed group's correlated partners
at once, which on positively correlated data (every Zipf stream whose rate varies) yields
n − 1 near-singletons and one giant subset: ħ rises (measured in issue 13: 6 perfectly
correlated groups on 3 engines, RSTD 0 → 70.7 %).

What CLB does (``split="greedy"``, the default). Adding group i (load series y_i) to
subset k raises Σ_t L_kt² by 2·Σ_t L_kt·y_it + Σ_t y_it², the first term being the
covariance *and* the mean coupling of i with k. So the groups are taken in descending
Σ_t y_it² and each goes to the subset with the least Σ_t L_kt·y_it: the exact greedy
step on ħ (Graham's LPT when the series are constant). Then the subsets are named after
the live slots that already hold most of their state (:func:`match_to_plan`), and the
current plan is kept when the new one would not lower ħ: **ħ never rises** (tested).

``split="covariance"`` keeps Algorithm 2 as the paper prints it, for comparison; the
keep-if-not-better guard applies to it too. Its semantics, where the listing is garbled:

* **Threshold.** The paper states 0 ≤ θ < 1 while comparing it to covariances, which
  only makes sense for a scale-free covariance; we compare θ (``threshold``) with the
  correlation coefficient ρ_ij, and use the covariances themselves as weights.
* **Weights (lines 2–7).** ω_i = Σ cov(X_i, X_j) over the j in i's subset with
  ρ_ij ≥ θ: the cross covariance a split around i could create.
* **Runs (lines 8–23).** s_k = argmax ω among groups whose subset still has two or more
  members; every other member s_i of s_k's subset with ρ_ki ≥ θ moves to the new subset
  S_r (the text's "≥ θ"; line 12's "≤" contradicts the text). If none qualifies, the
  member most covariant with s_k moves, so each run really creates a subset.

Cost (greedy): one pass over the p groups, each an (n × m) · m product: p = 4,096,
m = 120, n = 64 in tens of milliseconds. ``info`` reports ħ before, of the computed
split, and after (after ≤ before).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, PolicyKind, Window
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


def greedy_split(history: np.ndarray, subsets: int) -> np.ndarray:
    """Subset label per group: descending Σ_t y_it², each onto the subset k with the least
    Σ_t L_kt·y_it (the greedy step on Σ_k Σ_t L_kt², hence on ħ; ties: lower label).

    Groups with an all-zero series change nothing and go to subset 0 at the end."""
    m, p = history.shape
    series = np.ascontiguousarray(history.T)  # (p, m): one row per group
    energy = np.einsum("ij,ij->i", series, series)
    order = np.argsort(-energy, kind="stable")
    label = np.zeros(p, dtype=np.int64)
    acc = np.zeros((subsets, m))
    for i in order[energy[order] > 0].tolist():
        y = series[i]
        k = int(np.argmin(acc @ y))
        label[i] = k
        acc[k] += y
    return label


def hbar(history: np.ndarray, engine_of: np.ndarray, engines: int) -> float:
    """ħ(F) = Σ_t var(L_t) (elb-clb §2.2) over the history windows."""
    onehot = np.zeros((engine_of.size, engines))
    onehot[np.arange(engine_of.size), engine_of] = 1.0
    return float((history @ onehot).var(axis=1).sum())


SPLITS = ("greedy", "covariance")


class CorrelationLoadBalancing(Policy):
    name = "clb"
    kind = PolicyKind.FROM_PLANS

    def __init__(self, threshold: float = 0.0, subsets: int | None = None,
                 split: str = "greedy") -> None:
        self.threshold = threshold
        self.subsets = subsets
        self.split = split

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        try:
            threshold = float(self.threshold)
        except (TypeError, ValueError):
            raise PolicyInputError("threshold", f"must be a number, got {self.threshold!r}") from None
        if not -1.0 <= threshold < 1.0:
            raise PolicyInputError("threshold", f"is a correlation, must be in [-1, 1), got {threshold}")
        if self.split not in SPLITS:
            raise PolicyInputError("split", f"must be one of {', '.join(SPLITS)}, got {self.split!r}")
        n = plan.parallelism
        subsets = n if self.subsets in (None, 0) else self.subsets
        if isinstance(subsets, bool) or not isinstance(subsets, int | np.integer) or not 1 <= subsets <= n:
            raise PolicyInputError("subsets", f"must be an integer in [1, {n}], got {self.subsets!r}")
        history = window.history
        if history is None or history.shape[0] < 2:
            raise PolicyInputError("history", "CLB needs at least 2 windows of group loads")
        info: dict[str, Any] = {"subsets": int(subsets), "split": self.split,
                                "windows": int(history.shape[0])}
        if self.split == "greedy":
            label = greedy_split(history, int(subsets))
        else:
            label, fallbacks = covariance_split(history, int(subsets), threshold)
            info.update(threshold=threshold, fallback_splits=fallbacks)
        assignment = match_to_plan(label, int(subsets), plan, window.state)
        dense = plan.dense_index
        before = hbar(history, dense[plan.assignment], n)
        computed = hbar(history, dense[assignment], n)
        info.update(hbar_before=before, hbar_split=computed)
        if not computed < before * (1 - 1e-12):
            info.update(hbar_after=before, reason="kept the current plan: the split would not lower ħ")
            return plan, info, None
        info.update(hbar_after=computed, reason="the split lowers ħ")
        return plan.with_assignment(assignment), info, None
