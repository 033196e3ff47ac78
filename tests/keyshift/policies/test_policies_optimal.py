"""The exact MILP reference: equals brute force on tiny cases, never beaten by a heuristic."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.metrics import load_variance, rstd
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, make_policy


def _brute(loads, state, here, n, theta=None, budget=None):
    best_moved, best_var = np.inf, np.inf
    for choice in itertools.product(range(n), repeat=len(loads)):
        choice = np.array(choice)
        eng = np.bincount(choice, weights=loads, minlength=n)
        moved = state[choice != here].sum()
        if theta is not None and rstd(eng) <= theta + 1e-9:
            best_moved = min(best_moved, moved)
        if budget is not None and moved <= budget + 1e-9:
            best_var = min(best_var, load_variance(eng))
    return best_moved, best_var


tiny = st.tuples(
    st.integers(2, 3),
    st.lists(st.integers(0, 20), min_size=2, max_size=6),
    st.integers(0, 2**31 - 1),
)


@settings(max_examples=25, deadline=None)
@given(tiny, st.sampled_from([5.0, 15.0, 40.0]))
def test_min_moved_state_equals_brute_force(inst, theta):
    n, loads, seed = inst
    loads = np.array(loads, dtype=float)
    rng = np.random.default_rng(seed)
    state = rng.integers(1, 10, loads.size).astype(float)
    plan = Plan(rng.integers(0, n, loads.size), n)
    want, _ = _brute(loads, state, plan.assignment, n, theta=theta)
    policy = make_policy("optimal", objective="min_moved_state", theta=theta)
    if not np.isfinite(want):
        with pytest.raises(PolicyInputError) as exc:
            policy.decide(plan, Window(loads, state=state))
        assert exc.value.field == "theta"
        return
    d = policy.decide(plan, Window(loads, state=state))
    assert d.info.details["optimal"]
    assert d.moves.total_state == pytest.approx(want)
    assert d.after.rstd <= theta + 1e-6


@settings(max_examples=25, deadline=None)
@given(tiny, st.integers(0, 30))
def test_min_imbalance_equals_brute_force(inst, budget):
    n, loads, seed = inst
    loads = np.array(loads, dtype=float)
    rng = np.random.default_rng(seed)
    state = rng.integers(1, 10, loads.size).astype(float)
    plan = Plan(rng.integers(0, n, loads.size), n)
    _, want = _brute(loads, state, plan.assignment, n, budget=budget)
    d = make_policy("optimal", objective="min_imbalance", budget=budget).decide(
        plan, Window(loads, state=state)
    )
    assert d.moves.total_state <= budget + 1e-9
    assert d.after.var == pytest.approx(want, rel=1e-6, abs=1e-6)


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 4), st.integers(6, 10), st.integers(0, 2**31 - 1))
def test_no_heuristic_beats_the_milp(n, p, seed):
    rng = np.random.default_rng(seed)
    loads = np.ceil(100.0 / rng.permutation(p + 1)[:p].clip(1) ** 1.1)
    window = Window(loads)
    plan = Plan.hashed(p, n)
    theta = 15.0
    for name in ["dlb-h", "dlb-l", "elb", "lptf", "uhlb"]:
        h = make_policy(name).decide(plan, window)
        if h.plan.parallelism != n:
            continue
        best = make_policy("optimal", objective="min_imbalance", budget=h.moves.total_state)
        opt = best.decide(plan, window)
        assert opt.after.var <= h.after.var + 1e-6 * (1 + h.after.var)
        if h.after.rstd <= theta:
            least = make_policy("optimal", theta=theta).decide(plan, window)
            assert least.moves.total_state <= h.moves.total_state + 1e-9


@pytest.mark.parametrize(
    "params, loads, engines, field",
    [({"objective": "fastest"}, [1, 2], 2, "objective"),
     ({"budget": -1, "objective": "min_imbalance"}, [1, 2], 2, "budget"),
     ({}, [1.0] * 65, 2, "loads"),
     ({}, [1.0] * 10, 9, "engines"),
     ({"theta": 1}, [10, 1], 2, "theta")],
)
def test_optimal_rejects_bad_or_too_large_input(params, loads, engines, field):
    with pytest.raises(PolicyInputError) as exc:
        make_policy("optimal", **params).decide(Plan.hashed(len(loads), engines), Window(loads))
    assert exc.value.field == field
