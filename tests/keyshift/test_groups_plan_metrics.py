import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshift.groups import group_of, groups_of, spark_group_expr_sql, stable_hash
from keyshift.metrics import Balance, load_variance, moved_state, rstd
from keyshift.plan import Plan


def test_stable_hash_matches_reference_xxh64_vectors():
    # xxHash64 reference: XXH64("", seed=0) = 0xEF46DB3751D8E999; seed 42 is our constant.
    import xxhash

    assert xxhash.xxh64_intdigest(b"", seed=0) == 0xEF46DB3751D8E999
    assert stable_hash("") == xxhash.xxh64_intdigest(b"", seed=42)


def test_group_is_the_same_in_another_process():
    keys = ["alpha", "β-key", "1234", "a much longer key with spaces"]
    here = [group_of(k, 4096) for k in keys]
    code = (
        "from keyshift.groups import group_of;"
        f"print([group_of(k, 4096) for k in {keys!r}])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "123"},
    ).stdout
    assert eval(out) == here


@given(st.lists(st.text(max_size=20), min_size=1, max_size=50), st.integers(1, 10_000))
def test_groups_of_agrees_with_group_of(keys, p):
    assert groups_of(keys, p).tolist() == [group_of(k, p) for k in keys]
    assert all(0 <= g < p for g in groups_of(keys, p))


def test_groups_spread_evenly():
    g = groups_of((f"key-{i}" for i in range(200_000)), 64)
    counts = np.bincount(g, minlength=64)
    assert rstd(counts) < 5.0


def test_spark_expression_mentions_unsigned_fix():
    sql = spark_group_expr_sql("key", 1000)
    assert "xxhash64" in sql and str((1 << 64) % 1000) in sql


def test_rstd_and_variance_by_hand():
    loads = np.array([10.0, 20.0, 30.0])
    # population std of (10,20,30) = sqrt(200/3) = 8.1650; mean 20 → 40.825 %
    assert rstd(loads) == pytest.approx(40.8248, abs=1e-3)
    assert load_variance(loads) == pytest.approx(200 / 3)
    assert rstd(np.zeros(4)) == 0.0
    assert Balance.of(loads).max == 30.0


def test_plan_validation_and_loads():
    p = Plan.hashed(10, 3)
    assert p.assignment.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert p.engine_loads(np.ones(10)).tolist() == [4, 3, 3]
    with pytest.raises(ValueError, match="outside"):
        Plan(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match="not live"):
        Plan(np.array([0, 1]), 2, live=np.array([True, False]))
    with pytest.raises(ValueError, match="slots must be"):
        Plan(np.array([0]), 0)
    with pytest.raises(ValueError):
        p.assignment[0] = 2  # plans are immutable


def test_moved_state_is_psi():
    old = np.array([0, 0, 1, 1])
    new = np.array([0, 1, 1, 0])
    assert moved_state(old, new, np.array([5.0, 6.0, 7.0, 8.0])) == 14.0


def test_a_policy_reading_plan_engines_still_runs_and_is_told_the_new_name() -> None:
    """``Plan.engines`` was the slot count under another name (docs/policies.md's policy
    API named it): it still answers, with a warning that says slots or parallelism."""
    plan = Plan(np.array([0, 2, 2]), 3, live=np.array([True, False, True]))
    with pytest.warns(DeprecationWarning, match="use slots, or parallelism"):
        assert plan.engines == plan.slots == 3
    assert plan.parallelism == 2
