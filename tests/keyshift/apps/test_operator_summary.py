"""The Operator API's summary of part of a key's events (a hot key split over engines in the
Spark job): for word count, any partition of every batch's events into parts, summarized,
combined in any order and applied to the state, gives exactly the state and the complex
events of processing the events one by one — late events and window boundaries included."""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps import SHIPPED, Operator, OperatorInputError, order_key
from keyshift.apps.declaration import DeclarationError, check_declaration
from keyshift.apps.wordcount import WindowedWordCount

KEYS = ("a", "b", "c")


@st.composite
def batches(draw):
    """Micro-batches of a few keys' events with event times that wander back and forth over
    several 1 s windows (late events across batches), positions in two Kafka partitions."""
    n = draw(st.integers(1, 60))
    events = []
    for i in range(n):
        events.append({"id": f"e{i}", "key": draw(st.sampled_from(KEYS)), "word": "w",
                       "ts": draw(st.integers(0, 6_000)), "partition": i % 2, "offset": i})
    cuts = sorted(set(draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=4))))
    bounds = [0, *[c for c in cuts if c < n], n]
    return [events[a:b] for a, b in pairwise(bounds) if b > a]


def _sequential(op: Operator, batch: list[dict]) -> list[tuple]:
    return [ce.identity() for e in sorted(batch, key=order_key) for ce in op.process(e, 0)]


def _split(op: Operator, batch: list[dict], parts: int, side: list[int],
           order: list[int]) -> list[tuple]:
    """The job's way: each part's events of a key in order_key order on its own engine,
    summarized; the summaries combined in ``order``, applied to the key's state."""
    out = []
    ordered = sorted(batch, key=order_key)
    for key in KEYS:
        mine = [(i, e) for i, e in enumerate(ordered) if e["key"] == key]
        if not mine:
            continue
        sums = [op.summarize([e for i, e in mine if side[i % len(side)] % parts == p])
                for p in range(parts)]
        # a summary travels as JSON between engines: the round trip must keep it exact
        sums = [json.loads(json.dumps(s)) for s in sums]
        total = op._new_summary()
        for p in order:
            total = op.combine(total, sums[p % parts])
        out += [ce.identity() for ce in op.apply_summary(0, key, total)]
    return out


@settings(max_examples=300, deadline=None)
@given(stream=batches(), parts=st.integers(1, 4),
       side=st.lists(st.integers(0, 3), min_size=1, max_size=60),
       order=st.permutations(range(4)), min_count=st.integers(1, 3))
def test_word_count_summaries_of_any_parts_equal_processing_one_by_one(
        stream, parts, side, order, min_count):
    seq = WindowedWordCount(window_s=1.0, min_count=min_count)
    split = WindowedWordCount(window_s=1.0, min_count=min_count)
    for batch in stream:
        expected = _sequential(seq, batch)
        got = _split(split, batch, parts, side, [p for p in order if p < parts])
        assert sorted(got) == sorted(expected)
        assert split._groups == seq._groups  # the same state after every batch


@settings(max_examples=200, deadline=None)
@given(stream=batches(), cut=st.lists(st.integers(0, 60), min_size=2, max_size=2))
def test_contiguous_chunks_in_processing_order_too(stream, cut):
    """The brief's picture: a batch cut into contiguous runs of processing order."""
    seq, split = WindowedWordCount(window_s=1.0), WindowedWordCount(window_s=1.0)
    for batch in stream:
        expected = _sequential(seq, batch)
        got = []
        for key in KEYS:
            mine = [e for e in sorted(batch, key=order_key) if e["key"] == key]
            a, b = sorted(min(c, len(mine)) for c in cut)
            first, middle, last = (split.summarize(mine[:a]), split.summarize(mine[a:b]),
                                   split.summarize(mine[b:]))
            total = split.combine(split.combine(first, middle), last)
            got += [ce.identity() for ce in split.apply_summary(0, key, total)] if mine else []
        assert sorted(got) == sorted(expected)
        assert split._groups == seq._groups


@settings(max_examples=200, deadline=None)
@given(stream=batches(), parts=st.integers(1, 4),
       side=st.lists(st.integers(0, 3), min_size=1, max_size=60),
       order=st.permutations(range(4)), every=st.integers(1, 4))
def test_mergeable_heavy_summaries_of_any_parts_equal_processing_one_by_one(
        stream, parts, side, order, every):
    """heavy with mergeable: true (issue 42): the per-event work in the summarizer, the
    outputs and the state exact under any split."""
    from keyshift.apps import make_operator

    seq = make_operator("heavy", work_us=1, every=every, mergeable=True)
    split = make_operator("heavy", work_us=1, every=every, mergeable=True)
    for batch in stream:
        expected = _sequential(seq, batch)
        got = _split(split, batch, parts, side, [p for p in order if p < parts])
        assert sorted(got) == sorted(expected)
        assert split._groups == seq._groups
    a, b = seq._groups[0].get("a", seq._new_state()), split._groups[0].get("a", [0, 0])
    assert seq.merge(a, b) == [a[0] + b[0], (a[1] + b[1]) % 2 ** 64]


