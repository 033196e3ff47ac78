"""Issue 16 item 6, the event parser under fuzzing (hypothesis): what a Kafka record goes
through before and inside an engine, for each shipped operator.

Whatever a record holds — random bytes, any JSON value, a valid event with one field
replaced by any JSON value, deleted or joined by another, nesting 10,000 deep, 1e400 and
2**100, NaN and Infinity, lone surrogates, RTL marks, emoji and NUL, bytes that are not
UTF-8, more than ``MAX_EVENT_BYTES``, an empty value or a tombstone — ``classify`` makes it
a valid event (every declared non-null field present and typed, the values those of the
record) or gives it a reason naming the problem or the field; and the engine task, fed the
valid ones, produces outputs or a dead letter with a reason, never an exception (which
would fail the Spark task, its retries and then the query: a stuck job).

The Spark part is one session for the module and one Spark job per operator for all the
generated records (drawn with hypothesis from a printed seed: ``KEYSHIFT_FUZZ_SEED`` replays
a run, ``KEYSHIFT_FUZZ_EVENTS`` draws more); the engine part without Spark runs hypothesis
directly on :func:`keyshift.streaming.engines.run_engine`.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from fuzz_support import json_values, mutated

from keyshift.apps import SHIPPED, event_schema
from keyshift.groups import group_of
from keyshift.schemas import MAX_EVENT_BYTES, Column
from keyshift.streaming.engines import (
    DEAD,
    ENGINE_OUTPUT,
    LOAD,
    OUT,
    TASK,
    BatchSpec,
    input_batch,
    run_engine,
)

APPS = sorted(SHIPPED)
T0 = 1_700_000_000_000
INTS = {"BIGINT": (-(2**63), 2**63 - 1), "INT": (-(2**31), 2**31 - 1)}
REASON = re.compile(rf"^(oversized: \d+ bytes > {MAX_EVENT_BYTES}|malformed json(: not UTF-8)?"
                    r"|missing field: (?P<missing>\w+)"
                    r"|wrong type: (?P<wrong>\w+) \(expected [A-Z]+\))$")


# -- what a record can hold ------------------------------------------------------------
def column_values(c: Column) -> st.SearchStrategy:
    """Values of a column's declared type (text without surrogates: JSON text is UTF-8)."""
    if c.type in INTS:
        lo, hi = INTS[c.type]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1]))
    if c.type == "DOUBLE":
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                         st.integers(-(2**53), 2**53), st.sampled_from([1e308, -5e-324, 2**100]))
    assert c.type == "STRING", c
    return st.one_of(st.text(max_size=30),
                     st.sampled_from(["", "\u202ertl\u202c", "\U0001f600\u200d", "a\x00b"]))


def events(app: str, **values: st.SearchStrategy) -> st.SearchStrategy[dict]:
    """Valid events of an app: required columns always, nullable ones present, null or
    absent; ``values`` draws some columns from narrower strategies."""
    cols = event_schema(app).columns
    return st.fixed_dictionaries(
        {c.name: values.get(c.name, column_values(c)) for c in cols if not c.nullable},
        optional={c.name: values.get(c.name, st.none() | column_values(c))
                  for c in cols if c.nullable})


def _dumps(doc, ascii_only: bool) -> bytes:
    return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _pad(doc: dict, size: int) -> bytes:
    """The event with a padding field that makes it exactly ``size`` bytes."""
    base = _dumps({**doc, "pad": ""}, True)
    return base[:-2] + b"x" * (size - len(base)) + b'"}'


def _base(app: str) -> dict:
    """A valid event of an app: each required field with a plain value of its type."""
    plain = {"STRING": "v", "BIGINT": T0, "INT": 1, "DOUBLE": 1.5}
    return {c.name: plain[c.type] for c in event_schema(app).columns if not c.nullable}


def _with(doc: dict, name: str, literal: bytes) -> bytes:
    """The event with field ``name`` set to a JSON literal (or any text) as written."""
    rest = _dumps({k: v for k, v in doc.items() if k != name}, True)
    return rest[:-1] + b', "%s": %s}' % (name.encode(), literal)


