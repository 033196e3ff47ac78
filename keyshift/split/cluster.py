"""Clustering of connections with similar blocking-rate functions (blocking-rate §5.3).

With 32 or more connections each function gets too few samples to be trusted, but PEs on
the same host behave alike. The paper's Distance compares three features of each function,
in log ratios so large differences weigh far more than small ones, and takes their max so no
feature is averaged away: the knee ``w_s`` (the weight where blocking starts, effectively the
connection's service rate), the blocking at the knee, and the blocking at the full weight R.
Agglomerative clustering on that precomputed distance then groups the connections.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import AgglomerativeClustering

from keyshift.split.errors import SplitInputError


def function_features(functions: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(knee w_s, F(w_s), F(R)) per connection from un-tilted functions of shape (N, R + 1).

    Values are floored at ``delta`` so the logarithms stay finite for never-blocking functions.
    """
    F = np.asarray(functions, dtype=np.float64)
    units = F.shape[1] - 1
    floor = max(delta, 1e-12)
    blocking = F > floor
    knee = np.where(blocking.any(axis=1), blocking.argmax(axis=1), units).astype(np.float64)
    knee = np.maximum(knee, 1.0)
    at_knee = np.maximum(F[np.arange(F.shape[0]), knee.astype(np.int64)], floor)
    at_full = np.maximum(F[:, units], floor)
    return knee, at_knee, at_full


def function_distance(functions: np.ndarray, delta: float = 1e-6) -> np.ndarray:
    """The paper's Distance(F_j, F_k) for every pair, shape (N, N), zero on the diagonal.

    ``alpha = log R / |log(R·delta)|`` puts the blocking log-ratios on the scale of the
    weight log-ratio.
    """
    F = np.asarray(functions, dtype=np.float64)
    if F.ndim != 2 or F.shape[1] < 3:
        raise SplitInputError("functions", "need a (connections, R + 1) matrix with R ≥ 2")
    if not 0 < delta < 1:
        raise SplitInputError("delta", "must be in (0, 1)")
    units = F.shape[1] - 1
    scale = abs(np.log(units * delta))
    alpha = np.log(units) / scale if scale > 0 else 1.0
    knee, at_knee, at_full = (np.log(v) for v in function_features(F, delta))
    terms = np.stack(
        [
            np.abs(knee[:, None] - knee[None, :]),
            alpha * np.abs(at_knee[:, None] - at_knee[None, :]),
            alpha * np.abs(at_full[:, None] - at_full[None, :]),
        ]
    )
    return terms.max(axis=0)


def cluster_connections(
    functions: np.ndarray, threshold: float, delta: float = 1e-6, linkage: str = "average"
) -> np.ndarray:
    """Cluster labels 0..K-1 (numbered by first member) from un-tilted functions."""
    F = np.asarray(functions, dtype=np.float64)
    if F.shape[0] < 2:
        return np.zeros(F.shape[0], dtype=np.int64)
    if threshold <= 0:
        raise SplitInputError("cluster_threshold", "must be > 0")
    distance = function_distance(F, delta)
    labels = AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage=linkage, distance_threshold=threshold
    ).fit_predict(distance)
    _, first = np.unique(labels, return_index=True)
    order = np.argsort(np.argsort(first))  # relabel so cluster ids follow first appearance
    return order[labels].astype(np.int64)
