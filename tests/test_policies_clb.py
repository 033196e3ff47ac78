"""CLB (elb-clb Algorithm 2): covariance-based greedy split into n subsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, make_policy
from keyshift.policies.clb import covariance_split, hbar


def test_clb_by_hand_separates_the_most_covariant_pair():
    # X0 = X1 rise, X2 = X3 fall: cov(0,1) = cov(2,3) = 2/3, cross pairs -2/3 (ρ = -1).
    # ω = (2/3, 2/3, 2/3, 2/3); run 1 picks s0 (first max) and moves s1 (ρ = 1 ≥ 0) out.
    history = np.array([[1, 1, 3, 3], [2, 2, 2, 2], [3, 3, 1, 1.0]])
    label, fallbacks = covariance_split(history, 2, 0.0)
    assert label.tolist() == [0, 1, 0, 0] and fallbacks == 0


def test_clb_separates_one_twin_pair_per_run():
    # Groups 2i and 2i+1 have identical load series (ρ = 1), pairs are independent
    # (|ρ| < 0.9). With θ = 0.9 each run splits off exactly the twin of the heaviest ω.
    rng = np.random.default_rng(0)
    m, pairs = 200, 8
    base = rng.normal(10, 3, size=(m, pairs)).clip(0)
    history = np.repeat(base, 2, axis=1)
    plan = Plan(np.arange(16) // 2, 8)  # every twin pair on one engine
    d = make_policy("clb", threshold=0.9).decide(plan, Window(history[-1], history=history))
    twins = d.plan.assignment.reshape(-1, 2)
    assert (twins[:, 0] != twins[:, 1]).sum() == 7
    assert d.info["fallback_splits"] == 0


def test_hbar_is_the_sum_of_per_window_variances():
    history = np.array([[1, 3.0], [2, 2.0]])
    assert hbar(history, np.array([0, 1]), 2) == pytest.approx(1.0 + 0.0)


@pytest.mark.parametrize(
    "params, history, field",
    [({}, None, "history"), ({}, [[1, 2, 3]], "history"), ({"threshold": 1.5}, [[1, 2, 3]] * 2, "threshold"),
     ({"subsets": 5}, [[1, 2, 3]] * 2, "subsets")],
)
def test_clb_rejects_bad_input(params, history, field):
    with pytest.raises(PolicyInputError) as exc:
        make_policy("clb", **params).decide(Plan([0, 1, 0], 2), Window([1, 2, 3], history=history))
    assert exc.value.field == field


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(2, 30), st.integers(2, 12), st.integers(0, 2**31 - 1),
       st.sampled_from([-0.5, 0.0, 0.3, 0.9]))
def test_clb_gives_a_valid_plan_with_at_most_n_subsets(n, p, m, seed, threshold):
    rng = np.random.default_rng(seed)
    history = rng.poisson(5, size=(m, p)).astype(float)
    plan = Plan(rng.integers(0, n, p), n)
    d = make_policy("clb", threshold=threshold).decide(plan, Window(history[-1], history=history))
    assert d.plan.live[d.plan.assignment].all()
    assert np.unique(d.plan.assignment).size == min(n, p)
