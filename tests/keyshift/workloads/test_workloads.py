"""Workloads: skew schedules, skewed sampling, generators, bad records, real-data readers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keyshift.apps import EVENTS
from keyshift.apps.traffic import area_of
from keyshift.schemas import MAX_EVENT_BYTES
from keyshift.workloads import (
    BAD_KINDS,
    GENERATORS,
    KeySampler,
    SkewSchedule,
    WorkloadInputError,
    bad_record,
    make_generator,
    replay_events,
)

_PY_TYPES = {"STRING": str, "BIGINT": int, "INT": int, "DOUBLE": float}


def test_schedule_parse_and_lookup():
    s = SkewSchedule.parse("zipf:0.2@0,1.5@300,0.2@900")
    assert [s.exponent_at(t) for t in (0, 299.9, 300, 899, 900, 10_000)] == [
        0.2, 0.2, 1.5, 1.5, 0.2, 0.2]
    assert SkewSchedule.parse("zipf:1.2").exponent_at(50) == 1.2
    assert SkewSchedule.parse("uniform").exponent_at(3) == 0.0
    assert str(s) == "zipf:0.2@0,1.5@300,0.2@900"


def test_a_rotation_moves_the_hot_set_to_other_keys():
    """``+R`` on a step: the same exponent, but rank r is held by the key R places on, so the
    hottest keys of one phase are cold in the next (a balancer has to move groups again)."""
    s = SkewSchedule.parse("zipf:1.5@0,1.5@180+50,0.2@360")
    assert [s.rotation_at(t) for t in (0, 179, 180, 359, 360)] == [0, 0, 50, 50, 0]
    assert str(s) == "zipf:1.5@0,1.5@180+50,0.2@360"
    assert SkewSchedule.parse("zipf:1.2").rotations == ()
    sampler = KeySampler(100, s, seed=3)
    before, after = sampler.pmf(1.5), sampler.pmf(1.5, 50)
    assert sorted(before) == pytest.approx(sorted(after))  # the same skew ...
    hot = set(np.argsort(before)[-5:])
    assert hot.isdisjoint(set(np.argsort(after)[-5:]))  # ... on other keys
    rng = np.random.default_rng(0)
    late = np.bincount(sampler.sample(20_000, 200, rng), minlength=100)
    assert int(np.argmax(late)) == int(np.argmax(after))


@pytest.mark.parametrize("bad, why", [
    ("", "expected"), ("pareto:1", "expected"), ("zipf:", "expected"),
    ("zipf:1@5", "start at 0"), ("zipf:1@0,2@10,3@10", "increase"),
    ("zipf:1@0,x@3", "not EXPONENT"), ("zipf:1@0,2", "needs @SECONDS"),
    ("zipf:11", "exponent"),
])
def test_schedule_errors_name_the_field(bad, why):
    with pytest.raises(WorkloadInputError, match=why) as info:
        SkewSchedule.parse(bad)
    assert info.value.field == "skew"


def test_sampler_follows_the_exponent_and_keeps_hot_keys():
    sched = SkewSchedule.parse("zipf:0@0,1.5@10")
    sampler = KeySampler(100, sched, seed=3)
    rng = np.random.default_rng(0)
    flat = np.bincount(sampler.sample(50_000, 0, rng), minlength=100)
    skewed = np.bincount(sampler.sample(50_000, 10, rng), minlength=100)
    assert flat.max() / flat.mean() < 1.3
    assert skewed.max() / skewed.mean() > 10
    # The hottest key is the rank-1 key of the seeded permutation, at any exponent > 0.
    assert int(np.argmax(skewed)) == int(np.argmax(sampler.pmf(0.7)))
    with pytest.raises(WorkloadInputError, match="keys"):
        KeySampler(0, sched)


@pytest.mark.parametrize("app", sorted(GENERATORS))
def test_generated_events_match_the_event_schema(app):
    gen = make_generator(app, keys=50, skew="zipf:1.0", seed=7, producer_id="px")
    events = gen.batch(200, 0.0, 1_700_000_000_000) + gen.batch(50, 1.0, 1_700_000_001_000)
    schema = EVENTS[app]
    for e in events:
        assert set(e) <= set(schema.names)
        for col in schema.columns:
            if not col.nullable:
                assert isinstance(e[col.name], _PY_TYPES[col.type]), (col.name, e)
    ids = [e["id"] for e in events]
    assert len(set(ids)) == len(ids) and ids[0] == "px-0"
    again = make_generator(app, keys=50, skew="zipf:1.0", seed=7, producer_id="px")
    assert again.batch(200, 0.0, 1_700_000_000_000) == events[:200]


def test_traffic_key_is_the_area_of_the_position_and_wordcount_key_is_the_word():
    for e in make_generator("traffic", seed=1).batch(500, 0, 0):
        assert e["key"] == area_of(e["lon"], e["lat"])
    for e in make_generator("wordcount", seed=1).batch(100, 0, 0):
        assert e["key"] == e["word"]


def test_unknown_app_names_the_field():
    with pytest.raises(WorkloadInputError, match="app: unknown application"):
        make_generator("stocks")


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_records_are_bad_in_the_advertised_way(kind):
    event = {"id": "p-1", "key": "k", "ts": 5, "word": "w"}
    raw = bad_record(kind, event)
    if kind == "malformed_json":
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw)
        return
    obj = json.loads(raw)
    if kind == "missing_field":
        assert "key" not in obj
    elif kind == "wrong_type":
        assert isinstance(obj["ts"], str)
    else:
        assert len(raw) > MAX_EVENT_BYTES
    with pytest.raises(ValueError, match="bad record kind"):
        bad_record("spicy", event)


@pytest.mark.parametrize("name, app, rows", [
    ("dublin_siri_20130131_first10k.csv", "traffic", 10_000),
    ("airline_tweets_feb2015.csv", "fsd", 14_000),
    ("apache_access_2015.log", "clicks", 9_900),
    ("nasa_19950801.tsv", "clicks", 30_000),
])
def test_replay_readers_give_schema_events_in_time_order(real_data, name, app, rows):
    got_app, events = replay_events(real_data / name)
    events = list(events)
    assert got_app == app and len(events) >= rows
    ts = np.array([e["ts"] for e in events])
    assert (np.diff(ts) >= 0).all()
    assert len({e["id"] for e in events}) == len(events)
    required = EVENTS[app].required
    assert all(all(e.get(c) is not None for c in required) for e in events[:500])


def test_replay_errors(tmp_path):
    with pytest.raises(WorkloadInputError, match="does not exist"):
        replay_events(tmp_path / "nope.csv")
    f = tmp_path / "mystery.csv"
    f.write_text("a,b\n")
    with pytest.raises(WorkloadInputError, match="--format"):
        replay_events(f)
    with pytest.raises(WorkloadInputError, match="format: unknown"):
        replay_events(f, fmt="parquet")
