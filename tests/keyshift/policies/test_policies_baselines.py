"""Baselines: KG, LPTF, UHLB, PKG."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from keyshift.metrics import Balance
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, make_policy
from keyshift.policies.lptf import lpt_partition
from keyshift.policies.uhlb import MERSENNE_31, hash_coefficients, universal_hash


def test_lpt_by_hand():
    # 7→A, 5→B, 4→B (9), 3→A (10), 3→B (12), 2→A (12)
    labels = lpt_partition(np.array([7, 5, 4, 3, 3, 2.0]), 2)
    assert labels.tolist() == [0, 1, 1, 0, 1, 0]


def _lpt_one_group_at_a_time(loads: np.ndarray, n: int) -> np.ndarray:
    """The reference LPT (the shipped one before rounds): the n heaviest groups take labels
    0..n-1, then a heap of (load, label), one group per heap operation."""
    order = np.argsort(-loads, kind="stable")
    labels = np.empty(loads.size, dtype=np.int64)
    first = order[:n]
    labels[first] = np.arange(first.size)
    heap = [(float(loads[g]), i) for i, g in enumerate(first)]
    heap += [(0.0, i) for i in range(first.size, n)]
    heapq.heapify(heap)
    for g in order[n:].tolist():
        load, i = heap[0]
        labels[g] = i
        heapq.heapreplace(heap, (load + float(loads[g]), i))
    return labels


@pytest.mark.parametrize("kind", ["small integers", "zipf", "zeros", "powers of two"])
def test_lpt_in_rounds_equals_lpt_one_group_at_a_time(kind):
    rng = np.random.default_rng(len(kind))
    for _ in range(150):
        p, n = int(rng.integers(1, 200)), int(rng.integers(1, 16))
        loads = {
            "small integers": lambda: rng.integers(0, 4, p).astype(float),
            "zipf": lambda: rng.zipf(1.5, p).astype(float),
            "zeros": lambda: rng.random(p) * (rng.random(p) < 0.6),
            "powers of two": lambda: 2.0 ** -rng.integers(0, 60, p),
        }[kind]()
        assert lpt_partition(loads, n).tolist() == _lpt_one_group_at_a_time(loads, n).tolist()


def test_lptf_keeps_state_in_place_when_the_partition_is_only_renamed():
    loads = np.array([7, 5, 4, 3, 3, 2.0])
    plan = Plan([1, 0, 0, 1, 0, 1], 2)  # the LPT partition with engine names swapped
    d = make_policy("lptf").decide(plan, Window(loads))
    assert len(d.moves) == 0
    assert sorted(d.plan.engine_loads(loads).tolist()) == [12.0, 12.0]


def test_lptf_uses_the_history_mean():
    history = np.array([[10, 0, 0, 0], [0, 0, 0, 10.0]])
    window = Window([0, 0, 0, 0.0], history=history)
    d = make_policy("lptf").decide(Plan([0, 0, 0, 0], 2), window)
    assert d.plan.assignment[0] != d.plan.assignment[3]
    assert d.info.details["loads_from"] == "history mean"


def test_kg_never_moves():
    plan = Plan.hashed(10, 3)
    d = make_policy("kg").decide(plan, Window(np.arange(10.0)))
    assert d.plan is plan and len(d.moves) == 0


def test_uhlb_rehashes_only_the_groups_of_engines_above_the_band():
    # slots 0 and 2 live; slot 0 carries 30 of 40 (band 20 ± 15 %): its groups are re-hashed
    plan = Plan([0, 0, 2, 2, 0, 2], 3, live=[True, False, True], version=4)
    loads = np.array([10, 10, 5, 5, 10, 0.0])
    d = make_policy("uhlb", seed=7).decide(plan, Window(loads))
    a, b = d.info.details["a"], d.info.details["b"]
    assert (a, b) == hash_coefficients([7, 4], 1)[0]
    expect = plan.assignment.copy()
    hot = np.array([0, 1, 4])
    expect[hot] = np.array([0, 2])[((a * hot + b) % MERSENNE_31) % 2]
    assert d.plan.assignment.tolist() == expect.tolist()
    assert d.info.details["hot_engines"] == [0] and d.info.details["rehashed_groups"] == 3
    assert set(d.moves.groups.tolist()) <= {0, 1, 4}
    again = make_policy("uhlb", seed=7).decide(plan, Window(loads))
    assert again.plan.assignment.tolist() == d.plan.assignment.tolist()


def test_uhlb_places_a_starting_plan_entirely_by_its_own_hash():
    plan = Plan([0, 0, 2, 2, 0], 3, live=[True, False, True])  # version 0: nobody decided yet
    d = make_policy("uhlb", seed=7).decide(plan, Window([1.0] * 5))
    a, b = d.info.details["a"], d.info.details["b"]
    assert (a, b) == hash_coefficients([7, 0], 1)[0]
    expect = np.array([0, 2])[((a * np.arange(5) + b) % MERSENNE_31) % 2]
    assert d.plan.assignment.tolist() == expect.tolist()
    assert d.info.reason == "initial placement by h0"


def test_uhlb_does_nothing_inside_the_band():
    plan = Plan.hashed(6, 3, version=1)
    d = make_policy("uhlb", theta=15).decide(plan, Window([10, 10, 11, 9, 10, 10.0]))
    assert d.plan is plan and len(d.moves) == 0
    assert d.info.reason == "all engines inside the band"


def test_uhlb_draws_a_new_hash_each_round():
    p = 4096
    loads = np.ones(p)
    loads[0] = 1e6  # whichever engine holds group 0 stays above the band
    plan = Plan.hashed(p, 4)
    d1 = make_policy("uhlb", seed=1, rehash="all").decide(plan, Window(loads))
    d2 = make_policy("uhlb", seed=1, rehash="all").decide(d1.plan, Window(loads))
    first, second = d1.info.details, d2.info.details
    assert (first["a"], first["b"]) != (second["a"], second["b"])
    assert d1.info.details["rehashed_groups"] == d2.info.details["rehashed_groups"] == p


def test_uhlb_moves_about_one_minus_one_over_n_of_the_hot_state():
    rng = np.random.default_rng(0)
    p, n = 20_000, 10
    loads = rng.random(p)
    plan = Plan(np.arange(p) % n, n, version=1)
    loads[plan.assignment == 3] *= 2.0  # one hot engine
    d = make_policy("uhlb", seed=3).decide(plan, Window(loads))
    hot_state = loads[plan.assignment == 3].sum()
    assert d.info.details["hot_engines"] == [3]
    assert d.moves.total_state / hot_state == pytest.approx(1 - 1 / n, abs=0.03)
    assert set(d.moves.src.tolist()) == {3}


def test_uhlb_rejects_bad_parameters():
    for params, field in [({"seed": -1}, "seed"), ({"theta": -2}, "theta"), ({"rehash": "some"}, "rehash")]:
        with pytest.raises(PolicyInputError) as exc:
            make_policy("uhlb", **params).decide(Plan([0, 0], 2), Window([1.0, 1.0]))
        assert exc.value.field == field


def test_universal_hash_has_no_overflow_for_large_ids():
    g = np.array([2**31 - 2])
    assert universal_hash(g, 5, MERSENNE_31 - 1, MERSENNE_31 - 1)[0] == (
        ((MERSENNE_31 - 1) * (2**31 - 2) + MERSENNE_31 - 1) % MERSENNE_31
    ) % 5


def test_pkg_splits_a_hot_key_and_flags_statefulness():
    d = make_policy("pkg").decide(Plan([0], 2), Window([10.0]))
    assert d.info.split_keys == 1
    assert d.info.stateful_safe is False
    assert d.after.rstd == pytest.approx(0.0)
    assert d.before.rstd == pytest.approx(100.0)


def test_pkg_conserves_load_and_beats_kg_on_skew():
    rng = np.random.default_rng(3)
    loads = rng.zipf(1.5, 200).astype(float)
    plan = Plan.hashed(200, 8)
    d = make_policy("pkg", seed=1).decide(plan, Window(loads))
    assert d.after.mean * 8 == pytest.approx(loads.sum())
    assert d.after.rstd <= d.before.rstd
    assert 0 <= d.info.split_keys <= 200


def _routed_loads(d, loads):
    """Engine loads when tuples follow the plan, except ``share`` of each routed group."""
    r = d.info.routing
    eng = np.bincount(d.plan.assignment, weights=loads, minlength=d.plan.slots)
    moved = loads[r.groups] * r.share
    np.subtract.at(eng, d.plan.assignment[r.groups], moved)
    np.add.at(eng, r.engines, moved)
    return eng


def test_pkg_routing_reproduces_the_split_loads_on_live_slots():
    rng = np.random.default_rng(5)
    loads = rng.zipf(1.3, 300).astype(float)
    live = [True, True, False, True, True, True, True]  # slot 2 is dead: routes name slots
    plan = Plan(np.array([0, 1, 3, 4, 5, 6])[np.arange(300) % 6], 7, live=live)
    d = make_policy("pkg", seed=2).decide(plan, Window(loads))
    r = d.info.routing
    assert r.groups.size == d.info.split_keys > 0
    assert ((r.share > 0) & (r.share <= 0.5)).all()
    assert plan.live[r.engines].all()
    assert (r.engines != d.plan.assignment[r.groups]).all()
    eng = _routed_loads(d, loads)
    assert eng[2] == 0.0
    assert eng.sum() == pytest.approx(loads.sum())
    assert Balance.of(eng[plan.live]).rstd == pytest.approx(d.after.rstd)


def test_pkg_hot_key_is_routed_half_and_half():
    d = make_policy("pkg").decide(Plan([0], 2), Window([10.0]))
    r = d.info.routing
    assert r.groups.tolist() == [0]
    assert r.share.tolist() == [0.5]
    assert {int(r.engines[0]), int(d.plan.assignment[0])} == {0, 1}


def test_pkg_routes_nothing_when_no_group_is_split():
    d = make_policy("pkg").decide(Plan([0, 1], 2), Window([0.0, 0.0]))
    assert d.info.routing.groups.size == 0
