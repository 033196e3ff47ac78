"""SpaceSaving's guarantees (keyshift.sketch) on random weighted streams, alone and merged."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.sketch import SketchError, SpaceSaving

streams = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 6)), max_size=300)


def _feed(stream: list[tuple[int, int]], capacity: int) -> tuple[SpaceSaving, Counter]:
    sketch, truth = SpaceSaving(capacity), Counter()
    for key, n in stream:
        sketch.update(key, n)
        truth[key] += n
    return sketch, truth


def _bounds_hold(sketch: SpaceSaving, truth: Counter) -> None:
    assert sketch.total == pytest.approx(sum(truth.values()))
    assert len(sketch) <= sketch.capacity
    for key in set(truth) | {-1}:  # -1: never seen
        e = sketch.estimate(key)
        assert e.lower - 1e-9 <= truth[key] <= e.count + 1e-9
        if key not in sketch:
            assert truth[key] <= sketch.floor + 1e-9


@settings(max_examples=200, deadline=None)
@given(stream=streams, capacity=st.integers(1, 12))
def test_estimates_bound_the_true_counts_and_heavy_keys_are_kept(stream, capacity):
    sketch, truth = _feed(stream, capacity)
    _bounds_hold(sketch, truth)
    total = sketch.total
    assert sketch.floor <= total / capacity + 1e-9
    for key, count in truth.items():
        if count > total / capacity:
            assert key in sketch
    # the heavy-hitter query has no false negatives once fraction · N reaches the floor
    fraction = min(1.0, sketch.floor / total) if total else 0.0
    found = {e.key for e in sketch.heavy_hitters(fraction)}
    assert {k for k, c in truth.items() if c > fraction * total + 1e-9} <= found


@settings(max_examples=200, deadline=None)
@given(a=streams, b=streams, capacity=st.integers(1, 12))
def test_a_merge_bounds_the_counts_of_both_streams(a, b, capacity):
    left, t_left = _feed(a, capacity)
    right, t_right = _feed(b, capacity)
    merged = left.merge(right)
    truth = t_left + t_right
    _bounds_hold(merged, truth)
    total = merged.total
    if total:
        assert merged.floor < 2 * total / capacity
    for key, count in truth.items():
        if count > 2 * total / capacity:
            assert key in merged
    assert left.total == sum(t_left.values())  # the inputs are unchanged
    swapped = right.merge(left)  # the same counters, up to which of two equal ones is kept
    assert sorted((e.count, e.error) for e in swapped.top()) == sorted(
        (e.count, e.error) for e in merged.top()
    )
    assert swapped.floor == merged.floor


def test_top_is_largest_first_and_exact_while_nothing_was_evicted():
    sketch = SpaceSaving(4)
    sketch.update_many(["a", "b", "c", "a", "c", "a"], [1, 1, 1, 1, 1, 1])
    assert [(e.key, e.count, e.error) for e in sketch.top()] == [
        ("a", 3, 0), ("c", 2, 0), ("b", 1, 0)
    ]
    assert [e.key for e in sketch.top(1)] == ["a"]
    assert sketch.floor == 0
    sketch.update_many(["d", "e"], [1, 1])  # e evicts the minimum (b or d, count 1)
    e = sketch.estimate("e")
    assert (e.count, e.error) == (2, 1)
    assert sketch.floor == 1


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_a_bad_capacity_is_refused(bad):
    with pytest.raises(SketchError, match="capacity"):
        SpaceSaving(bad)


@pytest.mark.parametrize("n", [-1, float("nan"), float("inf")])
def test_a_bad_weight_is_refused_and_changes_nothing(n):
    sketch = SpaceSaving(2)
    sketch.update("a", 2)
    with pytest.raises(SketchError, match="n: "):
        sketch.update("a", n)
    assert sketch.total == 2 and sketch.estimate("a").count == 2
