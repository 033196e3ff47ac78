"""Issue 26 item 1: operator state decodes only data.

The default state codec round-trips state values exactly (hypothesis, types included) and
the shipped operators' states; a crafted pickle — an object whose ``__reduce__`` creates a
marker file when unpickled — is refused by ``restore`` and by the engines' durable state
reader, and the marker never appears; ``keyshift state upgrade`` refuses pickled files
without ``--trust-pickled-state`` and converts them with it.
"""

from __future__ import annotations

import json
import math
import pickle
import random
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps import Operator, OperatorInputError, make_operator
from keyshift.apps.declaration import DeclarationError, check_declaration
from keyshift.apps.state_codec import (
    DEFAULT_CODEC,
    HEADER,
    PickledStateError,
    StateCodecError,
    decode_state,
    encode_state,
)
from keyshift.cli import main
from keyshift.groups import group_of
from keyshift.streaming import engine_state
from keyshift.streaming.engine_state import (
    DurableState,
    PickledStateFileError,
    open_store,
    read_moved,
    upgrade,
)


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the file's existence proves code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted(marker: Path, protocol: int = pickle.HIGHEST_PROTOCOL) -> bytes:
    """What an attacker writes where a snapshot of key → state is expected."""
    return pickle.dumps({"k": Payload(marker)}, protocol=protocol)


def old_file(states: dict[int, bytes | None]) -> bytes:
    """A durable state file as keyshift wrote it before issue 26 (format 1: pickles)."""
    parts = [b"KSST\x01"]
    for g, data in sorted(states.items()):
        parts.append(engine_state._REC.pack(g, -1 if data is None else len(data)))
        parts.append(data or b"")
    return b"".join(parts)


