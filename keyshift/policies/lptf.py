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

import heapq
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, Window
from keyshift.policies.relabel import match_to_plan


def lpt_partition(loads: np.ndarray, n: int) -> np.ndarray:
    """Subset label 0..n-1 per group: heaviest group first onto the least loaded subset."""
    order = np.argsort(-loads, kind="stable")
    labels = np.empty(loads.size, dtype=np.int64)
    first = order[:n]
    labels[first] = np.arange(first.size)
    heap = [(float(loads[g]), i) for i, g in enumerate(first)]
    heap += [(0.0, i) for i in range(first.size, n)]
    heapq.heapify(heap)
    for g in order[n:].tolist():
        load, i = heap[0]
        labels[g] = i
        heapq.heapreplace(heap, (load + float(loads[g]), i))
    return labels


class LongestProcessingTimeFirst(Policy):
    name = "lptf"

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