def _oversized(size: int) -> str:
    return f"oversized: {size} bytes > {MAX_EVENT_BYTES}"


def _pathological(app: str) -> list[tuple[bytes | None, str | None]]:
    """Records every run sends, with the reason each must get (None: valid as sent)."""
    doc = _base(app)
    text = next(c.name for c in event_schema(app).columns if c.name not in ("id", "key", "ts")
                and c.type == "STRING")
    deep = b"[" * 10_000 + b"]" * 10_000
    event = _dumps(doc, True)
    wrong_ts = "wrong type: ts (expected BIGINT)"
    cases: list[tuple[bytes | None, str | None]] = [
        (None, "malformed json"), (b"", "malformed json"), (b"  \n", "malformed json"),
        (deep, "malformed json"), (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "malformed json"),
        (_with(doc, "deep", deep), "malformed json"),
        (_with(doc, "deep", b"[" * 200 + b"]" * 200), None),
        (_with(doc, "ts", str(2**100).encode()), wrong_ts),
        (_with(doc, "ts", b"1e400"), wrong_ts),
        (_with(doc, "ts", str(2**63).encode()), wrong_ts),
        (_with(doc, "ts", b"NaN"), "malformed json"),
        (_with(doc, "ts", b"-Infinity"), "malformed json"),
        (event[:-1] + b', "ts": 5}', "malformed json"),  # a name twice
        (b"{'id': 'a', 'key': 'k', 'ts': 1}", "malformed json"),
        (b"\xef\xbb\xbf" + event, "malformed json"),  # a byte order mark
        (event + b" x", "malformed json"),
        (event + event, "malformed json"),  # two events in one record
        (event + b"]" + event, "malformed json"),
        (event + b"}", "malformed json"),
        (event + b" \r\n\t", None),
        (_with(doc, text, b'"\\ud800"'), "malformed json"),  # lone surrogates, escaped
        (_with(doc, text, b'"\\udc00\\ud800"'), "malformed json"),
        (_with(doc, text, b'"\xed\xa0\x80"'), "malformed json: not UTF-8"),  # ...encoded
        (_with(doc, text, b'"\\ud83d\\ude00 \xe2\x80\xae \\u0000"'), None),  # emoji RTL NUL
        (_with(doc, text, b'"a\x00b"'), "malformed json"),  # a raw control character
        (_with(doc, text, b'"\xff\xfe"'), "malformed json: not UTF-8"),
        (b"\xff" * 50, "malformed json: not UTF-8"),
        (_pad(doc, MAX_EVENT_BYTES), None),
        (_pad(doc, MAX_EVENT_BYTES + 1), _oversized(MAX_EVENT_BYTES + 1)),
        (_pad(doc, 3 * MAX_EVENT_BYTES)[:-2] + b"\xff", _oversized(3 * MAX_EVENT_BYTES - 1)),
    ]
    for c in event_schema(app).columns:
        if c.type == "DOUBLE":
            cases += [(_with(doc, c.name, bad), f"wrong type: {c.name} (expected DOUBLE)")
                      for bad in (b"1e400", b"-1e999", b'"NaN"', b'"Infinity"')]
            cases += [(_with(doc, c.name, b"NaN"), "malformed json")]
    return cases


def _expected(app: str, doc, how: str, field: str, value) -> str | None:
    """The reason a record with one field changed must get (None: valid); "?" when the
    record is valid or wrong-typed depending on how Spark renders a value."""
    try:
        json.dumps(doc, allow_nan=False)
    except ValueError:
        return "malformed json"  # NaN or an infinity somewhere: not JSON
    if field not in event_schema(app).names:
        return None  # an extra field: ignored
    c = event_schema(app).column(field)
    if how == "delete" or value is None:
        return None if c.nullable else f"missing field: {field}"
    wrong = f"wrong type: {field} (expected {c.type})"
    if c.type in INTS:
        lo, hi = INTS[c.type]
        ok = type(value) is int and lo <= value <= hi
        return None if ok else wrong
    if c.type == "DOUBLE":
        if type(value) not in (int, float):
            return wrong
        try:
            return None if math.isfinite(float(value)) else wrong
        except OverflowError:
            return wrong
    return None  # a STRING takes any JSON value but null, as its JSON text


