"""PKG, partial key grouping (Nasir et al.; the baseline of dlb §5 and elb-clb §5).

Each group has two candidate engines from two independent 2-universal hashes; every tuple
goes to the currently less loaded of the two ("power of both choices"). A group's tuples
are therefore **split** over two engines.

**Not applicable to stateful CEP.** A split group has its state on two engines, so each
engine sees only part of the key's events: patterns that span both halves are missed and
per-engine partial state produces false positives (dlb §5; elb-clb §1.1 notes the extra
merge operator it would need). ``info.stateful_safe`` is False and ``split_keys``
counts the groups that were split; the comparison is on load only.

Model chosen (the window's tuple order is not part of the input): the *fluid limit* of
tuple-by-tuple least-loaded routing, groups taken heaviest first. A group of load x whose
two choices have loads L_a ≤ L_b sends everything to a when L_b − L_a ≥ x; otherwise it
fills a up to L_b and splits the rest evenly, which is where per-tuple routing converges
when the group's tuples interleave. The plan records, per group, the choice that got the
larger share (the engine that would keep the group's state if it had to pick one);
the engine loads after the decision are the split loads, returned to the base class.

Because the plan holds one engine per group, the split itself travels in ``info.routing``
(a :class:`~keyshift.policies.base.SplitRouting`): for every split group, the *other*
choice (a live slot) and the share of the group's tuples it receives (always ≤ ½; the plan's engine takes the rest). A
consumer that routes tuples (the simulator, a PKG-style partitioner) follows it; one that
ignores it sends the whole group to the plan's engine and measures KG-like hot spots,
which is not PKG.
"""

from __future__ import annotations

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import DecisionInfo, Policy, PolicyKind, SplitRouting, Window
from keyshift.policies.uhlb import check_seed, hash_coefficients, universal_hash


def two_choices(groups: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two distinct candidate engines (dense ids) per group when n ≥ 2."""
    (a1, b1), (a2, b2) = hash_coefficients(seed, 2)
    g = np.arange(groups)
    first = universal_hash(g, n, a1, b1)
    second = universal_hash(g, n, a2, b2)
    if n > 1:
        same = first == second
        second[same] = (first[same] + 1) % n
    return first, second


class PartialKeyGrouping(Policy):
    name = "pkg"
    kind = PolicyKind.REFERENCE
    splits_keys = True

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        slots = plan.live_engines
        n = slots.size
        first, second = two_choices(plan.groups, n, check_seed(self.seed))
        loads = window.loads
        eng = np.zeros(n)
        share_first = np.ones(plan.groups)
        for g in np.argsort(-loads, kind="stable").tolist():
            x = float(loads[g])
            a, b = int(first[g]), int(second[g])
            if a == b:
                eng[a] += x
                continue
            gap = eng[b] - eng[a]
            if gap >= x:
                to_a = x
            elif -gap >= x:
                to_a = 0.0
            else:
                to_a = (x + gap) / 2.0
            eng[a] += to_a
            eng[b] += x - to_a
            share_first[g] = to_a / x if x > 0 else 1.0
        keeps_first = share_first >= 0.5
        primary = np.where(keeps_first, first, second)
        split = (share_first > 0) & (share_first < 1)
        g = np.flatnonzero(split)
        other = np.where(keeps_first[g], second[g], first[g])
        share = np.where(keeps_first[g], 1.0 - share_first[g], share_first[g])
        info = DecisionInfo(
            split_keys=int(g.size),
            routing=SplitRouting(groups=g, engines=slots[other], share=share),
            stateful_safe=False,
            details={"warning": "PKG splits a key's state over two engines: false positives "
                                "in stateful CEP"},
        )
        return plan.with_assignment(slots[primary]), info, eng
