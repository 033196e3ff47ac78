"""UHLB, universal-hash load balancing (the baseline of elb-clb §5).

Group g goes to live engine ``h(g) = ((a·g + b) mod P) mod n`` with (a, b) drawn from the
2-universal family of Carter and Wegman, P = 2³¹ − 1 (a Mersenne prime larger than any
group id), a ∈ [1, P), b ∈ [0, P) from ``seed``. It ignores loads and state entirely:
any two groups collide with probability about 1/n, which balances well *on average* but
moves almost every group whenever n changes (the movement elb-clb measures against).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, Window

MERSENNE_31 = (1 << 31) - 1


def universal_hash(groups: np.ndarray, n: int, a: int, b: int, prime: int = MERSENNE_31) -> np.ndarray:
    """((a·g + b) mod P) mod n, exact in int64 for g, a, b < 2³¹."""
    return ((a * groups.astype(np.int64) + b) % prime) % n


def hash_coefficients(seed: int, count: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [
        (int(rng.integers(1, MERSENNE_31)), int(rng.integers(0, MERSENNE_31))) for _ in range(count)
    ]


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise PolicyInputError("seed", f"must be an integer >= 0, got {seed!r}")
    return int(seed)


class UniversalHashing(Policy):
    name = "uhlb"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        (a, b), = hash_coefficients(check_seed(self.seed), 1)
        slots = plan.live_engines
        h = universal_hash(np.arange(plan.groups), slots.size, a, b)
        return plan.with_assignment(slots[h]), {"a": a, "b": b, "prime": MERSENNE_31}, None