def records(app: str) -> st.SearchStrategy[tuple[bytes | None, str | None, dict | None]]:
    """(record, expected reason, the event it must parse to) — "?" as reason: any reason
    the rule allows (random bytes, any JSON value)."""
    schema = event_schema(app)
    valid = st.tuples(events(app), st.booleans()).map(
        lambda d: (_dumps(d[0], d[1]), None, d[0]))
    noise = st.one_of(
        st.binary(max_size=300).map(lambda b: (b, "?", None)),
        json_values.map(lambda v: (json.dumps(v).encode(), "?", None)),
        st.text(max_size=100).map(lambda t: (t.encode("utf-8", "surrogatepass"), "?", None)),
    )

    @st.composite
    def one_field(draw):
        doc = draw(events(app))
        how = draw(st.sampled_from(["replace", "replace", "replace", "delete", "extra"]))
        field = draw(st.sampled_from(schema.names if how != "delete" else sorted(doc)))
        if how == "replace" and field not in doc:
            doc[field] = None
        value = draw(st.one_of(json_values, column_values(schema.column(field))))
        changed = mutated(doc, (field,), value, how)
        expect = _expected(app, changed, how, "\u00e9xtra\u2603" if how == "extra" else field,
                           value)
        return (_dumps(changed, draw(st.booleans())), expect, changed if expect is None else None)

    return st.one_of(valid, noise, one_field())


def draw_records(app: str, count: int, seed: int) -> list[tuple[bytes | None, str | None,
                                                                dict | None]]:
    """``count`` records drawn by hypothesis from ``seed``, without shrinking: the records of
    one Spark job."""
    out: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(records(app))
    def collect(record):
        out.append(record)

    collect()
    return out + [(r, e, None) for r, e in _pathological(app)]


def _typed_ok(c: Column, v) -> bool:
    if c.type in INTS:
        lo, hi = INTS[c.type]
        return type(v) is int and lo <= v <= hi
    if c.type == "DOUBLE":
        return type(v) is float and math.isfinite(v)
    return type(v) is str


def _same(c: Column, got, sent) -> bool:
    if sent is None:
        return got is None
    if c.type == "DOUBLE":
        return got == float(sent)
    if c.type == "STRING" and not isinstance(sent, str):
        return isinstance(got, str)  # its JSON text, as Spark writes it
    return got == sent


SEED = int(os.environ.get("KEYSHIFT_FUZZ_SEED", random.randrange(2**32)))
COUNT = int(os.environ.get("KEYSHIFT_FUZZ_EVENTS", "300"))


