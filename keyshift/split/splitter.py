"""The weighted-split controller of one ordered parallel region (blocking-rate §5, Fig. 4, 6).

Each collection interval: smooth the observed blocking rates into the per-connection functions,
decay the evidence beyond the current weights (exploration, LB-adaptive; ``decay=0`` is the
paper's LB-static), optionally cluster the connections and pool their samples, then re-solve
the minimax RAP with Fox's greedy inside per-connection step bounds around the current weights.
Weights are integers in units of 1/``units`` of the tuples (the paper: 1000 units, 0.1 %).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keyshift.split.blocking import BlockingRateModel
from keyshift.split.cluster import cluster_connections
from keyshift.split.errors import SplitInputError
from keyshift.split.fox import fox_minimax

ZERO_WEIGHT_CLUSTERED = 0.0


def even_weights(connections: int, units: int) -> np.ndarray:
    """Round-robin weights: ``units`` split as evenly as integers allow."""
    base, extra = divmod(units, connections)
    return np.full(connections, base, dtype=np.int64) + (np.arange(connections) < extra)


def spread(total: int, members: int) -> np.ndarray:
    """``total`` units over ``members`` connections, differing by at most one unit."""
    base, extra = divmod(int(total), members)
    return np.full(members, base, dtype=np.int64) + (np.arange(members) < extra)


class WeightedSplit:
    """Blocking-rate load balancer for a splitter with N connections (scikit-learn manners).

    Parameters
    ----------
    units: resolution R of the weights (1000 = steps of 0.1 %).
    smoothing: weight of a new blocking-rate sample against the old one at the same weight.
    decay: fraction removed per interval from samples beyond the current weight (paper: 0.1).
    max_step: most units a connection's weight may move in one interval (None = no bound),
        and never more than ``fair_step`` × its fair share units / N: with many connections a
        fixed step would be several times a connection's whole weight, and a cluster of c
        members would jump c steps at once.
    fair_step: see ``max_step``.
    zero_weight: smoothing weight of an interval without blocking (a sample of 0); 0 skips
        them. None (default) = ``smoothing`` below ``cluster_from`` connections, else
        ``ZERO_WEIGHT_CLUSTERED``. The zeros give each function its knee, which helps a few
        connections settle; with many, most slow connections are drafting behind one leader in
        any interval and full-weight zeros wash out the rare evidence that they are slow.
    min_weight: units every connection keeps (the paper's m_j). With 1, even a connection that
        cannot keep up still gets tuples, so its blocking sample at its current weight stays
        fresh instead of decaying: it is re-explored only when it stops blocking.
    cluster_from: cluster connections when there are at least this many (paper: 32).
    cluster_threshold: agglomerative-clustering cut on the paper's Distance.
    delta: strict-monotonicity tilt of the functions (also sets the Distance's alpha).
    """

    def __init__(
        self,
        units: int = 1000,
        smoothing: float = 0.5,
        decay: float = 0.1,
        max_step: int | None = 100,
        fair_step: float = 0.5,
        min_weight: int = 0,
        zero_weight: float | None = None,
        cluster_from: int = 32,
        cluster_threshold: float = 1.2,
        delta: float = 1e-6,
    ) -> None:
        self.units = units
        self.smoothing = smoothing
        self.decay = decay
        self.max_step = max_step
        self.fair_step = fair_step
        self.min_weight = min_weight
        self.zero_weight = zero_weight
        self.cluster_from = cluster_from
        self.cluster_threshold = cluster_threshold
        self.delta = delta

    def _validate(self, connections: int) -> None:
        if int(self.units) != self.units or self.units < 1:
            raise SplitInputError("units", "must be a positive integer")
        if connections < 1 or connections > self.units:
            raise SplitInputError("connections", f"must be in [1, units={self.units}]")
        if not 0.0 <= self.decay < 1.0:
            raise SplitInputError("decay", "must be in [0, 1)")
        if self.max_step is not None and self.max_step < 1:
            raise SplitInputError("max_step", "must be ≥ 1 or None")
        if self.zero_weight is not None and not 0.0 <= self.zero_weight <= 1.0:
            raise SplitInputError("zero_weight", "must be in [0, 1] or None")
        if not self.fair_step > 0:
            raise SplitInputError("fair_step", "must be > 0")
        if self.cluster_from < 2:
            raise SplitInputError("cluster_from", "must be ≥ 2")
        if int(self.min_weight) != self.min_weight or not 0 <= self.min_weight * connections <= self.units:
            raise SplitInputError("min_weight", f"must be a whole number in [0, units / connections = {self.units // connections}]")

    def start(self, connections: int, weights: np.ndarray | None = None) -> np.ndarray:
        """Begin with round-robin (or given) weights and no evidence; returns the weights."""
        self._validate(connections)
        self.model_ = BlockingRateModel(connections, self.units, self.smoothing, self.delta)
        if weights is None:
            self.weights_ = even_weights(connections, self.units)
        else:
            w = np.asarray(weights, dtype=np.int64)
            if w.shape != (connections,) or w.sum() != self.units or (w < 0).any():
                raise SplitInputError("weights", f"must be {connections} non-negative units summing to {self.units}")
            self.weights_ = w.copy()
        self.labels_ = np.arange(connections, dtype=np.int64)
        self.max_blocking_ = 0.0
        return self.weights_.copy()

    def update(self, rates: np.ndarray) -> np.ndarray:
        """Take one interval's blocking rates (one per connection), return the new weights."""
        if not hasattr(self, "model_"):
            raise SplitInputError("rates", "call start() before update()")
        zeros = self.zero_weight
        if zeros is None:
            many = self.model_.connections >= self.cluster_from
            zeros = ZERO_WEIGHT_CLUSTERED if many else self.smoothing
        self.model_.observe(self.weights_, rates, zeros=zeros)
        self.model_.decay(self.weights_, self.decay)
        self.weights_ = self.solve()
        return self.weights_.copy()

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        n, floor = self.weights_.size, int(self.min_weight)
        if self.max_step is None:
            return np.full(n, floor, np.int64), np.full(n, self.units, np.int64)
        step = int(min(self.max_step, max(1, self.fair_step * self.units // n)))
        lo = np.maximum(self.weights_ - step, floor)
        hi = np.maximum(np.minimum(self.weights_ + step, self.units), lo)
        return lo, hi

    def solve(self) -> np.ndarray:
        """Fox's greedy over the current functions (clustered when there are many connections)."""
        n = self.model_.connections
        lo, hi = self._bounds()
        labels = None
        plain = self.model_.functions(tilt=False)
        if n >= self.cluster_from:
            labels = cluster_connections(plain, self.cluster_threshold, self.delta)
        tilted = plain + self.delta * np.arange(self.units + 1)
        w, self.max_blocking_ = solve_weights(tilted, lo, hi, labels, self.model_.pooled)
        self.labels_ = np.arange(n, dtype=np.int64) if labels is None else labels
        return w


def solve_weights(
    functions: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    labels: np.ndarray | None = None,
    pooled: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, float]:
    """Weights (units) and the predicted max blocking, per connection or per cluster (§5.3).

    With ``labels``, each cluster gets one function and Fox runs over clusters; a cluster of c
    members at total weight W runs each member at W / c, so its function is the per-member
    function (``pooled(members)``, default the members' mean) read at W / c. The cluster's
    weight is then shared evenly among its members.
    """
    F = np.asarray(functions, dtype=np.float64)
    units = F.shape[1] - 1
    total = units
    if labels is None:
        w = fox_minimax(F, total, lower, upper, validate=False)
        return w, float(F[np.arange(F.shape[0]), w].max())
    k = int(labels.max()) + 1
    grid = np.arange(units + 1, dtype=np.float64)
    members = [np.flatnonzero(labels == c) for c in range(k)]
    G = np.empty((k, units + 1))
    for c, idx in enumerate(members):  # one row per cluster
        base = pooled(idx) if pooled is not None else F[idx].mean(axis=0)  # tilted: ties spread
        G[c] = np.interp(grid / idx.size, grid, base)
    clo = np.bincount(labels, weights=lower, minlength=k).astype(np.int64)
    chi = np.minimum(np.bincount(labels, weights=upper, minlength=k).astype(np.int64), total)
    W = fox_minimax(G, total, clo, chi, validate=False)
    w = np.empty(labels.size, dtype=np.int64)
    for c, idx in enumerate(members):
        w[idx] = spread(W[c], idx.size)
    return w, float(G[np.arange(k), W].max())
