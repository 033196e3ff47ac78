"""DLB-S: DLB (dlb §3, Algorithm 1) with a state-aware key choice.

DLB-H moves the heaviest group that still helps (x < L_a − L_min). Two things make it move
more state than it must (issue 13: 2.2× the MILP optimum, median, on random Zipf
instances): it ignores the state d_g a move costs, and "the heaviest x below the gap"
can be almost the whole gap, which swaps the two engines' loads and removes almost no
imbalance (moving x changes Σ(L−μ)² by 2x(x − gap), ≈ 0 for x ≈ gap).

DLB-S keeps everything of DLB but the key choice (``selectKey``, line 12): the same stop
rule (imbScore ≤ θ, or no move helps), the same donor (the most loaded engine that owns a
helping group) and recipient (the least loaded engine), the same set of allowed moves
(0 < x < L_a − L_min). Among those it takes the group with the most *useful load shed
per byte of state*:

    score(g) = min(x_g, need) / d_g        need = min(L_a − μ, μ − L_min, x*)

* ``L_a − μ`` and ``μ − L_min``: load moved past the mean on either side is not shed, it
  just makes the next imbalance (and the next move);
* ``x*``: the least x that brings Σ(L−μ)² down to the bound of θ in this one move
  (the smaller root of 2x(gap − x) = Σ(L−μ)² − bound), so no load is moved beyond what
  reaching θ needs;
* a zero-state group with positive load scores +inf (a free move); ties go to the larger
  load (fewer moves), then to the lower group id.

With state proportional to load every group up to ``need`` scores the same, so DLB-S
takes the largest group that fits the need, else the smallest one that overshoots it
least: a knapsack-cover greedy, where DLB-H is a "largest that fits the gap" greedy.

Cost: a radix sort of the groups by engine once; per move a vectorised scan of the
donor's groups only (tens of groups at 4,096 × 64) and O(n) for the donor choice.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import DecisionInfo, Policy, PolicyInputError, PolicyKind, Window
from keyshift.policies.dlb import (
    EXACT_EVERY,
    DynamicLoadBalancing,
    ImbalanceStart,
    _help_tol,
    check_theta,
    imbalance_start,
)
from keyshift.policies.engine_index import radix_key


def completing_shed(gap: float, excess: float) -> float:
    """The least x with 2x(gap − x) ≥ ``excess`` (x ≤ gap/2), or +inf if no single move
    between engines ``gap`` apart removes that much of Σ(L−μ)² (the best, x = gap/2,
    removes gap²/2)."""
    if excess <= 0:
        return 0.0
    disc = gap * gap - 2.0 * excess
    if disc < 0:
        return math.inf
    return (gap - math.sqrt(disc)) / 2.0


class DLBState(Policy):
    """DLB with the key of most useful load shed per byte of state (see module doc)."""
    name = "dlb-s"
    kind = PolicyKind.ONLINE

    def __init__(self, theta: float = 15.0, max_moves: int | None = None) -> None:
        self.theta = theta
        self.max_moves = max_moves

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        theta = check_theta(self.theta)
        if self.max_moves is not None and (
            isinstance(self.max_moves, bool)
            or not isinstance(self.max_moves, int | np.integer)
            or self.max_moves < 0
        ):
            raise PolicyInputError("max_moves", f"must be an integer >= 0, got {self.max_moves!r}")
        limit = math.inf if self.max_moves is None else int(self.max_moves)
        details: dict[str, Any] = {"theta": theta, "policy": self.name}
        start, why = imbalance_start(plan, window, theta)
        if start is None:
            return DynamicLoadBalancing._finish(plan, details, [], why)
        steps, reason = _state_moves(start, window.loads, window.state, limit)
        return DynamicLoadBalancing._finish(plan, details, steps, reason)


def _state_moves(start: ImbalanceStart, loads: np.ndarray, state: np.ndarray,
                 limit: float) -> tuple[list[tuple[int, int, int]], str]:
    """DLB's loop with DLB-S's choice of group (:func:`_most_useful_per_byte`)."""
    n, slots, mean, bound, dev2 = start.n, start.slots, start.mean, start.bound, start.dev2
    members, small = _positive_groups(start.engine_of, loads, n)
    owner = start.engine_of.copy()
    with np.errstate(divide="ignore"):
        per_byte = np.where(state > 0, 1.0 / np.where(state > 0, state, 1.0), np.inf)
    load = start.eng.copy()
    tol = _help_tol(mean)
    steps: list[tuple[int, int, int]] = []
    while dev2 > bound:
        if len(steps) >= limit:
            return steps, "max_moves reached"
        b = int(load.argmin())
        low = float(load[b])
        # DLB's donor: the most loaded engine owning a helping group (ties: lower id)
        donors = np.where(load - small > low + tol, load, -np.inf)
        a = int(donors.argmax())
        if donors[a] == -np.inf:
            return steps, "no move improves imbScore"
        gap = float(load[a]) - low
        group_ids = members[a]
        x = loads[group_ids]
        need = min(float(load[a]) - mean, mean - low, completing_shed(gap, dev2 - bound))
        need = max(need, tol)  # a donor at or below μ: any helping move, least state
        pick = _most_useful_per_byte(x, np.minimum(x, need) * per_byte[group_ids],
                                     (owner[group_ids] != a) | (x >= gap - tol))
        g, xg = int(group_ids[pick]), float(x[pick])
        owner[g] = b
        members[b] = np.append(members[b], g)
        if xg <= small[a]:
            left = x[owner[group_ids] == a]
            small[a] = left.min() if left.size else np.inf
        small[b] = min(small[b], xg)
        load[a] -= xg
        load[b] += xg
        dev2 += 2.0 * xg * (xg - gap)
        steps.append((g, int(slots[a]), int(slots[b])))
        if len(steps) % EXACT_EVERY == 0:
            dev2 = float(((load - mean) ** 2).sum())
    return steps, "imbScore within theta"


def _positive_groups(engine_of: np.ndarray, loads: np.ndarray,
                     n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Each live engine's groups of positive load (zero-load groups never move) and its
    smallest positive load. A group that leaves keeps its slot in the donor's array and is
    masked out by the owner, one that arrives is appended: no array is ever re-sorted or
    shrunk."""
    order = np.argsort(radix_key(engine_of, n), kind="stable")
    order = order[loads[order] > 0]
    cuts = np.searchsorted(engine_of[order], np.arange(n + 1))
    members = [order[cuts[e] : cuts[e + 1]] for e in range(n)]
    small = np.full(n, np.inf)
    filled = cuts[:-1] < cuts[1:]
    if order.size:
        small[filled] = np.minimum.reduceat(loads[order], cuts[:-1][filled])
    return members, small


def _most_useful_per_byte(x: np.ndarray, score: np.ndarray, barred: np.ndarray) -> int:
    """The donor's group with the most useful load shed per byte of state (``score``),
    among those not ``barred`` (gone, or too heavy to help); of equal scores the heaviest."""
    score[barred] = -np.inf
    best = score.max()
    ties = np.flatnonzero(score >= best * (1.0 - 1e-12))
    return int(ties[x[ties].argmax()]) if ties.size > 1 else int(ties[0])
