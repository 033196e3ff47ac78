"""The burst reserve (keyshift/elastic/reserve.py): the rise quantile against known
distributions, the planner's floor as a hard service level inside the graph, the
controller's per-window check, and the configuration that switches it on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_elastic_scalers import run_controller

from keyshift.elastic.cost import Forecast
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.path_scaler import PathScaler
from keyshift.elastic.planner import GraphPlanner, floor_capacity
from keyshift.elastic.reserve import RiseQuantile


def forecast(ins, k=8, lat=0.1, in_std=0.0, lat_std=0.0) -> Forecast:
    h = len(ins)
    return Forecast(np.asarray(ins, float), np.full(h, in_std), np.full((h, k), lat),
                    np.full((h, k), lat_std))


def test_rise_quantile_of_a_known_distribution():
    # Rises drawn uniform on [0, 1000): the q-quantile is 1000·q (within sampling error).
    rng = np.random.default_rng(0)
    rises = rng.uniform(0, 1000, 20_000)
    series = np.concatenate([[0.0], np.cumsum(rises)])
    for q in (0.5, 0.9, 0.99):
        assert RiseQuantile(q).fit(series).rise() == pytest.approx(1000 * q, rel=0.03)
    assert RiseQuantile(1.0).fit(series).rise() == pytest.approx(rises.max())


def test_rise_quantile_updates_online_and_forgets_with_a_window():
    r = RiseQuantile(1.0).fit(np.array([10.0, 12.0, 11.0]))
    assert r.rise() == pytest.approx(2.0)
    r.update(41.0)  # a burst of +30 after the last history value 11
    assert r.rise() == pytest.approx(30.0)
    short = RiseQuantile(1.0, max_history=2).fit(np.array([0.0, 50.0, 51.0, 52.0]))
    assert short.rise() == pytest.approx(1.0)  # the +50 is older than the last 2 rises


def test_a_falling_series_gives_no_negative_reserve_and_floor_shape():
    r = RiseQuantile(0.5).fit(np.array([100.0, 90.0, 80.0, 70.0]))
    assert r.rise() == 0.0
    assert RiseQuantile(1.0).rise() == 0.0  # nothing seen yet
    r = RiseQuantile(1.0).fit(np.array([0.0, 5.0]))
    assert r.floor(20.0, np.array([10.0, 30.0])).tolist() == [25.0, 35.0]
    assert r.floor(None, np.array([10.0, 30.0])).tolist() == [15.0, 35.0]


@pytest.mark.parametrize("q", [-0.1, 1.5, "high", True])
def test_bad_quantile_names_the_field(q):
    with pytest.raises(ElasticInputError) as err:
        RiseQuantile(q).fit(np.arange(3.0))
    assert err.value.field == "reserve_quantile"
    with pytest.raises(ElasticInputError) as err:
        PathScaler(max_engines=4, reserve_quantile=q).reset()
    assert err.value.field == "reserve_quantile"


def test_bad_floor_names_the_field():
    with pytest.raises(ElasticInputError) as err:
        GraphPlanner(window_s=10).plan(forecast([100, 100]), 1, in_floor=[1.0])
    assert err.value.field == "in_floor"
    with pytest.raises(ElasticInputError) as err:
        GraphPlanner(window_s=10).plan(forecast([100, 100]), 1, in_floor=[1.0, np.nan])
    assert err.value.field == "in_floor"


@settings(max_examples=120, deadline=None)
@given(
    ins=st.lists(st.floats(0, 700), min_size=1, max_size=6),
    floor_add=st.lists(st.floats(0, 300), min_size=6, max_size=6),
    rc=st.floats(0, 50),
    mc=st.floats(0, 5),
    start=st.integers(1, 8),
    lat_std=st.floats(0, 0.02),
)
def test_floor_is_met_and_never_lowers_the_plain_path(ins, floor_add, rc, mc, start, lat_std):
    fc = forecast(ins, lat_std=lat_std)
    planner = GraphPlanner(window_s=10, mc=mc, ec=1.0, rc=rc)
    plain = planner.plan(fc, start)
    floor = np.asarray(ins) + np.asarray(floor_add[: len(ins)])
    held = planner.plan(fc, start, in_floor=floor)
    cap = floor_capacity(fc.lat_mean[:, 0], fc.lat_std[:, 0], held.path, 10)
    top = floor_capacity(fc.lat_mean[:, 0], fc.lat_std[:, 0], fc.max_engines, 10)
    # The floor holds wherever the cluster can carry it, else the path sits at the maximum.
    assert ((cap >= floor - 1e-6) | (held.path == fc.max_engines)).all()
    assert (held.path[floor > top] == fc.max_engines).all()
    # With no other limits the floor only ever adds engines to the paper's plan.
    if rc == 0:
        assert (held.path >= plain.path).all()
    # A zero floor is the paper's graph unchanged.
    assert planner.plan(fc, start, in_floor=np.zeros(len(ins))).path.tolist() == plain.path.tolist()


def test_floor_with_max_step_comes_as_close_as_the_limits_allow():
    fc = forecast([100, 100, 100])
    path = GraphPlanner(window_s=10, rc=1, max_step=2).plan(fc, 1, in_floor=[800, 800, 800]).path
    assert path.tolist() == [3, 5, 7]


def run(ctl, planned, actual):
    """Drive ``ctl`` window by window with ``planned`` as the forecast of every window."""
    def fc(start, horizon):
        idx = np.minimum(np.arange(start, start + horizon), len(planned) - 1)
        return forecast(np.asarray(planned, float)[idx])

    return run_controller(ctl, fc, actual)


def test_reserve_absorbs_a_burst_the_plain_planner_misses():
    # 100 engine-tuples per window; the history had one rise of +300 tuples.
    planned = [100] * 8
    actual = [100, 100, 100, 400, 100, 100, 100, 100]
    plain = PathScaler(max_engines=8, horizon=8, window_s=10, rc=1, mc=1.0)
    ds = run(plain, planned, actual)
    assert ds[3].engines_after == 1  # the burst's window runs with what the forecast wanted
    ctl = PathScaler(max_engines=8, horizon=8, window_s=10, rc=1, mc=1.0, reserve_quantile=1.0)
    ctl.fit_reserve(np.array([100.0, 400.0, 100.0]))
    ds = run(ctl, planned, actual)
    assert all(d.engines_after >= 4 for d in ds)  # 100 + 300 tuples of capacity every window
    assert "burst reserve 300 tuples (q 1)" in ds[0].reason
    for a, b in zip(ds, run(plain, planned, actual)):
        assert a.engines_after >= b.engines_after


def test_controller_replans_when_the_path_falls_below_the_reserve():
    # No history: the reserve learns the +200 rise at window 2 and re-plans at window 3.
    planned = [100] * 8
    actual = [100, 100, 300, 300, 300, 300, 300, 300]
    ctl = PathScaler(max_engines=8, horizon=8, window_s=10, rc=1, reserve_quantile=1.0)
    ds = run(ctl, planned, actual)
    assert ds[2].engines_after == 1
    assert "path below the burst reserve" in ds[3].reason
    assert ds[3].engines_after >= 5  # max(300, 100) + 200 tuples at 100 per engine


def test_reserve_off_is_the_plain_controller():
    planned = [100, 300, 300, 100, 100, 400, 400, 100]
    a = run(PathScaler(max_engines=6, horizon=4, window_s=10, rc=1), planned, planned)
    b = run(PathScaler(max_engines=6, horizon=4, window_s=10, rc=1, reserve_quantile=0.0,
                           reserve_history=5), planned, planned)
    assert [d.engines_after for d in a] == [d.engines_after for d in b]
    assert [d.reason for d in a] == [d.reason for d in b]


def test_path_scaler_from_config_reads_the_reserve_keys():
    from keyshift.config import load_config
    from keyshift.elastic.path_scaler import path_scaler_from_config

    cfg = load_config(env={"KEYSHIFT_PLANNER__RESERVE_QUANTILE": "0.999",
                           "KEYSHIFT_PLANNER__RESERVE_HISTORY": "5000"})
    ctl = path_scaler_from_config(cfg)
    assert (ctl.reserve_quantile, ctl.reserve_history) == (0.999, 5000)
    assert path_scaler_from_config(load_config(env={})).reserve_quantile == 0.0


@pytest.mark.parametrize("key, value", [("RESERVE_QUANTILE", "1.5"), ("RESERVE_HISTORY", "-1")])
def test_bad_reserve_config_names_the_field(key, value):
    from keyshift.config import load_config

    with pytest.raises(Exception) as err:
        load_config(env={f"KEYSHIFT_PLANNER__{key}": value})
    assert key.lower() in str(err.value)


def test_plan_engines_takes_an_optional_floor_per_window():
    from keyshift.commands.plan_engines import plan_request

    doc = {"engines_now": 1, "max_engines": 8, "window_s": 10, "costs": {"mc": 1, "ec": 1, "rc": 1},
           "windows": [{"in_mean": 100, "in_std": 0, "lat_mean": [0.1] * 8, "lat_std": [0.0] * 8}
                       for _ in range(3)]}
    plain = plan_request(doc)
    assert plain["path"] == [1, 1, 1]
    doc["windows"][1]["in_floor"] = 450
    held = plan_request(doc)
    assert held["path"][1] == 5 and set(held) == set(plain)
    doc["windows"][2]["in_floor"] = -1
    with pytest.raises(ElasticInputError) as err:
        plan_request(doc)
    assert err.value.field == "windows[2].in_floor"