def test_heavy_splits_only_in_its_mergeable_form():
    from keyshift.apps import make_operator
    from keyshift.apps.heavy import HeavyRule, MergeableHeavyRule

    assert not HeavyRule.summarizes() and MergeableHeavyRule.summarizes()
    check_declaration(MergeableHeavyRule)
    op = make_operator("heavy", work_us=1, mergeable=True)
    assert isinstance(op, MergeableHeavyRule) and op.get_params()["mergeable"] is True
    assert type(make_operator("heavy", work_us=1)) is HeavyRule
    with pytest.raises(OperatorInputError, match="^mergeable: must be true or false"):
        make_operator("heavy", mergeable="yes")
    from keyshift.policies import PolicyInputError, check_operator

    check_operator("wc", op)  # splits
    with pytest.raises(PolicyInputError, match="does not merge partial per-key state"):
        check_operator("wc", make_operator("heavy", work_us=1))


summaries = st.lists(
    st.fixed_dictionaries({"id": st.sampled_from(["x", "y", "z"]), "key": st.just("a"),
                           "word": st.just("w"), "ts": st.integers(0, 5_000),
                           "partition": st.integers(0, 1), "offset": st.integers(0, 9)}),
    max_size=12,
).map(lambda es: WindowedWordCount(window_s=1.0).summarize(sorted(es, key=order_key)))


@given(a=summaries, b=summaries, c=summaries)
def test_combine_is_a_commutative_monoid(a, b, c):
    op = WindowedWordCount(window_s=1.0)
    assert op.combine(op.combine(a, b), c) == op.combine(a, op.combine(b, c))
    assert op.combine(a, b) == op.combine(b, a)
    assert op.combine(a, op._new_summary()) == a == op.combine(op._new_summary(), a)


def test_a_late_window_in_a_summary_counts_in_the_open_window():
    """Hand-checked: state open at window 2 s; the batch brings a late event (0.5 s), one of
    window 2 s and two of window 3 s: the count of window 2 closes at the first 3 s event."""
    op = WindowedWordCount(window_s=1.0)
    op.process({"id": "p", "key": "a", "word": "w", "ts": 2_100}, 0)
    batch = [{"id": i, "key": "a", "word": "w", "ts": t}
             for i, t in [("l", 500), ("m", 2_500), ("n", 3_000), ("o", 3_200)]]
    s = op.combine(op.summarize(batch[:2]), op.summarize(batch[2:]))
    assert s == [[0, 1, 500, 0, 0, "l"], [2_000, 1, 2_500, 0, 0, "m"],
                 [3_000, 2, 3_000, 0, 0, "n"]]
    out = op.apply_summary(0, "a", s)
    assert [(c.ts, c.event_id, json.loads(c.detail)["count"]) for c in out] == [(3_000, "n", 3)]
    assert op._groups[0]["a"] == [3_000, 2]


def test_summarize_reports_an_event_it_refuses_and_leaves_it_out():
    op = WindowedWordCount(window_s=1.0)
    bad = []
    s = op.summarize([{"id": "1", "key": "a", "ts": 10, "word": "w"},
                      {"id": "2", "key": "a", "ts": 20}], lambda i, exc: bad.append((i, str(exc))))
    assert s == [[0, 1, 10, 0, 0, "1"]]
    assert bad == [(1, "word: missing in a wordcount event")]


@pytest.mark.parametrize("app", ["fsd", "traffic", "clicks"])
def test_other_operators_offer_no_summary_and_say_so(app):
    cls = SHIPPED[app]
    assert not cls.summarizes()
    with pytest.raises(OperatorInputError, match=rf"^state: operator '{app}' .*cannot be split"):
        cls().summarize([])


class _Counter(Operator):
    app = "counter"
    mergeable = True

    def _new_state(self) -> list[int]:
        return [0]

    def _on_event(self, state: list[int], event: Mapping[str, object]) -> list:
        state[0] += 1
        return []

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0]]


def test_the_loader_wants_all_summary_hooks_or_none_and_mergeable():
    assert SHIPPED["wordcount"].summarizes() and check_declaration(SHIPPED["wordcount"])
    check_declaration(_Counter)  # merges, offers no summary: loads (the job refuses to split)
    assert not _Counter.summarizes()
    half = type("Half", (_Counter,), {"combine": lambda self, a, b: a + b})
    with pytest.raises(DeclarationError, match="part of the summary hooks .combine. but not "
                                               "_new_summary, _summarize_event, _apply_summary"):
        check_declaration(half)
    hooks = {"_new_summary": lambda self: [0], "combine": lambda self, a, b: [a[0] + b[0]],
             "_summarize_event": lambda self, s, e: None,
             "_apply_summary": lambda self, st_, k, s: []}
    unflagged = type("Unflagged", (_Counter,), {**hooks, "mergeable": False})
    with pytest.raises(DeclarationError, match="summary hooks but declares mergeable = False"):
        check_declaration(unflagged)
    check_declaration(type("Whole", (_Counter,), hooks))
