"""dc / wc in the job: which groups a batch splits, from the last complete statistic
window's group loads (keyshift.policies.hot_split), and the open window's loads counted for
the next one.

Why its own piece: the split must be a pure function of the control store's ``key_loads``
and the plan, so that a re-executed or restarted batch splits exactly as its first attempt
did; a restart that joins mid-window reads the loads it missed back from the store. That
bookkeeping is the splitter's, not the batch pipeline's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.hot_split import hot_groups

# (first batch, end batch) -> the groups' summed loads over those batches, from the store
LoadsReader = Callable[[int, int], np.ndarray]


class SplitWindows:
    """The split groups per batch for a splitting policy (``splitter``; None: never)."""

    def __init__(self, splitter: Any | None, groups: int, per_window: int,
                 read_loads: LoadsReader) -> None:
        self.splitter = splitter
        self.groups = groups
        self.per_window = per_window
        self.read_loads = read_loads
        self._open: tuple[int, np.ndarray] | None = None  # (window, its loads so far)
        self._split: tuple[tuple[int, int], tuple[int, ...]] | None = None

    def split_for(self, batch_id: int, plan: Plan) -> tuple[int, ...]:
        """The groups split in ``batch_id``: the head of the last complete window's loads
        (none in the first window), once per (window, plan version)."""
        if self.splitter is None:
            return ()
        w = batch_id // self.per_window
        key = (w, plan.version)
        if self._split is not None and self._split[0] == key:
            return self._split[1]
        if w == 0:
            last = np.zeros(self.groups)
        elif self._open is not None and self._open[0] == w - 1:
            last = self._open[1]
        else:  # a restart: the window before, from the executors' key loads
            k = self.per_window
            last = self.read_loads((w - 1) * k, w * k)
        self._split = (key, hot_groups(self.splitter, last, plan))
        return self._split[1]

    def count(self, batch_id: int, loads: np.ndarray) -> None:
        """Add a batch's group loads to its window's (the next window's split reads them)."""
        if self.splitter is None:
            return
        w = batch_id // self.per_window
        if self._open is None or self._open[0] != w:
            if batch_id % self.per_window:  # joined mid-window (a restart): read the rest
                self._open = (w, np.array(self.read_loads(w * self.per_window, batch_id),
                                          dtype=np.float64))
            else:
                self._open = (w, np.zeros(self.groups))
        self._open[1][:] += loads
