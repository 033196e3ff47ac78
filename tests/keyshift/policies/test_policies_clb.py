"""CLB (elb-clb Algorithm 2): covariance-based greedy split into n subsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, make_policy
from keyshift.policies.clb import covariance_split, greedy_split, hbar


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
    label, fallbacks = covariance_split(history, 8, 0.9)
    twins = label.reshape(-1, 2)
    assert (twins[:, 0] != twins[:, 1]).sum() == 7
    assert fallbacks == 0
    # ... and that split (7 singletons beside one subset of 9) raises ħ over the pairs'
    # plan, so CLB keeps the plan it was given
    plan = Plan(np.arange(16) // 2, 8)
    d = make_policy("clb", threshold=0.9, split="covariance").decide(
        plan, Window(history[-1], history=history))
    assert d.info.details["hbar_split"] > d.info.details["hbar_before"] and d.plan is plan


def test_hbar_is_the_sum_of_per_window_variances():
    history = np.array([[1, 3.0], [2, 2.0]])
    assert hbar(history, np.array([0, 1]), 2) == pytest.approx(1.0 + 0.0)


@pytest.mark.parametrize(
    "params, history, field",
    [({}, None, "history"), ({}, [[1, 2, 3]], "history"), ({"threshold": 1.5}, [[1, 2, 3]] * 2, "threshold"),
     ({"subsets": 5}, [[1, 2, 3]] * 2, "subsets"), ({"split": "x"}, [[1, 2, 3]] * 2, "split")],
)
def test_clb_rejects_bad_input(params, history, field):
    with pytest.raises(PolicyInputError) as exc:
        make_policy("clb", **params).decide(Plan([0, 1, 0], 2), Window([1, 2, 3], history=history))
    assert exc.value.field == field


def test_six_perfectly_correlated_groups_on_three_engines_balance():
    # issue 13's case: Algorithm 2 splits all of a seed's partners off together
    # (RSTD 0 -> 70.7 %). Every series is a multiple of one rate curve.
    rate = np.array([80, 120, 100, 140, 90, 110.0])
    history = np.outer(rate, np.ones(6))
    window = Window(history[-1], history=history)
    balanced = Plan([0, 1, 2, 0, 1, 2], 3)
    d = make_policy("clb").decide(balanced, window)
    assert d.plan is balanced and d.after.rstd == 0.0  # ħ = 0 already: kept
    literal = make_policy("clb", split="covariance").decide(balanced, window)
    assert literal.info.details["hbar_split"] > 0 and literal.plan is balanced  # the guard
    skewed = Plan([0, 0, 0, 0, 1, 2], 3)
    d = make_policy("clb").decide(skewed, window)
    assert d.after.rstd == pytest.approx(0.0, abs=1e-9)
    assert np.bincount(d.plan.assignment, minlength=3).tolist() == [2, 2, 2]


def test_greedy_split_is_lpt_on_constant_series():
    loads = np.array([7, 5, 4, 3, 3, 2.0])
    history = np.tile(loads, (3, 1))
    label = greedy_split(history, 2)
    sums = np.bincount(label, weights=loads, minlength=2)
    assert sorted(sums.tolist()) == [12.0, 12.0]


def test_clb_on_zipf_is_near_lptf():
    rng = np.random.default_rng(3)
    share = 1.0 / np.arange(1, 101)
    share /= share.sum()
    rate = 10_000 * (1 + 0.3 * np.sin(np.arange(24) / 3.0))
    history = rng.poisson(np.outer(rate, share)).astype(float)
    window = Window(history[-1], history=history)
    plan = Plan.hashed(100, 10)
    clb = make_policy("clb").decide(plan, window)
    lptf = make_policy("lptf").decide(plan, window)
    assert clb.info.details["hbar_after"] < clb.info.details["hbar_before"]
    assert clb.after.rstd <= 1.2 * lptf.after.rstd + 1.0


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(2, 30), st.integers(2, 12), st.integers(0, 2**31 - 1),
       st.sampled_from([-0.5, 0.0, 0.3, 0.9]), st.sampled_from(["greedy", "covariance"]),
       st.booleans())
def test_clb_never_raises_hbar(n, p, m, seed, threshold, split, correlated):
    rng = np.random.default_rng(seed)
    if correlated:  # a common rate curve times per-group shares: the case Alg. 2 breaks
        history = rng.poisson(np.outer(rng.uniform(20, 80, m), rng.zipf(1.5, p).clip(1, 50)))
    else:
        history = rng.poisson(5, size=(m, p))
    history = history.astype(float)
    plan = Plan(rng.integers(0, n, p), n)
    d = make_policy("clb", threshold=threshold, split=split).decide(
        plan, Window(history[-1], history=history))
    assert d.plan.live[d.plan.assignment].all()
    before = hbar(history, plan.assignment, n)
    after = hbar(history, d.plan.assignment, n)
    assert after <= before * (1 + 1e-12) + 1e-9
    assert d.info.details["hbar_after"] == pytest.approx(after)
    assert d.info.details["hbar_before"] == pytest.approx(before)
