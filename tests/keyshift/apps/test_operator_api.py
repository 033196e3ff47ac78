"""The Operator API as a contract: the resolver's three forms and each of its one-line errors,
the event schemas operators declare (the shipped ones unchanged), and the example operator's
rule, snapshot/restore round trip and placement independence."""

from __future__ import annotations

import json
import random
import textwrap
import uuid
from importlib.metadata import EntryPoint

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps import (
    EVENTS,
    OPERATOR_API_VERSION,
    SHIPPED,
    OperatorInputError,
    UnknownOperatorError,
    event_schema,
    make_operator,
    order_key,
    registry,
    resolve_operator,
)
from keyshift.apps.declaration import is_ddl_type
from keyshift.examples import sessions
from keyshift.examples.sessions import SPEC, SessionOperator, generate
from keyshift.groups import group_of


@pytest.fixture(autouse=True)
def _fresh_resolver():
    """Resolution is cached per spec; tests that change entry points or modules start clean."""
    resolve_operator.cache_clear()
    yield
    resolve_operator.cache_clear()


# --- the shipped applications' schemas, as EVENTS defined them before operators declared them
SHIPPED_SCHEMAS = {
    "fsd": ("event_fsd", 1, "first story detection; key = LSH bucket of the text (dlb Listing 1.1)",
            "`id` STRING NOT NULL, `key` STRING NOT NULL, `ts` BIGINT NOT NULL, "
            "`text` STRING NOT NULL"),
    "traffic": ("event_traffic", 1, "bus positions and delays; key = city area (elastic-cep §IV)",
                "`id` STRING NOT NULL, `key` STRING NOT NULL, `ts` BIGINT NOT NULL, "
                "`line_id` STRING, `vehicle_id` STRING, `lon` DOUBLE NOT NULL, "
                "`lat` DOUBLE NOT NULL, `delay_s` DOUBLE NOT NULL, `congestion` INT"),
    "clicks": ("event_clicks", 1, "click stream; key = session id (streammine3g §6)",
               "`id` STRING NOT NULL, `key` STRING NOT NULL, `ts` BIGINT NOT NULL, "
               "`user` STRING, `url` STRING NOT NULL, `status` INT"),
    "wordcount": ("event_wordcount", 1, "words; key = the word (elb-clb §5.2)",
                  "`id` STRING NOT NULL, `key` STRING NOT NULL, `ts` BIGINT NOT NULL, "
                  "`word` STRING NOT NULL"),
    "heavy": ("event_heavy", 1, "a CPU-heavy rule on words (the word-count schema); key = the word",
              "`id` STRING NOT NULL, `key` STRING NOT NULL, `ts` BIGINT NOT NULL, "
              "`word` STRING NOT NULL"),
}


@pytest.mark.parametrize("app", sorted(SHIPPED_SCHEMAS))
def test_shipped_apps_declare_the_schemas_events_had(app: str) -> None:
    name, version, doc, ddl = SHIPPED_SCHEMAS[app]
    schema = SHIPPED[app].event_schema()
    assert (schema.name, schema.version, schema.doc, schema.ddl()) == (name, version, doc, ddl)
    assert EVENTS[app] == schema == event_schema(app)
    spec = resolve_operator(app)
    assert (spec.name, spec.cls, spec.origin, spec.api_version) == (app, SHIPPED[app], "shipped", 1)


def test_events_holds_exactly_the_shipped_apps() -> None:
    assert sorted(EVENTS) == sorted(SHIPPED) == ["clicks", "fsd", "heavy", "traffic", "wordcount"]


def test_shipped_apps_are_installed_entry_points() -> None:
    eps = registry._operator_entry_points()
    assert {name: eps[name].load() for name in SHIPPED} == SHIPPED


# --- the three forms ------------------------------------------------------------------
def test_module_class_form_loads_the_example() -> None:
    spec = resolve_operator(SPEC)
    assert spec.cls is SessionOperator and spec.origin == "module" and spec.name == SPEC
    assert spec.api_version == OPERATOR_API_VERSION == 1
    assert spec.schema.names == ["id", "key", "ts", "page", "amount"]
    assert spec.schema.name == "event_sessions" and spec.schema.required == ["id", "key", "ts",
                                                                           "page"]
    assert event_schema(SPEC) is spec.schema
    op = make_operator(SPEC, gap_s=5)
    assert isinstance(op, SessionOperator) and op.gap_s == 5


