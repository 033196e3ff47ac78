"""DLB-S: DLB's moves and stop rule, the key of most useful load shed per byte of state."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.metrics import rstd
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, make_policy
from keyshift.policies.dlbs import completing_shed


def test_completing_shed_is_the_smaller_root():
    # gap 10, excess 18: 2x(10 − x) = 18 → x = 1 (or 9); excess beyond gap²/2 = 50: none
    assert completing_shed(10.0, 18.0) == pytest.approx(1.0)
    assert completing_shed(10.0, 0.0) == 0.0
    assert math.isinf(completing_shed(10.0, 51.0))


def test_dlb_s_prefers_the_group_with_little_state():
    # engines (12, 4): μ 8, gap 8. Groups on engine 0: 4 (state 100) and 4 (state 1).
    # DLB-H takes a heaviest group whatever its state; DLB-S the 1-byte one.
    loads = np.array([4.0, 4.0, 4.0, 4.0])
    state = np.array([100.0, 1.0, 50.0, 50.0])
    plan = Plan([0, 0, 0, 1], 2)
    window = Window(loads, state=state)
    s = make_policy("dlb-s", theta=0).decide(plan, window)
    h = make_policy("dlb-h", theta=0).decide(plan, window)
    assert s.moves.groups.tolist() == [1] and s.moves.total_state == 1.0
    assert h.moves.total_state >= 50.0  # DLB-H: any of the three groups of load 4 on engine 0
    assert s.after.rstd == h.after.rstd == 0.0


def test_dlb_s_does_not_move_past_what_theta_needs():
    # engines (14, 6): μ 10, imbScore 40 %. θ = 25 % needs Σ(L−μ)² ≤ 2·2.5² = 12.5,
    # i.e. x ≥ completing_shed(8, 32 − 12.5) ≈ 1.5: the 2 is enough; DLB-H moves the 3.
    loads = np.array([3.0, 2.0, 9.0, 6.0])
    plan = Plan([0, 0, 0, 1], 2)
    s = make_policy("dlb-s", theta=25).decide(plan, Window(loads))
    h = make_policy("dlb-h", theta=25).decide(plan, Window(loads))
    assert s.moves.groups.tolist() == [1] and s.after.rstd <= 25
    assert h.moves.total_state == 3.0 and s.moves.total_state == 2.0


def test_dlb_s_zero_state_groups_move_first():
    loads = np.array([5.0, 3.0, 1.0, 1.0])
    state = np.array([5.0, 0.0, 1.0, 1.0])
    d = make_policy("dlb-s", theta=0).decide(Plan([0, 0, 1, 1], 2), Window(loads, state=state))
    assert d.info.details["steps"][0, 0] == 1


@pytest.mark.parametrize("value", [-1, 1.5, True, "x"])
def test_dlb_s_rejects_bad_max_moves(value):
    with pytest.raises(PolicyInputError) as exc:
        make_policy("dlb-s", max_moves=value).decide(Plan([0, 1], 2), Window([5.0, 1.0]))
    assert exc.value.field == "max_moves"


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 6),
    st.lists(st.integers(0, 60), min_size=2, max_size=40),
    st.lists(st.integers(0, 80), min_size=40, max_size=40),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, 5.0, 15.0, 40.0]),
)
def test_dlb_s_keeps_dlbs_stop_rule(n, raw, raw_state, seed, theta):
    """imbScore never rises; it stops at θ or where no group x on an engine a has
    x < L_a − L_min (DLB's own stop rule); every move is one DLB allows."""
    loads = np.array(raw, dtype=float)
    state = np.array(raw_state[: loads.size], dtype=float)
    plan = Plan(np.random.default_rng(seed).integers(0, n, loads.size), n)
    d = make_policy("dlb-s", theta=theta).decide(plan, Window(loads, state=state))
    assert d.after.rstd <= d.before.rstd + 1e-9
    after = d.plan.engine_loads(loads)
    if d.after.rstd > theta + 1e-9:
        low = after.min()
        for e in range(n):
            on = loads[(d.plan.assignment == e) & (loads > 0)]
            assert not (on < after[e] - low - 1e-9 * max(after.mean(), 1)).any()
    # replay the steps: each move helps (0 < x < L_a − L_min) and goes to the least loaded
    eng = plan.engine_loads(loads).astype(float)
    for g, a, b in d.info.details["steps"].tolist():
        assert eng[b] == eng.min() and 0 < loads[g] < eng[a] - eng[b]
        eng[a] -= loads[g]
        eng[b] += loads[g]
    assert rstd(eng) == pytest.approx(d.after.rstd, abs=1e-6)
