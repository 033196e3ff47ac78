"""One decision outside a running job: ``keyshift rebalance`` and the batch layer's baseline
plans ask what a policy would do with one window's loads.

They go through the control loop like every other caller (one window of a
:class:`~keyshift.control.ControlLoop` in memory, in ``recommend`` mode), so that a policy is
called in one place only (issue 25 item 2) and its answer is the one the job's loop would
have been offered. Recommend mode realizes nothing, and ``min_gain`` is off: the caller
wants the policy's own candidate, and applies it (or not) itself.
"""

from __future__ import annotations

import numpy as np

from keyshift.plan import Plan
from keyshift.policies import Decision, Policy, Window

from .loop import ControlLoop, LoopSettings
from .store import MemoryControlStore
from .window import WindowStats


def decide_once(policy: Policy, plan: Plan, window: Window, name: str = "") -> Decision:
    """The policy's decision on ``window`` from ``plan``, asked by a one-window loop."""
    loop = ControlLoop(MemoryControlStore(), LoopSettings(window_s=1.0, mode="recommend"),
                       policy, name or getattr(type(policy), "name", "") or type(policy).__name__)
    loop.start(plan)
    stats = WindowStats.measured(0, window.loads, float(np.sum(window.loads)), None, 0.0,
                                 window.state)
    stats.history = window.history
    decision = loop.step(stats).balancing
    assert decision is not None  # a loop with a policy and no scaler always asks it
    return decision
