"""UHLB, universal-hash load balancing (the baseline of elb-clb §5).

The hash: ``h(g) = ((a·g + b) mod P) mod n`` over the n live engines, (a, b) drawn from the
2-universal family of Carter and Wegman, P = 2³¹ − 1 (a Mersenne prime larger than any
group id), a ∈ [1, P), b ∈ [0, P). Any two groups collide with probability about 1/n,
which balances well on average and knows nothing about loads or state.

What it re-hashes, and when (our reading of elb-clb §5): the paper runs UHLB as a *load
balancer* at the same frequency as ELB and PKG (1/f = 1, Table 1), says it "balances load
with a universal hash function rather than the key grouping" and that it is "chosen at
random", and Fig. 4 has it moving 24.2 % of the state per window: more than ELB (14.5 %),
far less than a full re-draw, which would move ≈ 1 − 1/n of the state (90 % at n = 10)
every window. The reading consistent with all of that is ELB's trigger with a hash in
place of ELB's explicit placement:

* **Initial placement.** A plan of version 0 (the run's starting plan: nothing has been
  decided yet) is placed entirely by h₀, UHLB's own hash; elb-clb's UHLB never runs on
  another policy's placement.
* **When.** Every decision; nothing happens while every live engine is inside the band
  [μ(1 − θ/100), μ(1 + θ/100)] (μ the mean live load, θ as for DLB and ELB, default 15).
* **What.** Every group on an engine *above* the band is re-hashed by a hash freshly drawn
  from the family; a group whose new hash is its current engine stays. Groups on engines
  inside or below the band stay put. The state moved is thus about (1 − 1/n) × the state
  of the hot engines: the "expensive state migration" of hash-based rebalancing the paper
  argues against (§1.1), without the full re-draw's 1 − 1/n of everything.
* **Which hash.** Round r of a plan is its version: hash r uses coefficients drawn from
  (``seed``, r), so the policy stays stateless and deterministic, and a plan that was
  changed gets a different hash next time (a hot spot is not re-hashed onto itself for
  ever). ``rehash="all"`` re-hashes every group when triggered (the full re-draw, for
  comparison).

A single group heavier than the band's top keeps its engine above the band and is
re-hashed, i.e. moved, in every window: load-blind, as a hash is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, PolicyKind, Window
from keyshift.policies.dlb import check_theta

MERSENNE_31 = (1 << 31) - 1


def universal_hash(groups: np.ndarray, n: int, a: int, b: int, prime: int = MERSENNE_31) -> np.ndarray:
    """((a·g + b) mod P) mod n, exact in int64 for g, a, b < 2³¹."""
    return ((a * groups.astype(np.int64) + b) % prime) % n


def hash_coefficients(seed: int | list[int], count: int) -> list[tuple[int, int]]:
    """``count`` functions of the 2-universal family, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        (int(rng.integers(1, MERSENNE_31)), int(rng.integers(0, MERSENNE_31))) for _ in range(count)
    ]


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise PolicyInputError("seed", f"must be an integer >= 0, got {seed!r}")
    return int(seed)


REHASH = ("overloaded", "all")


class UniversalHashing(Policy):
    name = "uhlb"
    kind = PolicyKind.FROM_PLANS

    def __init__(self, seed: int = 0, theta: float = 15.0, rehash: str = "overloaded") -> None:
        self.seed = seed
        self.theta = theta
        self.rehash = rehash

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        seed = check_seed(self.seed)
        theta = check_theta(self.theta)
        if self.rehash not in REHASH:
            raise PolicyInputError("rehash", f"must be one of {', '.join(REHASH)}, got {self.rehash!r}")
        slots = plan.live_engines
        n = slots.size
        eng = plan.engine_loads(window.loads)[slots]
        mean = float(eng.mean())
        low, high = mean * (1 - theta / 100.0), mean * (1 + theta / 100.0)
        info: dict[str, Any] = {"band": [low, high], "round": plan.version, "rehashed_groups": 0}
        hot = eng > high
        if plan.version == 0:
            hot[:] = True  # the initial placement: every group by h₀
        elif mean <= 0 or not (hot | (eng < low)).any():
            info["reason"] = "all engines inside the band" if mean > 0 else "no load"
            return plan, info, None
        elif self.rehash == "overloaded" and not hot.any():
            info["reason"] = "no engine above the band"
            return plan, info, None
        (a, b), = hash_coefficients([seed, plan.version], 1)
        if self.rehash == "all":
            groups = np.arange(plan.groups)
        else:
            hot_slot = np.zeros(plan.slots, dtype=bool)
            hot_slot[slots[hot]] = True
            groups = np.flatnonzero(hot_slot[plan.assignment])
        assignment = plan.assignment.copy()
        assignment[groups] = slots[universal_hash(groups, n, a, b)]
        info.update(a=a, b=b, prime=MERSENNE_31, rehashed_groups=int(groups.size),
                    hot_engines=slots[hot].tolist(),
                    reason="initial placement by h0" if plan.version == 0 else f"re-hashed ({self.rehash})")
        return plan.with_assignment(assignment), info, None