def test_entry_point_form(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint("user-sessions", SPEC, "keyshift.operators")
    monkeypatch.setattr(registry, "_operator_entry_points", lambda: {ep.name: ep})
    spec = resolve_operator("user-sessions")
    assert (spec.cls, spec.origin, spec.name) == (SessionOperator, "entry point", "user-sessions")
    assert event_schema("user-sessions").names[3:] == ["page", "amount"]
    assert isinstance(make_operator("user-sessions"), SessionOperator)


def test_a_shipped_name_wins_over_an_entry_point_of_the_same_name(monkeypatch) -> None:
    ep = EntryPoint("fsd", SPEC, "keyshift.operators")
    monkeypatch.setattr(registry, "_operator_entry_points", lambda: {ep.name: ep})
    assert resolve_operator("fsd").cls is SHIPPED["fsd"]


def test_resolution_is_cached_per_spec() -> None:
    assert resolve_operator(SPEC) is resolve_operator(SPEC)


# --- one-line errors --------------------------------------------------------------------
USER_MODULE = '''
from keyshift.apps import Operator
from keyshift.schemas import Column, ENVELOPE, TableSchema

CONSTANT = 3


class NotAnOperator:
    app = "x"


class Good(Operator):
    app = "good"
    event_columns = (Column("v", "ARRAY<MAP<STRING, DECIMAL(10,2)>>"),)
    required = ("v",)

    def _new_state(self):
        return []

    def _on_event(self, state, event):
        return []


class Abstract(Operator):
    app = "abstract"

    def _new_state(self):
        return []


class FutureApi(Good):
    api_version = 2


class TextApi(Good):
    api_version = "1"


class BadType(Good):
    event_columns = (Column("v", "STRNG"),)


class EnvelopeClash(Good):
    event_columns = (Column("ts", "BIGINT"),)
    required = ()


class Duplicate(Good):
    event_columns = (Column("v", "INT"), Column("v", "STRING"))


class NotColumns(Good):
    event_columns = (("v", "INT"),)


class BadColumnName(Good):
    event_columns = (Column("a b", "INT"),)
    required = ()


class UndeclaredRequired(Good):
    required = ("v", "w")


class BadAppName(Good):
    app = "my app"


class NoApp(Operator):
    def _new_state(self):
        return []

    def _on_event(self, state, event):
        return []


class NoEnvelope(Good):
    @classmethod
    def event_schema(cls):
        return TableSchema("event_good", 1, (Column("v", "INT"),))


class RaisingSchema(Good):
    @classmethod
    def event_schema(cls):
        raise RuntimeError("boom")


class Outer:
    class Inner(Good):
        app = "inner"
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> str:
    """A user's operator module on the Python path, under a fresh name."""
    name = f"user_ops_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('no database')\n")
    (tmp_path / f"{name}_deps.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_users_module_class_loads_with_any_valid_ddl_and_nested_class(user_module) -> None:
    assert resolve_operator(f"{user_module}:Good").schema.column("v").type.startswith("ARRAY<")
    assert resolve_operator(f"{user_module}:Outer.Inner").schema.name == "event_inner"


@pytest.mark.parametrize(("target", "fragment"), [
    ("no_such_module_xyz:Op", "module 'no_such_module_xyz' is not importable"),
    ("{m}_deps:Op", "importing module '{m}_deps' failed: No module named "
                    "'not_installed_dependency_xyz'"),
    ("{m}_broken:Op", "importing module '{m}_broken' failed: RuntimeError: no database"),
    ("{m}:Missing", "module '{m}' has no class 'Missing'"),
    ("{m}:Outer.Missing", "module '{m}' has no class 'Outer.Missing'"),
    ("{m}:", "expected module:Class"),
    (":Good", "expected module:Class"),
    ("{m}:CONSTANT", "3 is a int, not a class"),
    ("{m}:NotAnOperator", "NotAnOperator is not a subclass of keyshift.apps.base.Operator"),
    ("{m}:Abstract", "class Abstract is abstract: implement _on_event"),
    ("{m}:FutureApi", "declares Operator API version 2; this keyshift supports 1"),
    ("{m}:TextApi", "declares Operator API version '1'"),
    ("{m}:BadType", "column 'v' type 'STRNG' is not a Spark SQL DDL type"),
    ("{m}:EnvelopeClash", "column 'ts' declared twice"),
    ("{m}:Duplicate", "column 'v' declared twice"),
    ("{m}:NotColumns", "('v', 'INT') is not a keyshift.schemas.Column"),
    ("{m}:BadColumnName", "column name 'a b' is not a name"),
    ("{m}:UndeclaredRequired", "required field(s) w not declared in event_columns"),
    ("{m}:BadAppName", "app must be a name of letters, digits and _"),
    ("{m}:NoApp", "app must be a name"),
    ("{m}:NoEnvelope", "must start with the envelope id, key, ts"),
    ("{m}:RaisingSchema", "bad event schema: RuntimeError: boom"),
])
def test_each_load_error_is_one_line_naming_app_and_the_spec(user_module, target, fragment):
    spec = target.format(m=user_module)
    with pytest.raises(OperatorInputError) as info:
        resolve_operator(spec)
    message = str(info.value)
    assert info.value.field == "app"
    assert message.startswith(f"app: {spec}: ")
    assert "\n" not in message
    assert fragment.format(m=user_module) in message
    with pytest.raises(OperatorInputError):  # the other entry points say the same
        make_operator(spec)


def test_an_unknown_name_lists_the_choices_and_is_a_key_error() -> None:
    with pytest.raises(UnknownOperatorError) as info:
        event_schema("nope")
    assert isinstance(info.value, KeyError) and info.value.field == "app"
    assert str(info.value) == (
        "app: unknown application 'nope'; choose one of clicks, fsd, heavy, traffic, wordcount "
        "(shipped or entry points of keyshift.operators), or module:Class")


def test_a_dotted_name_without_colon_gets_a_hint() -> None:
    with pytest.raises(UnknownOperatorError, match=r"did you mean keyshift\.examples\.sessions:"
                                                   r"SessionOperator\?$"):
        resolve_operator("keyshift.examples.sessions.SessionOperator")


@pytest.mark.parametrize("spec", ["", "  ", None])
def test_an_empty_spec_is_refused(spec) -> None:
    with pytest.raises(OperatorInputError, match="^app: expected an operator name"):
        resolve_operator(spec)


def test_a_broken_entry_point_names_itself(monkeypatch) -> None:
    ep = EntryPoint("mine", "no_such_module_xyz:Op", "keyshift.operators")
    monkeypatch.setattr(registry, "_operator_entry_points", lambda: {ep.name: ep})
    with pytest.raises(OperatorInputError, match=r"^app: mine: entry point mine = "
                                                 r"'no_such_module_xyz:Op' .* does not load"):
        resolve_operator("mine")


def test_bad_parameters_of_a_user_operator_name_the_field() -> None:
    with pytest.raises(OperatorInputError) as info:
        make_operator(SPEC, gap_s=0)
    assert info.value.field == "gap_s"
    with pytest.raises(OperatorInputError) as info:
        make_operator(SPEC, window=3)
    assert info.value.field == "params" and SPEC in str(info.value)


@pytest.mark.parametrize("text", [
    "STRING", "bigint", "INT", "DOUBLE", "BOOLEAN", "TIMESTAMP", "BINARY", "DECIMAL(10,2)",
    "DECIMAL", "VARCHAR(20)", "ARRAY<INT>", "ARRAY<ARRAY<STRING>>", "MAP<STRING, DOUBLE>",
    "STRUCT<a: INT, b: ARRAY<STRING>>", "STRUCT<a INT>",
])
def test_ddl_types_accepted(text: str) -> None:
    assert is_ddl_type(text)


@pytest.mark.parametrize("text", [
    "", "STRNG", "ARRAY<INT", "ARRAY<>", "MAP<STRING>", "DECIMAL(x)", "VARCHAR", "INT INT",
    "STRUCT<>", "STRUCT<a: >", "ARRAY<INT>>", None, 3,
])
def test_ddl_types_refused(text) -> None:
    assert not is_ddl_type(text)


# --- the example operator ----------------------------------------------------------------
def ev(i: int, key: str, ts: int, page: str = "home", amount: float | None = None) -> dict:
    e = {"id": f"e{i}", "key": key, "ts": ts, "page": page}
    if amount is not None:
        e["amount"] = amount
    return e


def test_sessions_close_after_the_gap_and_alert_once_per_session() -> None:
    op = SessionOperator(gap_s=10, alert_amount=50)
    feed = [
        ev(0, "u", 0), ev(1, "u", 4_000, amount=30.0), ev(2, "u", 9_000, amount=25.5),
        ev(3, "u", 12_000, amount=99.0),   # same session, already alerted
        ev(4, "u", 8_000),                 # out of order: does not rewind the session's end
        ev(5, "u", 22_001),                # 10.001 s after 12 s: closes session 0
        ev(6, "v", 22_002, amount=60.0),   # another key: its own session, its own alert
    ]
    out = [(ce.key, ce.kind, ce.event_id, json.loads(ce.detail)) for e in feed
           for ce in op.process(e, group=0)]
    assert out == [
        ("u", "big_spender", "e2", {"session": 0, "spend": 55.5}),
        ("u", "session", "e5", {"session": 0, "start": 0, "end": 12_000, "events": 5,
                                "spend": 154.5}),
        ("v", "big_spender", "e6", {"session": 0, "spend": 60.0}),
    ]
    assert op.process(ev(7, "u", 32_001), 0) == []  # exactly the gap: still open


def test_the_example_refuses_an_event_without_its_required_page() -> None:
    with pytest.raises(OperatorInputError, match="^page: missing in a sessions event"):
        SessionOperator().process({"id": "1", "key": "u", "ts": 1}, 0)


def test_generated_events_are_valid_deterministic_and_make_both_complex_events() -> None:
    events = generate(1000, keys=20, seed=3)
    assert events == generate(1000, keys=20, seed=3) != generate(1000, keys=20, seed=4)
    assert len({e["id"] for e in events + generate(10, keys=20, seed=4)}) == 1010
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    schema = SessionOperator.event_schema()
    python_type = {"STRING": str, "BIGINT": int, "DOUBLE": float}
    for e in events:
        assert set(schema.required) <= set(e) <= set(schema.names)
        assert all(isinstance(e[c.name], python_type[c.type]) for c in schema.columns
                   if c.name in e)
    op = make_operator(SPEC)
    kinds = [ce.kind for e in events for ce in op.process(e, group_of(e["key"], 64))]
    assert kinds.count("session") >= 20 and kinds.count("big_spender") >= 10


def test_main_prints_json_lines(capsys) -> None:
    assert sessions.main(["--count", "5", "--seed", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x) for x in lines] == generate(5, seed=2)


def _outputs(op, events, p):
    return [ce.identity() for e in events for ce in op.process(e, group_of(e["key"], p))]


def test_example_snapshot_restore_round_trip_gives_identical_future_outputs() -> None:
    events = generate(600, keys=12, seed=1, gap_s=5)
    p = 8
    expected = _outputs(SessionOperator(gap_s=5, alert_amount=60), events, p)
    assert expected
    a = SessionOperator(gap_s=5, alert_amount=60)
    got = _outputs(a, events[:300], p)
    b = SessionOperator(gap_s=5, alert_amount=60)
    for g in a.groups():
        b.restore(g, a.snapshot(g))
        a.drop(g)
    assert a.groups() == [] and b.groups()
    got += _outputs(b, events[300:], p)
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 299), max_size=6))
def test_example_outputs_do_not_depend_on_placement_or_batching(seed: int, cuts: list[int]):
    """Two engines; at every cut a random set of groups moves, and each batch is fed in
    order_key order (as the engines do): the outputs equal one operator's over the stream."""
    events = generate(300, keys=10, seed=seed, gap_s=3)
    p = 4
    expected = sorted(_outputs(SessionOperator(gap_s=3), events, p))
    rng = random.Random(seed)
    engines = [SessionOperator(gap_s=3) for _ in range(2)]
    owner = {g: g % 2 for g in range(p)}
    got, prev = [], 0
    for cut in sorted({*cuts, len(events)}):
        for e in sorted(events[prev:cut], key=order_key):
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


def test_the_guides_example_operator_loads_and_runs(tmp_path, monkeypatch) -> None:
    """docs/operators.md's first code block is a working operator, loaded as module:Class."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "operators.md").read_text()
    code = guide.split("```python\n", 1)[1].split("```", 1)[0]
    name = f"guide_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = resolve_operator(f"{name}:Threshold")
    assert spec.schema.ddl().endswith("`value` DOUBLE NOT NULL, `unit` STRING")
    op = spec.build(limit=5)
    readings = [3.0, 6.0, 7.0, 2.0, 9.0]
    out = [ce.kind for i, v in enumerate(readings)
           for ce in op.process({"id": str(i), "key": "s1", "ts": i, "value": v}, 0)]
    assert out == ["above", "above"]
