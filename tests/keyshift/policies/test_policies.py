"""Properties every policy shares: a valid plan (each group on exactly one live engine),
consistent moves and metrics, determinism; KG never moves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan
from keyshift.policies import REGISTRY, Window, make_policy

PARAMS = {"optimal": {"objective": "min_imbalance"}}


def test_registry_has_every_policy_of_the_contract():
    assert set(REGISTRY) == {"kg", "pkg", "uhlb", "lptf", "dlb-h", "dlb-l", "dlb-s", "elb", "clb",
                             "optimal", "dc", "wc"}


cases = st.tuples(
    st.integers(1, 4),
    st.lists(st.integers(0, 50), min_size=1, max_size=9),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)


@settings(max_examples=20, deadline=None)
@given(cases)
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_policy_returns_a_valid_plan(name, case):
    n, loads, seed, with_dead = case
    rng = np.random.default_rng(seed)
    loads = np.array(loads, dtype=float)
    slots = n + 1 if with_dead else n
    live = np.ones(slots, dtype=bool)
    if with_dead:
        live[rng.integers(0, slots)] = False
    plan = Plan(np.flatnonzero(live)[rng.integers(0, n, loads.size)], slots, live=live)
    history = rng.poisson(loads + 1, size=(4, loads.size)).astype(float)
    window = Window(loads, state=loads * 2, history=history)
    d = make_policy(name, **PARAMS.get(name, {})).decide(plan, window)
    assert d.plan.assignment.shape == plan.assignment.shape
    assert d.plan.live[d.plan.assignment].all()
    assert len(d.moves) == int((d.plan.assignment != plan.assignment).sum())
    assert d.moves.total_state == pytest.approx(2 * loads[d.plan.assignment != plan.assignment].sum())
    assert d.before == Balance.of(live_loads(plan.assignment, loads, plan.live))
    if not make_policy(name, **PARAMS.get(name, {})).splits_keys:  # PKG, dc, wc: split loads
        assert d.after == Balance.of(live_loads(d.plan.assignment, loads, d.plan.live))
    again = make_policy(name, **PARAMS.get(name, {})).decide(plan, window)
    assert again.plan.assignment.tolist() == d.plan.assignment.tolist()
    if name == "kg":
        assert len(d.moves) == 0 and d.plan is plan
