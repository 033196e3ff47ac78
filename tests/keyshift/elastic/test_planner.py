"""The engine planner: Eq. 9–12 on hand-checked numbers, the DP against brute force over
every path, the user limits, path rejection (θ1) and input errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.elastic.cost import Costs, Forecast, rectified_gaussian, vertex_costs
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.graph import shortest_path
from keyshift.elastic.planner import GraphPlanner


def flat_forecast(ins, k=4, lat=0.1, in_std=0.0, lat_std=0.0) -> Forecast:
    h = len(ins)
    return Forecast(
        in_mean=np.asarray(ins, float),
        in_std=np.full(h, in_std),
        lat_mean=np.full((h, k), lat),
        lat_std=np.full((h, k), lat_std),
    )


def brute_force(vertex, start, rc, step=0, cooldown=0, age0=None):
    horizon, size = vertex.shape
    best = np.inf
    for path in itertools.product(range(size), repeat=horizon):
        prev, age, cost, ok = start, cooldown if age0 is None else min(age0, cooldown), 0.0, True
        for j, s in enumerate(path):
            if s != prev:
                if (step and abs(s - prev) > step) or age < cooldown:
                    ok = False
                    break
                cost += rc
                age = 0
            else:
                age = min(age + 1, cooldown)
            cost += vertex[j, s]
            prev = s
        if ok:
            best = min(best, cost)
    return best


def path_cost(vertex, start, rc, states):
    changes = np.diff(np.concatenate([[start], states])) != 0
    return vertex[np.arange(len(states)), states].sum() + rc * changes.sum()


@settings(max_examples=150, deadline=None)
@given(
    horizon=st.integers(1, 4),
    size=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    rc=st.floats(0, 5),
    step=st.integers(0, 2),
    cooldown=st.integers(0, 2),
    age0=st.one_of(st.none(), st.integers(0, 3)),
)
def test_dp_finds_the_cheapest_feasible_path(horizon, size, seed, rc, step, cooldown, age0):
    rng = np.random.default_rng(seed)
    vertex = rng.random((horizon, size)) * 10
    start = int(rng.integers(0, size))
    path = shortest_path(vertex, start, rc, step, cooldown, age0)
    assert path.cost == pytest.approx(brute_force(vertex, start, rc, step, cooldown, age0))
    assert path_cost(vertex, start, rc, path.engines) == pytest.approx(path.cost)


def test_eq_9_to_11_by_hand():
    # 10 s windows, 0.1 s per tuple: one engine processes 100 tuples per window.
    fc = flat_forecast([250.0], k=3)
    vc = vertex_costs(fc, Costs(mc=2.0, ec=0.5, rc=0.0), window_s=10.0, sel=1.0)
    # Miss = In − min(Δt/Lat·i, In) = 150, 50, 0; cost = 2·Miss + 0.5·10·i.
    np.testing.assert_allclose(vc.miss[0], [150, 50, 0])
    np.testing.assert_allclose(vc.mean[0], [305, 110, 15])
    np.testing.assert_allclose(vc.std[0], 0.0)


def test_selectivity_scales_the_misses():
    fc = flat_forecast([250.0], k=1)
    vc = vertex_costs(fc, Costs(1, 0, 0), window_s=10.0, sel=0.5)
    assert vc.miss[0, 0] == pytest.approx(0.5 * 250 - 0.5 * 100)


def test_rectified_gaussian_matches_monte_carlo():
    rng = np.random.default_rng(1)
    for mu, sigma in [(-1.0, 2.0), (0.0, 1.0), (3.0, 0.5), (-5.0, 0.1)]:
        x = np.maximum(rng.normal(mu, sigma, 400_000), 0)
        mean, std = rectified_gaussian(np.array(mu), np.array(sigma))
        assert mean == pytest.approx(x.mean(), abs=0.01)
        assert std == pytest.approx(x.std(), abs=0.01)


def test_planner_follows_the_load_and_reports_eq11_cost():
    fc = flat_forecast([100, 300, 300, 100])
    plan = GraphPlanner(window_s=10, mc=1, ec=1, rc=5).plan(fc, engines_now=2)
    assert plan.path.tolist() == [1, 3, 3, 1]
    assert plan.cost == pytest.approx(15 + 35 + 30 + 15)
    assert plan.rejected_at is None


def test_high_reconfiguration_cost_keeps_the_engines():
    fc = flat_forecast([100, 300, 300, 100])
    plan = GraphPlanner(window_s=10, mc=1, ec=1, rc=1e6).plan(fc, engines_now=2)
    assert plan.path.tolist() == [2, 2, 2, 2]


def test_cheap_misses_mean_fewer_engines():
    fc = flat_forecast([300, 300])
    plan = GraphPlanner(window_s=10, mc=0.01, ec=1, rc=0).plan(fc, engines_now=3)
    assert plan.path.tolist() == [1, 1]


def test_limits_shape_the_path():
    fc = flat_forecast([100, 400, 400, 400, 100, 100], k=6)
    free = GraphPlanner(window_s=10, rc=1).plan(fc, 1)
    assert free.path.tolist() == [1, 4, 4, 4, 1, 1]
    stepped = GraphPlanner(window_s=10, rc=1, max_step=1).plan(fc, 1)
    assert np.abs(np.diff(np.concatenate([[1], stepped.path]))).max() <= 1
    bounded = GraphPlanner(window_s=10, rc=1, min_engines=2, max_engines=3).plan(fc, 2)
    assert bounded.path.min() >= 2 and bounded.path.max() <= 3
    cooled = GraphPlanner(window_s=10, rc=1, cooldown_windows=4).plan(fc, 1)
    changes = np.flatnonzero(np.diff(np.concatenate([[1], cooled.path])) != 0)
    assert np.all(np.diff(changes) > 4)


def test_expected_objective_keeps_headroom_under_uncertainty():
    fc = flat_forecast([300, 300, 300], k=6, in_std=60.0)
    mean = GraphPlanner(window_s=10, mc=10, ec=1, rc=0).plan(fc, 3)
    expected = GraphPlanner(window_s=10, mc=10, ec=1, rc=0, objective="expected").plan(fc, 3)
    assert mean.path.tolist() == [3, 3, 3]
    assert expected.path.min() > 3


def test_theta1_rejects_the_uncertain_tail():
    fc = Forecast(
        in_mean=np.array([100.0, 100, 300, 300]),
        in_std=np.array([1.0, 1, 200, 200]),
        lat_mean=np.full((4, 4), 0.1),
        lat_std=np.zeros((4, 4)),
    )
    plan = GraphPlanner(window_s=10, mc=1, ec=1, rc=0, theta1=20).plan(fc, 1)
    assert plan.rejected_at == 2
    assert plan.arc_std[2] > 20 and (plan.arc_std[:2] <= 20).all()
    assert plan.usable.tolist() == plan.path[:3].tolist()
    assert GraphPlanner(window_s=10, rc=0).plan(fc, 1).rejected_at is None


def test_cost_std_is_the_root_sum_of_arc_variances():
    fc = flat_forecast([150, 250, 90], k=3, in_std=30, lat_std=0.01)
    plan = GraphPlanner(window_s=10).plan(fc, 2)
    assert plan.cost_std == pytest.approx(np.sqrt(np.sum(plan.arc_std**2)))
    assert plan.cost_std > 0


def test_planner_is_fast_enough_to_call_every_window():
    rng = np.random.default_rng(0)
    fc = Forecast(rng.random(100) * 1e4, rng.random(100) * 100,
                  0.01 + rng.random((100, 64)) * 0.01, rng.random((100, 64)) * 1e-3)
    plan = GraphPlanner(window_s=10).plan(fc, 5)
    assert plan.path.shape == (100,) and isinstance(plan.elapsed_ms, float)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"mc": -1}, "costs.mc"),
        ({"window_s": 0}, "window_s"),
        ({"max_engines": 9}, "max_engines"),
        ({"min_engines": 4, "max_engines": 3}, "min_engines"),
        ({"max_step": 1.5}, "max_step"),
        ({"objective": "median"}, "objective"),
        ({"theta1": float("nan")}, "theta1"),
    ],
)
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ElasticInputError) as err:
        GraphPlanner(**kwargs).plan(flat_forecast([100, 200]), 1)
    assert err.value.field == field


def test_engines_now_outside_the_limits_is_an_error():
    with pytest.raises(ElasticInputError, match="engines_now"):
        GraphPlanner(min_engines=2).plan(flat_forecast([100]), 1)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"in_mean": [-1.0]}, "windows.in_mean"),
        ({"lat_mean": [[0.0, 0.1]]}, "windows.lat_mean"),
        ({"lat_std": [[0.1]]}, "windows.lat_std"),
        ({"in_std": [1.0, 2.0]}, "windows.in_std"),
        ({"in_mean": [], "in_std": [], "lat_mean": np.zeros((0, 2)), "lat_std": np.zeros((0, 2))}, "windows"),
    ],
)
def test_bad_forecasts_name_the_field(kwargs, field):
    base = {"in_mean": [1.0], "in_std": [0.0], "lat_mean": [[0.1, 0.1]], "lat_std": [[0.0, 0.0]]}
    base.update(kwargs)
    with pytest.raises(ElasticInputError) as err:
        Forecast(**base)
    assert err.value.field == field