# -- classify and the engines, in Spark ------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("app", APPS)
def test_every_record_is_valid_or_has_its_reason_and_no_engine_task_fails(spark, tmp_path,
                                                                           app):
    from pyspark.sql import functions as F

    from keyshift.streaming.engines import arrow_engine
    from keyshift.streaming.ingest import classify
    from keyshift.streaming.batch_frames import BatchFrames

    drawn = draw_records(app, COUNT, SEED)
    where = f"(KEYSHIFT_FUZZ_SEED={SEED})"
    schema = event_schema(app)
    now = datetime.now(UTC)
    raw = spark.createDataFrame([("t", 0, i, now, r) for i, (r, _, _) in enumerate(drawn)],
                                "topic STRING, partition INT, offset BIGINT, "
                                "timestamp TIMESTAMP, value BINARY")
    rows = classify(raw, app).collect()
    assert sorted(r["offset"] for r in rows) == list(range(len(drawn))), where  # none lost
    for r in rows:
        record, expect, doc = drawn[r["offset"]]
        what = f"{where} record {r['offset']} {(record or b'')[:200]!r}"
        reason = r["reason"]
        if reason is None:
            for c in schema.columns:
                v = r[c.name]
                assert (v is None and c.nullable) or _typed_ok(c, v), (what, c.name, v)
                if doc is not None:
                    assert _same(c, v, doc.get(c.name)), (what, c.name, v)
        else:
            m = REASON.match(reason)
            assert m, (what, reason)
            named = m.group("missing") or m.group("wrong")
            assert named is None or named in schema.names, (what, reason)
        if expect != "?":
            assert reason == expect, (what, reason, expect)
        if record is None:
            assert r["raw"] is None, what
        elif reason != "malformed json: not UTF-8" and len(record) <= MAX_EVENT_BYTES:
            assert r["raw"] == record.decode()[:4096], what
        else:  # valid UTF-8 all the same: it reaches the engines' Arrow input
            assert 0 < len(r["raw"]) <= 4096 and r["raw"].encode(), what

    # the engine stage as the job builds it: its parse (group, event JSON) and engine task
    frames = BatchFrames(app, schema.names, 64, f"fuzz-{app}", "t")  # the job's own
    x = frames.x  # everything on engine 0
    parsed = frames.parse(raw).select(*x.routed, F.lit(0).cast("bigint").alias("pkey"),
                                      x.summary)
    spec = BatchSpec(0, app, {}, f"fuzz-{app}", str(tmp_path / "state"), compact_every=0)
    out = parsed.coalesce(1).mapInArrow(arrow_engine(spec), ENGINE_OUTPUT).collect()
    (task,) = [json.loads(r["task"]) for r in out if r["tag"] == TASK]
    dead = {r["offset"]: r["reason"] for r in out if r["tag"] == DEAD}
    refused = {r["offset"]: r["reason"] for r in rows if r["reason"] is not None}
    assert task["events"] + task["dead"] == len(drawn) and task["dead"] == len(dead), where
    assert {o: dead.get(o) for o in refused} == refused, where
    for offset, reason in dead.items():
        if offset not in refused:  # refused by the operator at run time
            assert re.match(r"rejected by operator: (\w+): ", reason), (where, reason)
            assert reason.split(": ")[1] in schema.names, (where, reason)
    assert sum(r["n"] for r in out if r["tag"] == LOAD) == task["events"], where
    assert task["outputs"] == sum(r["tag"] == OUT for r in out), where


# -- the engine task without Spark -----------------------------------------------------
def _rows(app: str, docs: list[dict], groups: int = 64):
    """Engine input as the job's parse gives it: the typed event, every declared field
    (None where the record had none or null); a document None stands for a refused record."""
    names = event_schema(app).names
    for i, doc in enumerate(docs):
        if doc is None:
            yield (None, 0, i, None, "malformed json", "{", T0 / 1e3, None)
        else:
            yield (group_of(str(doc["key"]), groups), 0, i, {n: doc.get(n) for n in names},
                   None, json.dumps(doc), T0 / 1e3 + i, None)


def _run(tmp_path, app: str, docs: list, batch: int = 0, **params) -> list:
    spec = BatchSpec(batch, app, params, f"fuzz-{app}", str(tmp_path / "state"),
                     compact_every=0)
    return list(run_engine(spec, 0, [input_batch(app, _rows(app, docs))]))