def same(a, b) -> bool:
    """Equal and of the same types all the way down (a tuple is not a list, -0.0 not 0.0,
    a deque keeps its maxlen, NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                      == math.copysign(1, b))
    if isinstance(a, deque) and a.maxlen != b.maxlen:
        return False
    if isinstance(a, (list, tuple, deque)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):  # insertion order is kept, so compare item by item
        return len(a) == len(b) and all(same(ka, kb) and same(va, vb) for (ka, va), (kb, vb)
                                        in zip(a.items(), b.items(), strict=True))
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    return a == b


# --- the codec -------------------------------------------------------------------------------
_atoms = (st.none() | st.booleans() | st.integers() | st.text() | st.binary()
          | st.floats(allow_nan=False))
_hashable = st.recursive(
    _atoms, lambda c: st.lists(c, max_size=4).map(tuple) | st.frozensets(c, max_size=4),
    max_leaves=12)
_values = st.recursive(
    _atoms | st.floats(),  # NaN as a value (never a key: NaN keys do not compare)
    lambda c: (st.lists(c, max_size=4)
               | st.lists(c, max_size=4).map(tuple)
               | st.dictionaries(_hashable, c, max_size=4)
               | st.sets(_hashable, max_size=4)
               | st.frozensets(_hashable, max_size=4)
               | st.tuples(st.none() | st.integers(0, 5), st.lists(c, max_size=6)).map(
                   lambda t: deque(t[1], maxlen=t[0]))),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(value=_values)
def test_state_values_round_trip_exactly(value) -> None:
    data = encode_state(value)
    assert data.startswith(HEADER)
    assert same(decode_state(data), value)


@settings(max_examples=100, deadline=None)
@given(states=st.dictionaries(st.text(max_size=8) | st.integers() | st.tuples(st.text()),
                              _values, max_size=5))
def test_a_group_map_round_trips_through_snapshot_and_restore(states) -> None:
    op = make_operator("wordcount")
    op._groups[3] = states  # any data the codec keeps, under keys of any hashable type
    other = make_operator("wordcount")
    other.restore(3, op.snapshot(3))
    assert same(other._groups.get(3, {}), states)


def test_edges_of_the_codec() -> None:
    for n in (2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**40, -(10**40)):
        assert same(decode_state(encode_state(n)), n)
    fsd = deque([frozenset({"a", "b"}), frozenset()], maxlen=3)
    back = decode_state(encode_state(fsd))
    back.extend([frozenset({"c"}), frozenset({"d"})])  # the maxlen still bounds it
    assert len(back) == 3 and back[0] == frozenset() and back.maxlen == 3
    assert decode_state(encode_state("\ud800 lone surrogate")) == "\ud800 lone surrogate"
    from collections import Counter, OrderedDict, defaultdict

    for bad in (OrderedDict(a=1), defaultdict(list), Counter("ab"), object(), Payload):
        with pytest.raises(StateCodecError, match="not state data"):
            encode_state({"k": bad})
    with pytest.raises(StateCodecError, match="version 2"):
        decode_state(b"KSSC\x02" + encode_state(1)[len(HEADER):])
    with pytest.raises(StateCodecError, match="damaged"):
        decode_state(encode_state({"a": [1, 2, 3]})[:-2])
    with pytest.raises(StateCodecError, match="no KSSC header"):
        decode_state(b'{"json": 1}')
    import msgpack

    with pytest.raises(StateCodecError, match="unknown ext type 42"):
        decode_state(HEADER + msgpack.packb(msgpack.ExtType(42, b"")))


def test_a_state_the_codec_cannot_keep_fails_the_snapshot_naming_it() -> None:
    op = make_operator("wordcount")
    op._groups[2] = {"w": object()}
    with pytest.raises(OperatorInputError, match="group 2: .*builtins.object is not state"):
        op.snapshot(2)


# --- the shipped operators' states -----------------------------------------------------------
def _events(app: str, n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    words = ["storm", "rain", "sun", "wind", "snow"]
    out = []
    for i in range(n):
        k = rng.choice(words)
        base = {"id": f"e{i:04d}", "key": k, "ts": i * 700 - 20_000}  # negative ts too
        if app == "fsd":
            base["text"] = " ".join(rng.sample(words, 3))
        elif app == "traffic":
            base.update(vehicle_id=f"v{rng.randrange(4)}", lon=-6.26, lat=53.35,
                        delay_s=rng.choice([0, 500]))
        elif app == "clicks":
            base["url"] = f"/{rng.choice(words)}"
        else:
            base["word"] = k
        out.append(base)
    return out


@pytest.mark.parametrize("app", ["fsd", "traffic", "clicks", "wordcount", "heavy"])
def test_shipped_operator_states_round_trip_with_their_types(app: str) -> None:
    params = {"heavy": {"work_us": 1}, "clicks": {"length": 3}}.get(app, {})
    op = make_operator(app, **params)
    for e in _events(app, 120):
        op.process(e, group_of(e["key"], 4))
    assert op.groups()
    other = make_operator(app, **params)
    for g in op.groups():
        other.restore(g, op.snapshot(g))
        assert same(other._groups[g], op._groups[g]), (app, g)
    if app == "fsd":
        state = next(iter(other._groups[other.groups()[0]].values()))
        assert type(state) is deque and state.maxlen == op.history
        assert all(type(t) is frozenset for t in state)


# --- crafted pickles are refused, never run --------------------------------------------------
def test_the_payload_runs_code_when_unpickled(tmp_path) -> None:
    marker = tmp_path / "proof"
    pickle.loads(crafted(marker))
    assert marker.exists()


def test_restore_refuses_a_crafted_pickle_without_running_it(tmp_path) -> None:
    marker = tmp_path / "ran"
    op = make_operator("fsd")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(OperatorInputError, match="group 7: cannot decode snapshot") as exc:
            op.restore(7, crafted(marker, protocol))
        assert "\n" not in str(exc.value)
    with pytest.raises(OperatorInputError, match="keyshift state upgrade RUN_ID "
                       "--trust-pickled-state"):
        op.restore(7, crafted(marker))
    with pytest.raises(PickledStateError):
        DEFAULT_CODEC.decode(crafted(marker))
    assert op.groups() == [] and not marker.exists()


def test_the_durable_reader_refuses_a_pickled_file_naming_it(tmp_path) -> None:
    marker = tmp_path / "ran"
    uri = str(tmp_path / "state")
    path = tmp_path / "state" / "engine-0000" / "cl-000000000001.kss"
    path.parent.mkdir(parents=True)
    path.write_bytes(old_file({5: crafted(marker), 6: None}))
    durable = DurableState(uri)
    with pytest.raises(PickledStateFileError) as exc:
        durable.read(0, 1)
    msg = str(exc.value)
    assert "cl-000000000001.kss" in msg and "keyshift state upgrade RUN_ID" in msg
    assert "\n" not in msg
    with pytest.raises(PickledStateFileError):
        open_store(tmp_path / "cache", durable, 0, 2, None)  # a rebuilt cache reads it
    with pytest.raises(PickledStateFileError):
        read_moved(tmp_path / "cache", durable, 0, 2, None, [5])  # a migration reads it
    assert not marker.exists()


def test_pickled_bytes_inside_a_current_file_are_refused_by_restore(tmp_path) -> None:
    """A current-format file carries each group's bytes as they are; the operator's codec is
    what decodes them, and it refuses a pickle."""
    marker = tmp_path / "ran"
    durable = DurableState(str(tmp_path / "state"))
    durable.write_changes(0, 1, {5: crafted(marker)})
    state = durable.read(0, 1)
    with pytest.raises(OperatorInputError, match="group 5"):
        make_operator("wordcount").restore(5, state[5])
    assert not marker.exists()


def test_nothing_in_keyshift_unpickles_outside_the_trusted_upgrade() -> None:
    root = Path(__file__).resolve().parents[3]
    found = []
    for folder in ("keyshift", "streaming", "lakehouse", "jobs", "models", "bench", "examples"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for name in ("pickle.loads", "pickle.load(", "cPickle", "Unpickler"):
                if name in text:
                    found.append(f"{path.relative_to(root)}: {name}")
    # upgrade(), behind the flag, through an Unpickler that resolves only the codec's
    # containers, within a bound on what it allocates (state_codec.unpickle_data)
    assert found == ["keyshift/apps/state_codec.py: Unpickler"]


# --- a declared codec ------------------------------------------------------------------------
class _JsonCodec:
    def encode(self, value):
        return b"TJS1" + json.dumps(value).encode()

    def decode(self, data):
        if not data.startswith(b"TJS1"):
            raise ValueError("not TJS1 state")
        return json.loads(data[4:])


class _Counting(Operator):
    app = "counting"
    state_codec = _JsonCodec()

    def _new_state(self):
        return [0]

    def _on_event(self, state, event):
        state[0] += 1
        return []


def test_an_operator_declares_its_own_codec() -> None:
    check_declaration(_Counting)
    a = _Counting()
    a.process({"id": "1", "key": "k", "ts": 1}, 0)
    data = a.snapshot(0)
    assert data == b'TJS1{"k": [1]}'
    b = _Counting()
    b.restore(0, data)
    assert b._groups[0] == {"k": [1]}
    with pytest.raises(OperatorInputError, match="group 0: .*not TJS1 state"):
        b.restore(0, encode_state({"k": [1]}))
    bad = type("Bad", (_Counting,), {"state_codec": object()})
    with pytest.raises(DeclarationError, match="state_codec must be"):
        check_declaration(bad)


# --- keyshift state upgrade ------------------------------------------------------------------
def _old_run(home: Path, run: str, marker: Path | None = None) -> Path:
    root = home / "warehouse" / "_engine_state" / run
    fsd = {"storm": deque([frozenset({"a", "b"}), frozenset({"c"})], maxlen=50)}
    files = {
        "engine-0000/base-000000000000.kss": old_file({1: pickle.dumps(fsd, protocol=5)}),
        "engine-0000/cl-000000000001.kss": old_file(
            {1: None, 2: pickle.dumps({"rain": deque([frozenset({"x"})], maxlen=50)},
                                      protocol=5)}),
        "engine-0001/cl-000000000001.kss": engine_state.encode(
            {3: encode_state({"sun": deque([], maxlen=50)})}),  # already current
    }
    if marker is not None:
        files["engine-0001/cl-000000000002.kss"] = old_file({4: crafted(marker)})
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)
    return root


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("KEYSHIFT_CONFIG", raising=False)
    for name in list(__import__("os").environ):
        if name.startswith("KEYSHIFT_") and name != "KEYSHIFT_CACHE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_upgrade_refuses_without_the_flag_and_unpickles_nothing(home, tmp_path, capsys) -> None:
    marker = tmp_path / "ran"
    root = _old_run(home, "r1", marker)
    before = {p: p.read_bytes() for p in root.rglob("*.kss")}
    assert main(["state", "upgrade", "r1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "3 engine state file(s) of run 'r1' are pickled" in err
    assert "--trust-pickled-state" in err
    assert {p: p.read_bytes() for p in root.rglob("*.kss")} == before
    assert not marker.exists()
    assert main(["state", "upgrade", "nope"]) == 2
    assert "no engine state files of run 'nope'" in capsys.readouterr().err


def test_upgrade_with_the_flag_converts_a_run_for_its_operator(home, capsys) -> None:
    root = _old_run(home, "r2")
    (home / "runs" / "r2").mkdir(parents=True)
    (home / "runs" / "r2" / "job.json").write_text(json.dumps(
        {"app": "fsd", "engine_state": str(root)}))
    assert main(["state", "upgrade", "r2", "--trust-pickled-state", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["converted"], out["already_current"], out["codec"]) == (2, 1, "fsd's codec")
    assert all(p.read_bytes().startswith(b"KSST\x03") for p in root.rglob("*.kss"))
    durable = DurableState(str(root))
    op = make_operator("fsd")
    for e in (0, 1):
        for g, data in durable.read(e, 1).items():
            op.restore(g, data)
    assert op.groups() == [2, 3]
    rain = op._groups[2]["rain"]
    assert type(rain) is deque and rain.maxlen == 50 and rain[0] == frozenset({"x"})
    assert durable.read(0, 0)[1].startswith(HEADER)  # the base converted too
    # again: nothing left to convert, and no flag needed to say so
    assert main(["state", "upgrade", "r2"]) == 0
    assert "0 engine state file(s) converted" in capsys.readouterr().out


def test_a_trusted_upgrade_still_decodes_only_data(tmp_path) -> None:
    """Even with --trust-pickled-state a pickle that would run code is refused, naming what
    it names, and nothing runs."""
    root = tmp_path / "state"
    marker = tmp_path / "ran"
    (root / "engine-0000").mkdir(parents=True)
    (root / "engine-0000" / "cl-000000000001.kss").write_bytes(old_file({4: crafted(marker)}))
    with pytest.raises(engine_state.StateFormatError,
                       match=r"group 4: .*io\.open, which is not state data"):
        upgrade(str(root), DEFAULT_CODEC, trust_pickled_state=True)
    assert not marker.exists()


def test_upgrade_names_a_state_the_codec_cannot_keep(tmp_path) -> None:
    from collections import OrderedDict

    root = tmp_path / "state"
    (root / "engine-0000").mkdir(parents=True)
    (root / "engine-0000" / "cl-000000000001.kss").write_bytes(
        old_file({9: pickle.dumps({"k": OrderedDict(a=1)})}))
    found = upgrade(str(root), DEFAULT_CODEC, trust_pickled_state=False)
    assert (len(found.pickled), found.converted) == (1, [])
    with pytest.raises(engine_state.StateFormatError, match="group 9: .*OrderedDict"):
        upgrade(str(root), DEFAULT_CODEC, trust_pickled_state=True)


def test_a_module_path_in_job_json_is_never_imported(home, tmp_path, capsys,
                                                     monkeypatch) -> None:
    """job.json is a file beside the warehouse: the operator it records is looked up among
    the shipped ones and installed entry points, never imported as ``module:Class``."""
    root = _old_run(home, "r3")
    marker = tmp_path / "imported"
    evil = tmp_path / "evilmod.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\nclass Op: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (home / "runs" / "r3").mkdir(parents=True)
    (home / "runs" / "r3" / "job.json").write_text(json.dumps(
        {"app": "evilmod:Op", "engine_state": str(root)}))
    assert main(["state", "upgrade", "r3", "--trust-pickled-state"]) == 2
    err = capsys.readouterr().err
    assert "'evilmod:Op', which is not a shipped operator" in err and "--app" in err
    assert not marker.exists()
    # named on the command line, a shipped operator converts as before
    assert main(["state", "upgrade", "r3", "--trust-pickled-state", "--app", "fsd"]) == 0
