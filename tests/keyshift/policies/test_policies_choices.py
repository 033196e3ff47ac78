"""D-Choices and W-Choices (keyshift.policies.choices): the d formula, the split routing of
a decision, the simulator's per-tuple routing, ``keyshift rebalance`` and the operator check."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps.clicks import ClickPatterns
from keyshift.apps.fsd import FirstStoryDetection
from keyshift.apps.traffic import TrafficAnomaly
from keyshift.apps.wordcount import WindowedWordCount
from keyshift.cli import main
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, check_operator, make_policy
from keyshift.policies.choices import Candidates, choices_needed
from keyshift.sim import Schedule, SimConfig, Simulator, SyntheticWorkload, ZipfKeys


def zipf(keys: int, s: float) -> np.ndarray:
    w = np.arange(1, keys + 1, dtype=float) ** -s
    return w / w.sum()


def test_d_covers_the_hottest_key_and_grows_with_the_engines():
    p = zipf(10_000, 1.5)
    ds = {}
    for n in (5, 10, 50, 100):
        head = p[p > 0.4 / n]
        ds[n] = choices_needed(head, n)
        assert ds[n] >= np.ceil(p[0] * n)  # the hottest key needs p1·n engines' worth
    assert ds[5] == 5 and ds[10] == 10  # few engines: every one (W-Choices)
    assert 2 < ds[50] < 50 and ds[50] < ds[100] < 100


def test_d_is_the_least_value_meeting_every_prefix_constraint():
    p = zipf(10_000, 1.5)
    n = 50
    head = p[p > 0.4 / n]
    d = choices_needed(head, n, epsilon=1e-4)

    def holds(d: int) -> bool:
        for h in range(1, head.size + 1):
            cover = 1 - ((n - 1) / n) ** (h * d)
            need = head[:h].sum() + cover**d * head[h:].sum() + cover**2 * (1 - head.sum())
            if need > cover + 1e-4:
                return False
        return True

    assert holds(d) and not holds(d - 1)
    assert choices_needed(np.array([]), n) == 2 and choices_needed(head, 2) == 2


def test_a_hot_keys_candidates_are_distinct_live_engines_starting_with_pkgs():
    c = Candidates(100, 20, seed=3)
    for g in (0, 7, 99):
        eng = c.of(g, 8)
        assert eng.size == np.unique(eng).size and eng.size <= 8
        assert {int(c.first[g]), int(c.second[g])} <= set(eng.tolist())
        assert set(c.of(g, 5).tolist()) <= set(eng.tolist())  # more choices only add engines
    assert c.of(1, 20).tolist() == list(range(20))


loads_st = st.lists(st.integers(0, 1000), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(loads=loads_st, n=st.integers(1, 9), seed=st.integers(0, 1000),
       name=st.sampled_from(["dc", "wc"]))
def test_the_routing_sends_every_tuple_once_to_live_engines(loads, n, seed, name):
    loads = np.array(loads, dtype=float)
    live = np.ones(n + 1, dtype=bool)
    live[seed % (n + 1)] = False  # a dead slot is never a target
    plan = Plan(np.flatnonzero(live)[np.arange(loads.size) % n], n + 1, live=live)
    d = make_policy(name, seed=seed).decide(plan, Window(loads))
    r = d.info.routing
    g, eng, share = np.asarray(r.groups), np.asarray(r.engines), np.asarray(r.share)
    assert live[eng].all() and ((share > 0) & (share <= 1)).all()
    assert not (eng == d.plan.assignment[g]).any()  # the plan's engine takes the rest
    per_slot = np.bincount(d.plan.assignment, weights=loads, minlength=n + 1)
    moved = loads[g] * share
    per_slot -= np.bincount(d.plan.assignment[g], weights=moved, minlength=n + 1)
    per_slot += np.bincount(eng, weights=moved, minlength=n + 1)
    assert per_slot.min() >= -1e-6
    assert per_slot.sum() == pytest.approx(loads.sum())
    assert d.after.max == pytest.approx(per_slot[live].max())


@settings(max_examples=40, deadline=None)
@given(loads=loads_st, n=st.integers(1, 9), seed=st.integers(0, 1000))
def test_without_a_head_both_decide_exactly_as_pkg(loads, n, seed):
    plan = Plan.hashed(len(loads), n)
    window = Window(np.array(loads, dtype=float))
    pkg = make_policy("pkg", seed=seed).decide(plan, window)
    for name in ("dc", "wc"):
        d = make_policy(name, seed=seed, hot_threshold=1.0).decide(plan, window)
        assert d.info.details["hot_keys"].size == 0
        assert d.plan.assignment.tolist() == pkg.plan.assignment.tolist()
        assert d.after == pkg.after
        for k in ("groups", "engines", "share"):
            assert np.allclose(getattr(d.info.routing, k), getattr(pkg.info.routing, k))


def test_a_hot_key_is_spread_where_pkg_gives_it_two_engines():
    loads = np.r_[400.0, np.ones(600)]  # one key carries 40 %
    plan = Plan.hashed(loads.size, 20)
    pkg = make_policy("pkg").decide(plan, Window(loads))
    wc = make_policy("wc").decide(plan, Window(loads))
    dc = make_policy("dc").decide(plan, Window(loads))
    mean = loads.sum() / 20
    assert pkg.after.max >= 200  # half the hot key
    assert wc.after.max == pytest.approx(mean, rel=0.02)
    assert dc.after.max <= 1.1 * mean
    assert wc.info.details["hot_keys"].tolist() == [0] and wc.info.details["choices"] == 20
    assert 2 < dc.info.details["choices"] <= 20
    for k in ("kg", "pkg", "dc", "wc"):
        assert make_policy(k).decide(plan, Window(loads)).plan.live.all()


@pytest.mark.parametrize("params,field", [
    ({"hot_threshold": 0}, "hot_threshold"), ({"hot_threshold": 2}, "hot_threshold"),
    ({"hot_threshold": "x"}, "hot_threshold"), ({"epsilon": -1}, "epsilon"),
    ({"capacity": 0}, "capacity"), ({"seed": -1}, "seed"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(PolicyInputError, match=f"^{field}: "):
        make_policy("dc", **params)


def _simulate(policy: str, engines: int = 20, tuples: float = 60_000, keys: int = 2000):
    workload = SyntheticWorkload(ZipfKeys(keys, keys, None, seed=1), Schedule.constant(1.5),
                                 Schedule.constant(tuples / 30))
    cfg = SimConfig(engines=engines, tick_s=0.1, window_s=1.0, service_rate=1e9)
    return Simulator(workload, make_policy(policy), cfg, seed=2).run(30.0)


def test_in_the_simulator_dc_and_wc_are_far_below_pkg():
    result = {p: _simulate(p) for p in ("kg", "pkg", "dc", "wc")}
    imb = {p: r.imbalance() for p, r in result.items()}
    assert imb["pkg"] > 2.0 and imb["kg"] > imb["pkg"]
    assert imb["wc"] < 0.02 and imb["dc"] < 0.1
    assert imb["wc"] < imb["pkg"] / 100 and imb["dc"] < imb["pkg"] / 20
    for r in result.values():  # every tuple reached one engine
        assert r.engine_totals().sum() == pytest.approx(r.generated)


def test_simulate_json_has_engine_totals(capsys, ks_home):
    argv = ["simulate", "--engines", "8", "--groups", "300", "--zipf", "1.5", "--rate", "2000",
            "--duration", "5", "--policy", "wc", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    totals = np.array(out["engine_totals"])
    assert totals.size == 8 and totals.sum() == pytest.approx(out["generated"])
    assert out["imbalance"] == pytest.approx(totals.max() / totals.mean() - 1)


def _rebalance(monkeypatch, capsys, policy, doc):
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(doc)))
    code = main(["rebalance", "--policy", policy])
    out, err = capsys.readouterr()
    return code, out, err


def test_rebalance_returns_per_key_routing_shares(monkeypatch, capsys):
    doc = {"engines": 4, "loads": [60, 10, 10, 10, 5, 5], "params": {"seed": 1, "theta": 15}}
    code, out, err = _rebalance(monkeypatch, capsys, "wc", doc)
    assert code == 0 and err == ""
    res = json.loads(out)
    info = res["info"]
    assert info["hot_keys"][0] == 0 and info["choices"] == 4 and info["ignored_params"] == ["theta"]
    r = info["routing"]
    rows = [(g, e, s) for g, e, s in zip(r["groups"], r["engines"], r["share"], strict=True)]
    hot = [(e, s) for g, e, s in rows if g == 0]
    assert len(hot) >= 2 and sum(s for _, s in hot) < 1  # split, the plan's engine keeps a share
    assert res["plan"][0] not in [e for e, _ in hot]
    assert res["after"]["rstd"] < res["before"]["rstd"]
    code, _, err = _rebalance(monkeypatch, capsys, "dc", dict(doc, params={"hot_threshold": 7}))
    assert code == 2 and err.startswith("keyshift rebalance: hot_threshold: ")


@pytest.mark.parametrize("policy", ["dc", "wc", "pkg"])
@pytest.mark.parametrize("operator", [FirstStoryDetection, TrafficAnomaly, ClickPatterns])
def test_a_key_splitting_policy_refuses_an_operator_that_cannot_merge(policy, operator):
    with pytest.raises(PolicyInputError, match=rf"^policy: {policy} .*'{operator.app}'"):
        check_operator(policy, operator)


@pytest.mark.parametrize("policy", ["dc", "wc", "pkg", "kg", "dlb-h", "elb"])
def test_word_count_may_be_split_and_whole_group_policies_take_any_operator(policy):
    check_operator(policy, WindowedWordCount)
    check_operator(policy, WindowedWordCount())
    if policy not in ("dc", "wc", "pkg"):
        check_operator(policy, FirstStoryDetection)