FUZZ = settings(max_examples=int(os.environ.get("KEYSHIFT_FUZZ_EXAMPLES", "40")),
                deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("app", APPS)
@FUZZ
@given(data=st.data())
def test_valid_events_give_outputs_or_dead_letters_never_an_exception(tmp_path_factory, app,
                                                                      data):
    """Any batch of events ingestion accepts (typed, in range of their types, keys and times
    clustered so that windows close and patterns form) runs through the engine task; each
    event is counted or dead-lettered with the operator's reason, and a second batch
    continues from the first one's state."""
    tmp_path = tmp_path_factory.mktemp("engine")
    near = {"key": st.sampled_from(["k0", "k1", "k\u202e2"]) | st.text(max_size=5),
            "ts": st.integers(T0, T0 + 600_000) | st.sampled_from([0, -1, 2**63 - 1, -(2**63)])}
    if app == "traffic":  # a few buses of two areas, on the globe or off it, often delayed
        anywhere = column_values(Column("x", "DOUBLE"))
        near.update(key=st.sampled_from(["a1", "a2"]),
                    vehicle_id=st.sampled_from(["v1", "v2", "v3", None]),
                    lon=st.one_of(st.floats(-180, 180), st.just(-6.26), st.just(-6.26),
                                  anywhere),
                    lat=st.one_of(st.floats(-90, 90), st.just(53.34), st.just(53.34),
                                  anywhere),
                    delay_s=st.sampled_from([0.0, 600.0]) | anywhere)
    events_ = events(app, **near)
    if app == "traffic":  # vehicle_id is nullable: drawn absent as often as not
        events_ = events_.map(lambda d: {"vehicle_id": "v1", **d})
    for batch in range(2):
        docs = data.draw(st.lists(st.one_of(events_, events_, events_, st.none()), max_size=40))
        recs = _run(tmp_path, app, docs, batch, **({"min_buses": 0, "near_m": 1e7, "streak": 1}
                                                   if app == "traffic" else {}))
        (task,) = [r for tag, r in recs if tag == TASK]
        dead = [r for tag, r in recs if tag == DEAD]
        assert task["events"] + task["dead"] == len(docs) and task["dead"] == len(dead)
        assert sum(r[2] for tag, r in recs if tag == LOAD) == task["events"]
        for partition, offset, kts, raw, reason in dead:
            assert reason == "malformed json" or re.match(r"rejected by operator: \w+: ",
                                                          reason), reason
            assert raw is not None and kts is not None


def test_an_event_the_operator_refuses_is_a_dead_letter_and_the_batch_goes_on(tmp_path):
    """Ingestion accepts a traffic event without its nullable vehicle_id, and positions off
    the globe; the operator refuses them. Each becomes a dead letter naming the field, with
    its offset, time and raw text, and the batch's other events give exactly the outputs
    they give without them."""
    def bus(i, vid="v1", lon=None, lat=53.34):
        return {"id": f"e{i}", "key": "a1", "ts": T0 + i * 1000, "vehicle_id": vid,
                "lon": -6.26 + i * 1e-6 if lon is None else lon, "lat": lat, "delay_s": 900.0}

    good = [bus(i, vid=f"v{i % 3}") for i in range(12)]
    bad = {3: bus(100, vid=None), 7: bus(101, lat=1e308), 9: bus(102, lon=-181.0)}
    docs = list(good)
    for at, doc in sorted(bad.items()):
        docs.insert(at, doc)
    params = {"min_buses": 1, "streak": 2}
    with_bad = _run(tmp_path / "a", "traffic", docs, **params)
    without = _run(tmp_path / "b", "traffic", good, **params)
    dead = sorted(r for tag, r in with_bad if tag == DEAD)
    assert [(p, o, r) for p, o, _, _, r in dead] == [
        (0, 3, "rejected by operator: vehicle_id: missing in a traffic event"),
        (0, 7, "rejected by operator: lat: must be in [-90, 90], got 1e+308"),
        (0, 9, "rejected by operator: lon: must be in [-180, 180], got -181.0")]
    assert [json.loads(raw)["id"] for _, _, _, raw, _ in dead] == ["e100", "e101", "e102"]
    assert all(kts == T0 / 1e3 + o for _, o, kts, _, _ in dead)
    outs = [r[1:] for tag, r in with_bad if tag == OUT]
    assert outs and outs == [r[1:] for tag, r in without if tag == OUT]
    (task,) = [r for tag, r in with_bad if tag == TASK]
    assert (task["events"], task["dead"], task["outputs"]) == (12, 3, len(outs))


def test_without_a_rejection_callback_the_operator_still_raises():
    """Outside the engine (a replay, a unit test) a refused event is an error, as before."""
    from keyshift.apps import OperatorInputError, make_operator

    op = make_operator("wordcount")
    with pytest.raises(OperatorInputError, match="word: missing"):
        op.process_many([{"id": "a", "key": "k", "ts": 1}], [0])


@pytest.mark.parametrize("window_s", [0.0001, 0.0, -1.0, float("inf"), float("nan")])
def test_a_word_count_window_shorter_than_a_millisecond_is_refused(window_s):
    """Windows are whole milliseconds of ts: 0.0001 s made a window 0 ms wide and every event
    a division by zero inside the engine task."""
    from keyshift.apps import OperatorInputError, make_operator

    with pytest.raises(OperatorInputError, match="window_s: must be >= 0.001"):
        make_operator("wordcount", window_s=window_s)
