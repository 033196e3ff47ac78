"""LPTF, longest processing time first (Graham's LPT; the offline baseline of dlb §5).

Offline: it re-partitions every group from scratch, heaviest first onto the least loaded
live engine, ignoring where state sits. It needs the whole window in advance, which a
running stream cannot have: that is why it is a *baseline* (dlb uses it as the bound an
online method should approach) and why the batch layer recomputes it from history.

Choices: with ``window.history`` present and ``use_history`` on, the loads are the mean
over the history windows (the batch job's setting); otherwise the window's own loads.
Because LPT's engines are interchangeable, the resulting subsets are named after the live
slots that already hold most of their state (:func:`match_to_plan`), which lowers ψ
without changing any engine's load.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyKind, Window
from keyshift.policies.relabel import match_to_plan


def lpt_partition(loads: np.ndarray, n: int) -> np.ndarray:
    """Subset label 0..n-1 per group: heaviest group first onto the least loaded subset.

    Ties go to the lower label, as a heap of (load, label) would. The groups are sorted
    once; they are then assigned in *rounds* rather than one heap operation each: rank the
    subsets by (load, label), give the next heaviest groups to them in that order, and
    keep the longest prefix the one-at-a-time rule would also have produced: item k of a
    round is right iff its subset still ranks first after items 0..k−1 were added, i.e.
    its load is below every load grown earlier in the round (ties end the round: the next
    round re-ranks and decides them exactly). Every round keeps at least one item, so the
    result is Graham's LPT exactly, at O(n log n) numpy work per round instead of
    O(log n) Python work per group. Groups of load 0 all go to the subset that ranks first
    when they are reached (adding 0 never changes the ranking).
    """
    p = loads.size
    order = np.argsort(-loads, kind="stable")
    labels = np.empty(p, dtype=np.int64)
    first = order[:n]
    labels[first] = np.arange(first.size)
    subset_load = np.zeros(n)
    subset_load[: first.size] = loads[first]
    ids = np.arange(n)
    pos = first.size
    zero_from = pos + int(np.searchsorted(-loads[order[pos:]], 0.0, side="left"))
    while pos < zero_from:
        rank = np.lexsort((ids, subset_load))
        chunk = order[pos : min(pos + n, zero_from)]
        m = chunk.size
        target = rank[:m]
        before = subset_load[target]
        grown = before + loads[chunk]
        if m > 1:
            below = before[1:] < np.minimum.accumulate(grown[:-1])
            keep = 1 + (m - 1 if below.all() else int(np.argmin(below)))
        else:
            keep = 1
        labels[chunk[:keep]] = target[:keep]
        subset_load[target[:keep]] = grown[:keep]
        pos += keep
    if zero_from < p:
        labels[order[zero_from:]] = np.lexsort((ids, subset_load))[0]
    return labels


class LongestProcessingTimeFirst(Policy):
    name = "lptf"
    kind = PolicyKind.FROM_PLANS

    def __init__(self, use_history: bool = True) -> None:
        self.use_history = use_history

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        from_history = bool(self.use_history) and window.history is not None and len(window.history)
        loads = window.history.mean(axis=0) if from_history else window.loads
        n = plan.parallelism
        labels = lpt_partition(loads, n)
        assignment = match_to_plan(labels, n, plan, window.state)
        info = {"loads_from": "history mean" if from_history else "window"}
        return plan.with_assignment(assignment), info, None
