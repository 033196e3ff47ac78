"""Balance and movement metrics shared by policies, simulator, streaming job and reports.

* imbScore / RSTD = 100·std(L)/mean(L) over the live engines (dlb Eq. 2), population std.
* var(L), the variance of the engines' loads (elb-clb Eq. 1), population variance.
* ψ, the state moved between two plans (elb-clb Eq. 2): Σ state of groups whose engine changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def rstd(engine_loads: np.ndarray) -> float:
    """imbScore (dlb Eq. 2). 0 when there is no load, so an idle system counts as balanced."""
    loads = np.asarray(engine_loads, dtype=np.float64)
    if loads.size == 0:
        return 0.0
    mean = loads.mean()
    if mean <= 0:
        return 0.0
    return float(100.0 * loads.std() / mean)


def load_variance(engine_loads: np.ndarray) -> float:
    """var(L) (elb-clb Eq. 1)."""
    loads = np.asarray(engine_loads, dtype=np.float64)
    return float(loads.var()) if loads.size else 0.0


@dataclass(frozen=True)
class Balance:
    """How balanced a set of live engines is."""

    rstd: float
    var: float
    max: float
    mean: float

    @classmethod
    def of(cls, engine_loads: np.ndarray) -> Balance:
        loads = np.asarray(engine_loads, dtype=np.float64)
        return cls(
            rstd=rstd(loads),
            var=load_variance(loads),
            max=float(loads.max()) if loads.size else 0.0,
            mean=float(loads.mean()) if loads.size else 0.0,
        )

    def to_dict(self) -> dict:
        return {"rstd": self.rstd, "var": self.var, "max": self.max, "mean": self.mean}


def live_loads(assignment: np.ndarray, loads: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Loads of the live engines only (the population the metrics are defined over)."""
    per_slot = np.bincount(assignment, weights=loads, minlength=live.size)
    return per_slot[live]


def moved_groups(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Indices of the groups whose engine differs between two assignments."""
    old = np.asarray(old)
    new = np.asarray(new)
    if old.shape != new.shape:
        raise ValueError(f"assignments differ in length: {old.size} vs {new.size}")
    return np.flatnonzero(old != new)


def moved_state(old: np.ndarray, new: np.ndarray, state: np.ndarray) -> float:
    """ψ(F1, F2) (elb-clb Eq. 2)."""
    idx = moved_groups(old, new)
    return float(np.asarray(state, dtype=np.float64)[idx].sum())
