"""Shortest path through the layered state graph of elastic-cep §III-C1 (Fig. 4).

Vertices v_{ij} are (engine count i, window j); arcs only join consecutive windows, so the
graph is a DAG in layers and the shortest path is a forward dynamic programme over the
layers: D_j(i') = min_i D_{j-1}(i) + RC(i, i') + V_j(i'), where V_j(i') is the vertex part of
Eq. 11 (misses and engines) and RC(i, i') Eq. 12. Dijkstra (the paper's choice) would visit
the same vertices in a worse order; the DP is exact and vectorised over the engine states,
so H = 100 windows × 64 states costs well under a millisecond per layer.

The user limits are part of the graph, not a filter on its result, so the path found is
the cheapest *feasible* one: a maximum step removes the arcs |i − i'| > step, and a
cooldown of c windows adds an "age" coordinate (windows since the last change, capped at
c) so that a change is only possible from age c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keyshift.elastic.errors import ElasticInputError


@dataclass(frozen=True)
class Path:
    """The cheapest feasible sequence of engine counts, one per window, and its DP cost."""

    engines: np.ndarray
    cost: float


def _change_arcs(d: np.ndarray, rc: float, max_step: int) -> tuple[np.ndarray, np.ndarray]:
    """Best way to *change* into each state i' ≠ i: (cost D(i) + RC, argmin i), per i'."""
    size = d.size
    if size == 1:
        return np.full(1, np.inf), np.zeros(1, dtype=np.int64)
    if max_step == 0 or max_step >= size - 1:
        # Every change costs the same RC, so the best predecessor is the global minimum,
        # except for i' itself, which takes the second best.
        order = np.argpartition(d, 1)[:2]
        first, second = (order if d[order[0]] <= d[order[1]] else order[::-1])
        arg = np.full(size, first, dtype=np.int64)
        arg[first] = second
        return d[arg] + rc, arg
    # Bounded step: scan the band of predecessors i' ± 1..step, one shifted view each.
    best = np.full(size, np.inf)
    arg = np.zeros(size, dtype=np.int64)
    idx = np.arange(size)
    for off in range(1, max_step + 1):
        for lo_dst, hi_dst, shift in ((off, size, -off), (0, size - off, off)):
            cand = d[lo_dst + shift: hi_dst + shift]
            sl = best[lo_dst:hi_dst]
            better = cand < sl
            sl[better] = cand[better]
            arg[lo_dst:hi_dst][better] = idx[lo_dst + shift: hi_dst + shift][better]
    return best + rc, arg


def shortest_path(
    vertex: np.ndarray,
    start: int,
    rc: float,
    max_step: int = 0,
    cooldown: int = 0,
    start_age: int | None = None,
) -> Path:
    """Cheapest path over ``vertex`` (H × S costs of states 0..S-1) from state ``start``.

    ``start`` is the state before the first window; moving to another state at window j
    costs ``rc``. ``max_step`` > 0 bounds |Δstate| per window; ``cooldown`` > 0 requires that
    many windows without change between two changes, counting ``start_age`` windows
    already held before the first one (default: the cooldown is over).
    """
    vertex = np.asarray(vertex, dtype=np.float64)
    horizon, size = vertex.shape
    if not 0 <= start < size:
        raise ElasticInputError("engines_now", f"state {start} outside 0..{size - 1}")
    if max_step < 0 or cooldown < 0:
        raise ElasticInputError("max_step" if max_step < 0 else "cooldown_windows", "must be >= 0")
    ages = cooldown + 1
    age0 = cooldown if start_age is None else min(max(int(start_age), 0), cooldown)

    if ages == 1 and (max_step == 0 or max_step >= size - 1):
        return _plain(vertex, start, rc)
    # back[j, a, i'] = flat index (a_prev * size + i_prev) of the predecessor of (a, i') at j.
    back = np.empty((horizon, ages, size), dtype=np.int64)
    d = np.full((ages, size), np.inf)
    prev = np.full((ages, size), np.inf)
    prev[age0, start] = 0.0
    flat = np.arange(ages * size).reshape(ages, size)
    for j in range(horizon):
        d.fill(np.inf)
        bj = back[j]
        # Stay: age grows by one, capped at the cooldown.
        if ages == 1:
            d[0] = prev[0]
            bj[0] = flat[0]
        else:
            d[1:] = prev[:-1]
            bj[1:] = flat[:-1]
            older = prev[-1] < d[-1]
            d[-1] = np.where(older, prev[-1], d[-1])
            bj[-1] = np.where(older, flat[-1], bj[-1])
        # Change: only from the oldest age, lands at age 0.
        change, arg = _change_arcs(prev[-1], rc, max_step)
        better = change < d[0]
        d[0] = np.where(better, change, d[0])
        bj[0] = np.where(better, (ages - 1) * size + arg, bj[0])
        d += vertex[j]
        prev, d = d, prev
    end = int(np.argmin(prev))
    cost = float(prev.flat[end])
    states = np.empty(horizon, dtype=np.int64)
    node = end
    for j in range(horizon - 1, -1, -1):
        states[j] = node % size
        node = int(back[j].flat[node])
    return Path(engines=states, cost=cost)


def _plain(vertex: np.ndarray, start: int, rc: float) -> Path:
    """The paper's graph with no limits: a change into i' always comes from the cheapest
    state m (for i' = m staying is at least as cheap), so each layer is O(S)."""
    horizon, size = vertex.shape
    idx = np.arange(size)
    back = np.empty((horizon, size), dtype=np.int64)
    prev = np.full(size, np.inf)
    prev[start] = 0.0
    for j in range(horizon):
        m = int(prev.argmin())
        change = prev[m] + rc
        move = change < prev
        back[j] = idx
        back[j, move] = m
        prev = np.where(move, change, prev) + vertex[j]
    states = np.empty(horizon, dtype=np.int64)
    node = int(prev.argmin())
    cost = float(prev[node])
    for j in range(horizon - 1, -1, -1):
        states[j] = node
        node = int(back[j, node])
    return Path(engines=states, cost=cost)
