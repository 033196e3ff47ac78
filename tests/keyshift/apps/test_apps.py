"""The four operators: hand-checked complex events, snapshot/restore round trips, and
placement independence (the property the KG-vs-DLB consistency test relies on)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps import (
    ClickPatterns,
    FirstStoryDetection,
    OperatorInputError,
    TopK,
    TrafficAnomaly,
    WindowedWordCount,
    make_operator,
    order_key,
)
from keyshift.apps.fsd import lsh_key, similarity, tokens
from keyshift.apps.traffic import area_of, distance_m
from keyshift.groups import group_of


def ev(i: int, key: str, ts: int, **payload) -> dict:
    return {"id": f"e{i:05d}", "key": key, "ts": ts, **payload}


# --- hand-checked rules ---------------------------------------------------------------
def test_fsd_fires_on_novel_tweets_only() -> None:
    op = FirstStoryDetection(history=500, tau=0.2)
    outs = []
    texts = ["earthquake hits tokyo", "earthquake hits tokyo today", "cats are cute pets"]
    for i, t in enumerate(texts):
        outs += op.process(ev(i, "h1", 1000 + i, text=t), group=3)
    # first tweet: no neighbour → similarity 0 ≤ τ; second: cos = 3/sqrt(3·4) ≈ 0.866 > τ;
    # third: shares nothing with the others → 0 ≤ τ.
    assert [o.event_id for o in outs] == ["e00000", "e00002"]
    assert json.loads(outs[1].detail) == {"max_similarity": 0.0, "neighbours": 2}
    assert outs[0].kind == "first_story"


def test_fsd_history_bounds_the_neighbours() -> None:
    op = FirstStoryDetection(history=1, tau=0.2)
    a = [op.process(ev(i, "k", i, text=t), 0) for i, t in enumerate(["a b", "c d", "a b"])]
    # with H = 1 the third tweet only sees "c d", so "a b" counts as new again
    assert [len(x) for x in a] == [1, 1, 1]


def test_similarity_and_tokens() -> None:
    assert tokens("Hello, hello WORLD!") == frozenset({"hello", "world"})
    assert similarity(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(0.5)
    assert similarity(frozenset(), frozenset({"a"})) == 0.0


def test_lsh_key_is_stable_and_groups_similar_texts() -> None:
    assert lsh_key("storm in dublin") == lsh_key("storm in dublin")
    assert lsh_key("Storm in Dublin!") == lsh_key("storm in dublin")
    assert len(lsh_key("x", bits=8)) == 9
    with pytest.raises(OperatorInputError, match="bits"):
        lsh_key("x", bits=0)


def _bus(i: int, vid: str, ts_s: int, delay: float, lon: float = -6.26, lat: float = 53.35):
    return ev(i, "a1", ts_s * 1000, vehicle_id=vid, lon=lon, lat=lat, delay_s=delay)


def test_traffic_fires_once_when_enough_buses_are_delayed_and_close() -> None:
    op = TrafficAnomaly(min_buses=2, high_delay_s=300, streak=2, near_m=10, window_s=600)
    outs, i = [], 0
    for r in range(2):  # two reports each → streak 2 for buses b0..b2, 1 m apart
        for b in range(3):
            outs += op.process(_bus(i, f"b{b}", 10 * r + b, 400, lon=-6.26 + b * 1e-5), 0)
            i += 1
    # fires once 3 (> 2) buses have a streak of 2 and one came within 10 m of another
    assert len(outs) == 1 and outs[0].event_id == "e00005"
    assert json.loads(outs[0].detail)["delayed_buses"] == 3
    # still jammed: no second event
    assert op.process(_bus(i, "b0", 30, 500), 0) == []


def test_traffic_needs_proximity_and_continuous_delay() -> None:
    far = TrafficAnomaly(min_buses=1, streak=1, near_m=10)
    outs = []
    for b in range(3):
        outs += far.process(_bus(b, f"b{b}", b, 400, lon=-6.26 + b * 0.01), 0)  # ~660 m apart
    assert outs == []
    onoff = TrafficAnomaly(min_buses=0, streak=2, near_m=1e6)
    assert onoff.process(_bus(0, "b", 0, 400), 0) == []
    assert onoff.process(_bus(1, "b", 1, 10), 0) == []  # streak broken
    assert onoff.process(_bus(2, "b", 2, 400), 0) == []


def test_area_and_distance() -> None:
    assert area_of(-6.2603, 53.3498) == "a-627_5334"
    assert distance_m(-6.26, 53.35, -6.26, 53.351) == pytest.approx(111.2, rel=0.01)
    with pytest.raises(OperatorInputError, match="cell_deg"):
        area_of(0, 0, 0)


def test_clicks_sliding_pattern_and_session_gap() -> None:
    op = ClickPatterns(length=2, session_gap_s=60)
    outs = []
    for i, (t, url) in enumerate([(0, "/a"), (1, "/b"), (2, "/c"), (1000, "/d"), (1001, "/e")]):
        outs += op.process(ev(i, "s1", t * 1000, url=url), 0)
    got = [json.loads(o.detail) for o in outs]
    assert got == [
        {"pattern": "/a > /b", "session": 0},
        {"pattern": "/b > /c", "session": 0},
        {"pattern": "/d > /e", "session": 1},  # > 60 s gap: new session, window restarted
    ]


def test_topk_orders_by_count_then_text() -> None:
    top = TopK(k=2)
    top.update(["x", "y", "y", "z", "x", "w"])
    assert top.top() == [("x", 2), ("y", 2)]
    with pytest.raises(OperatorInputError, match="k"):
        TopK(k=0)


def test_wordcount_emits_closed_windows() -> None:
    op = WindowedWordCount(window_s=10, min_count=2)
    outs = []
    for i, t in enumerate([1, 2, 3, 12, 25, 26]):
        outs += op.process(ev(i, "storm", t * 1000, word="storm"), 0)
    got = [json.loads(o.detail) for o in outs]
    # window [0,10) had 3 → emitted at t=12; [10,20) had 1 < min_count → silent
    assert got == [{"count": 3, "window_s": 10, "window_start": 0}]
    assert outs[0].event_id == "e00003"


# --- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("app", "params", "field"),
    [
        ("fsd", {"history": 0}, "history"),
        ("fsd", {"tau": 2}, "tau"),
        ("traffic", {"near_m": 0}, "near_m"),
        ("traffic", {"streak": 0}, "streak"),
        ("clicks", {"length": 0}, "length"),
        ("wordcount", {"window_s": 0}, "window_s"),
        ("wordcount", {"bogus": 1}, "params"),
        ("heavy", {"work_us": -1}, "work_us"),
        ("heavy", {"work_us": "lots"}, "work_us"),
        ("heavy", {"every": 0}, "every"),
        ("nope", {}, "app"),
    ],
)
def test_bad_parameters_name_the_field(app: str, params: dict, field: str) -> None:
    with pytest.raises(OperatorInputError) as info:
        make_operator(app, **params)
    assert info.value.field == field


def test_missing_event_field_and_corrupt_snapshot() -> None:
    op = make_operator("wordcount")
    with pytest.raises(OperatorInputError, match="word"):
        op.process({"id": "1", "key": "k", "ts": 1}, 0)
    with pytest.raises(OperatorInputError, match="ts"):
        op.process({"id": "1", "key": "k", "word": "k"}, 0)
    with pytest.raises(OperatorInputError, match="group 5"):
        op.restore(5, b"not a pickle")


# --- explicit state -------------------------------------------------------------------
def _stream(app: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    words = ["storm", "rain", "sun", "wind", "snow", "fog", "hail"]
    out = []
    for i in range(n):
        k = rng.choice(words[:5])
        ts = i * 700
        if app == "fsd":
            out.append(ev(i, k, ts, text=" ".join(rng.sample(words, 3))))
        elif app == "traffic":
            out.append(ev(i, k, ts, vehicle_id=f"v{rng.randrange(6)}", lon=-6.26 + rng.random()
                          * 1e-4, lat=53.35, delay_s=rng.choice([0, 400, 500])))
        elif app == "clicks":
            out.append(ev(i, k, ts, url=f"/{rng.choice(words[:3])}"))
        else:  # wordcount, heavy
            out.append(ev(i, k, ts, word=k))
    return out


PARAMS = {
    "fsd": {"tau": 0.5},
    "traffic": {"min_buses": 1, "streak": 1, "near_m": 50},
    "clicks": {"length": 2},
    "wordcount": {"window_s": 2},
    "heavy": {"work_us": 5, "every": 3},
}


@pytest.mark.parametrize("app", sorted(PARAMS))
def test_snapshot_restore_round_trip_gives_identical_future_outputs(app: str) -> None:
    events = _stream(app, 300, seed=1)
    p = 8
    ref = make_operator(app, **PARAMS[app])
    ref_out = [ce.identity() for e in events for ce in ref.process(e, group_of(e["key"], p))]
    assert ref_out, "the stream must produce complex events for the test to mean anything"

    a = make_operator(app, **PARAMS[app])
    got = [ce.identity() for e in events[:150] for ce in a.process(e, group_of(e["key"], p))]
    b = make_operator(app, **PARAMS[app])
    for g in a.groups():
        b.restore(g, a.snapshot(g))
        a.drop(g)
    assert a.groups() == []
    got += [ce.identity() for e in events[150:] for ce in b.process(e, group_of(e["key"], p))]
    assert got == ref_out


@settings(max_examples=25, deadline=None)
@given(
    app=st.sampled_from(sorted(PARAMS)),
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(1, 199), max_size=6),
)
def test_outputs_do_not_depend_on_placement(app: str, seed: int, cuts: list[int]) -> None:
    """Two engines; at every cut a random set of groups moves (snapshot → drop → restore)."""
    events = _stream(app, 200, seed)
    p = 4
    ref = make_operator(app, **PARAMS[app])
    expected = sorted(ce.identity() for e in events for ce in ref.process(e, group_of(e["key"], p)))
    rng = random.Random(seed)
    engines = [make_operator(app, **PARAMS[app]) for _ in range(2)]
    owner = {g: g % 2 for g in range(p)}
    got, prev = [], 0
    for cut in sorted({*cuts, len(events)}):
        for e in events[prev:cut]:
            g = group_of(e["key"], p)
            got += [ce.identity() for ce in engines[owner[g]].process(e, g)]
        prev = cut
        for g in range(p):
            if rng.random() < 0.5:
                src, dst = engines[owner[g]], engines[1 - owner[g]]
                dst.restore(g, src.snapshot(g))
                src.drop(g)
                owner[g] = 1 - owner[g]
    assert sorted(got) == expected


def test_order_key_breaks_ties_by_arrival() -> None:
    a = {"id": "b", "key": "k", "ts": 5, "partition": 0, "offset": 2}
    b = {"id": "a", "key": "k", "ts": 5, "partition": 0, "offset": 3}
    assert sorted([b, a], key=order_key) == [a, b]


def test_state_bytes_reports_group_size() -> None:
    op = WindowedWordCount()
    assert op.state_bytes(1) == 0
    op.process(ev(0, "w", 0, word="w"), 1)
    assert op.state_bytes(1) == len(op.snapshot(1)) > 0


# --- the CPU-heavy rule ---------------------------------------------------------------------
def test_heavy_chain_depends_on_every_earlier_event_of_its_key() -> None:
    """The digest chains a key's events in order: drop, double or swap one and every later
    output of that key changes (what makes equality with KG a strong check)."""
    events = [ev(i, "k", i * 10, word=f"w{i % 3}") for i in range(60)]

    def run(stream: list[dict]) -> list[tuple]:
        op = make_operator("heavy", work_us=1, every=2)
        return [ce.identity() for e in stream for ce in op.process(e, 0)]

    ref = run(events)
    assert len(ref) > 10  # about one event in two completes a match
    assert run(events) == ref  # deterministic
    dropped = run(events[:20] + events[21:])
    assert [x for x in dropped if x[4] > "e00020"] != [x for x in ref if x[4] > "e00020"]
    swapped = run(events[:20] + [events[21], events[20]] + events[22:])
    assert [x for x in swapped if x[4] > "e00021"] != [x for x in ref if x[4] > "e00021"]
    other = [ev(i, "j", i * 10, word=f"w{i % 3}") for i in range(60)]
    op = make_operator("heavy", work_us=1, every=2)
    mixed = [ce.identity() for a, b in zip(events, other) for e in (a, b)
             for ce in op.process(e, 0)]
    assert [x for x in mixed if x[0] == "k"] == ref  # keys never see each other


def test_heavy_work_scales_with_work_us() -> None:
    """The iterations come from work_us by a fixed constant (never a clock), so the outputs
    are the same on any host; the cost grows with work_us."""
    import time

    from keyshift.apps.heavy import ITERATIONS_PER_US, iterations_for

    assert iterations_for(0) == 1 and iterations_for(100) == round(100 * ITERATIONS_PER_US)
    events = [ev(i, "k", i, word="x") for i in range(40)]

    def cost(work_us: float) -> float:
        op = make_operator("heavy", work_us=work_us)
        t = time.perf_counter()
        for e in events:
            op.process(e, 0)
        return time.perf_counter() - t

    assert cost(2000) > 5 * cost(20)


# --- word count before 1970 (issue 26 item 5) ---------------------------------------------------
def test_wordcount_windows_of_negative_event_times_are_windows() -> None:
    """A window start below 0 is a window, not "none open": -5000, -3000 and 1000 ms with
    1 s windows are three windows of one event each (it was one window of 3)."""
    op = WindowedWordCount(window_s=1)
    outs = [ce for i, ts in enumerate((-5000, -3000, 1000))
            for ce in op.process(ev(i, "w", ts, word="w"), 0)]
    assert [(json.loads(ce.detail)["window_start"], json.loads(ce.detail)["count"], ce.ts)
            for ce in outs] == [(-5000, 1, -3000), (-3000, 1, 1000)]
    assert op._groups[0]["w"] == [1000, 1]
    # -1500 and -1001 share the window [-2000, -1000); -1000 opens the next one
    op = WindowedWordCount(window_s=1)
    outs = [ce for i, ts in enumerate((-1500, -1001, -1000, 0))
            for ce in op.process(ev(i, "w", ts, word="w"), 0)]
    assert [json.loads(ce.detail)["count"] for ce in outs] == [2, 1]
    # the summary path and merge agree with the rule on negative times
    events = [ev(i, "w", ts, word="w") for i, ts in enumerate((-5000, -4500, -3000, 1000))]
    one = WindowedWordCount(window_s=1)
    want = [ce.identity() for e in events for ce in one.process(e, 0)]
    split = WindowedWordCount(window_s=1)
    summary = split.combine(split.summarize(events[::2]), split.summarize(events[1::2]))
    assert [ce.identity() for ce in split.apply_summary(0, "w", summary)] == want
    assert split._groups[0]["w"] == one._groups[0]["w"] == [1000, 1]
    empty = op._new_state()
    assert op.merge(empty, [-3000, 2]) == op.merge([-3000, 2], empty) == [-3000, 2]
    assert op.merge([-3000, 2], [-3000, 1]) == [-3000, 3]
    assert op.merge([-1, 0], [-3000, 2]) == [-3000, 2]  # a state from before: no window
