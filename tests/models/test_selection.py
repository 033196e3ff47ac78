"""The one-standard-error choice among forecasters (keyshift.models.selection, issue 44)."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.models.selection import Candidate, choose, paired_se


def _c(block_maes, complexity, naive=False):
    return Candidate([np.full(24, m) for m in block_maes], complexity, naive)


def test_a_flexible_candidate_a_little_better_by_chance_loses_to_the_simple_one():
    naive = _c([10, 12, 9, 11, 10], 0, naive=True)
    gp = _c([9, 13, 8, 11, 9.5], 3)  # 3 % better on average, worse on one block in five
    assert gp.mae < naive.mae
    assert gp.mae - naive.mae > -paired_se(gp, naive)
    assert choose({"naive": naive, "gp": gp}) == "naive"


def test_a_candidate_better_on_every_block_wins():
    naive = _c([10, 12, 9, 11, 10], 0, naive=True)
    gp = _c([7, 8, 6, 8, 7], 3)
    assert choose({"naive": naive, "gp": gp}) == "gp"


def test_nothing_that_erred_more_than_the_better_naive_is_kept():
    daily = _c([10, 10, 10, 10, 10], 0, naive=True)
    weekly = _c([20, 20, 20, 20, 20], 0, naive=True)
    profile = _c([10.5, 9, 12, 9, 11], 1)  # within one SE of the daily naive, but above it
    for pick in [choose({"daily": daily, "weekly": weekly, "profile": profile})]:
        assert pick == "daily"
    gp = _c([5, 5, 5, 5, 5], 3)
    assert choose({"daily": daily, "weekly": weekly, "profile": profile, "gp": gp}) == "gp"


def test_equal_complexity_goes_to_the_smaller_error_and_an_empty_set_is_refused():
    a, b = _c([5, 6], 2), _c([5.1, 5.9], 2)
    assert choose({"a": a, "b": b}) == "a"
    with pytest.raises(ValueError, match="candidates"):
        choose({})
