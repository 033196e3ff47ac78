"""The choice among forecasters scored on the held-out blocks (keyshift.models.selection,
issue 44)."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.models.selection import Candidate, choose


def _c(block_maes, complexity, naive=False):
    return Candidate([np.full(24, m) for m in block_maes], complexity, naive)


def test_the_least_held_out_error_is_kept():
    naive = _c([10, 12, 9, 11, 10], 0, naive=True)
    gp = _c([9, 13, 8, 11, 9.5], 3)
    assert choose({"naive": naive, "gp": gp}) == "gp"
    assert choose({"naive": naive, "gp": _c([11, 13, 10, 11, 10], 3)}) == "naive"


def test_nothing_that_erred_more_than_the_better_naive_is_kept():
    """The construction: whatever is kept erred no more than the better naive on those
    blocks, whatever else was offered."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        cands = {f"c{i}": _c(rng.uniform(1, 10, 5), int(rng.integers(1, 4)))
                 for i in range(4)}
        cands["daily"] = _c(rng.uniform(1, 10, 5), 0, naive=True)
        cands["weekly"] = _c(rng.uniform(1, 10, 5), 0, naive=True)
        kept = cands[choose(cands)]
        assert kept.mae <= min(cands["daily"].mae, cands["weekly"].mae)


def test_a_tie_goes_to_the_simpler_and_an_empty_set_is_refused():
    assert choose({"gp": _c([5, 6], 3), "naive": _c([5, 6], 0, naive=True)}) == "naive"
    assert choose({"a": _c([5, 6], 2), "b": _c([5.1, 5.9], 1)}) == "b"  # equal means
    with pytest.raises(ValueError, match="candidates"):
        choose({})
