"""dc / wc in the job: which groups a batch splits, from the last closed statistic window's
group loads (keyshift.policies.hot_split).

Why its own piece: the split must be a pure function of the control store's ``key_loads``
and the plan, so that a re-executed or restarted batch splits exactly as its first attempt
did. The windows are the controller's (timed, replayed on a restart at the batches the
crashed attempt closed them), so the window a batch counts in, and the loads of the one
before it, are the same in every attempt; the controller reads those loads back from the
store after a restart. This piece only caches the split per (window, plan version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.hot_split import hot_groups

# the last closed window's per-group loads; None while the first window is open
LastWindowLoads = Callable[[], "np.ndarray | None"]


class SplitWindows:
    """The split groups per batch for a splitting policy (``splitter``; None: never)."""

    def __init__(self, splitter: Any | None, last_loads: LastWindowLoads) -> None:
        self.splitter = splitter
        self.last_loads = last_loads
        self._split: tuple[tuple[int, int], tuple[int, ...]] | None = None

    def split_for(self, window: int, plan: Plan) -> tuple[int, ...]:
        """The groups split by the batches of window ``window`` under ``plan``: the head of
        the last closed window's loads (none in the first window)."""
        if self.splitter is None:
            return ()
        key = (window, plan.version)
        if self._split is not None and self._split[0] == key:
            return self._split[1]
        last = self.last_loads()
        split = () if last is None else tuple(hot_groups(self.splitter, last, plan))
        self._split = (key, split)
        return split
