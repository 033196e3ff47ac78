"""Which key groups the Spark job splits in a micro-batch (``dc``, ``wc``).

The job keeps every group's state on its home engine (the plan's, key grouping's unless the
scaler changes the engine count) and splits only the head: the groups the policy finds hot in
the last statistic window's loads (θ = 2/(5n) of :mod:`keyshift.policies.choices`, or the
policy's ``hot_threshold``). Splitting the tail too, as PKG's routing does, would cost a
summary row per key of every group and buy little: a tail group is below θ of the stream.

Where a split group's events are summarized is the job's business
(:mod:`keyshift.streaming.engines`): in the input tasks that read them, before the engines'
shuffle, not on d chosen engines — those would need a second read of the input, a shuffle
and a stage of their own, which cost more than a word count's work (docs/engines.md). So
``dc`` and ``wc`` split the same head in the job, and their d matters in the simulator and
``keyshift rebalance``. The head is a pure function of (window loads, plan, policy), so a
re-executed or restarted batch splits exactly what its first attempt split.
"""

from __future__ import annotations

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import PolicyInputError
from keyshift.policies.choices import _ManyChoices


def splitting_policy(policy: object) -> _ManyChoices:
    """The policy, if the job can split keys with it (dc, wc); else one line saying why."""
    if isinstance(policy, _ManyChoices):
        return policy
    name = getattr(policy, "name", type(policy).__name__)
    if getattr(policy, "kind", None) == "splitter":  # an installed package's splitter
        raise PolicyInputError(
            "policy", f"{name}: the streaming job splits hot keys with the head of dc and wc "
            "(a subclass of keyshift.policies.choices' _ManyChoices); "
            f"{type(policy).__name__} is not one")
    raise PolicyInputError(
        "policy", f"{name} splits every key over two engines; the streaming job splits only "
        "hot keys, with dc or wc")


def hot_groups(policy: _ManyChoices, loads: np.ndarray, plan: Plan) -> tuple[int, ...]:
    """The head of ``loads`` (one statistic window's tuples per group), heaviest first;
    nothing with fewer than two live engines (a split could only land on the home)."""
    loads = np.asarray(loads, dtype=np.float64)
    total = float(loads.sum())
    n = plan.parallelism
    if n < 2 or total <= 0:
        return ()
    head, _ = policy.head(loads / total, n)
    return tuple(int(g) for g in head)
