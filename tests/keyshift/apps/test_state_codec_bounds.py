"""Issue 46 item 7: ``keyshift state upgrade --trust-pickled-state`` reads a pickle as data
within a bound. A 55-byte pickle of ``bytearray(3e9)`` took 3 GB before it was refused; a
memo index or a declared length can make the unpickler reserve as much, shared references
make a tiny pickle encode to 2^60 elements, and a malformed pickle was a traceback. Each is
now one line (exit 2) naming the file and the group, having allocated nothing of that size:
the command runs in a child limited to 1 GB of address space, where any of them would fail
with a MemoryError (or be killed) instead of saying so.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from keyshift.apps.state_codec import StateCodecError, unpickle_data
from keyshift.streaming import engine_state


class _Bytes:
    def __reduce__(self):
        return (bytearray, (3_000_000_000,))


class _SetOfInt:
    def __reduce__(self):
        return (set, (5,))


def _laughs(depth: int = 60) -> list:
    a: list = []
    for _ in range(depth):
        a = [a, a]
    return a


BOMB = pickle.dumps({"k": _Bytes()}, protocol=4)
BOMBS = {
    "bytearray": (BOMB, "asks for a bytearray of 3,000,000,000 bytes"),
    # protocol 5: a bytearray of 3e9 bytes declared, one byte there
    "bytearray8": (b"\x80\x05\x96" + (3_000_000_000).to_bytes(8, "little") + b"x.",
                   "not a whole pickle"),
    # a memo slot 4e9 entries up: the unpickler grows its memo table to reach it
    "memo": (b"\x80\x04}r" + (4_000_000_000).to_bytes(4, "little") + b".",
             "memo index 4,000,000,000 in a pickle of 9 bytes"),
    "laughs": (pickle.dumps({"k": _laughs()}, protocol=4), "takes more than 1,048,576 bytes"),
}
MALFORMED = {
    "truncated": pickle.dumps({"k": [1, 2, 3]}, protocol=4)[:-4],
    "garbage": b"\x80\x04not a pickle at all",
    "bad memo reference": b"\x80\x04h\x07.",
    "wrong arguments": pickle.dumps({"k": _SetOfInt()}, protocol=2),
}


def _old_file(states: dict[int, bytes]) -> bytes:
    """A durable state file as keyshift wrote it before issue 26 (format 1: pickles)."""
    parts = [b"KSST\x01"]
    for g, data in sorted(states.items()):
        parts.append(engine_state._REC.pack(g, len(data)))
        parts.append(data)
    return b"".join(parts)


def _home(tmp_path: Path, run: str, data: bytes) -> Path:
    home = tmp_path / "home"
    f = home / "warehouse" / "_engine_state" / run / "engine-0000" / "cl-000000000001.kss"
    f.parent.mkdir(parents=True)
    f.write_bytes(_old_file({4: data}))
    return home


_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from keyshift.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _upgrade_in_a_child(home: Path, run: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KEYSHIFT_") or k == "KEYSHIFT_CACHE"}
    env["KEYSHIFT_HOME"] = str(home)
    return subprocess.run([sys.executable, "-c", _CHILD, "state", "upgrade", run,
                           "--trust-pickled-state"], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_pickle_bomb_is_refused_before_it_allocates(tmp_path, kind) -> None:
    data, says = BOMBS[kind]
    home = _home(tmp_path, "r", data)
    got = _upgrade_in_a_child(home, "r")
    assert got.returncode == 2, got.stderr
    assert got.stdout == "" and got.stderr.count("\n") == 1, got.stderr
    assert got.stderr.startswith("keyshift state: ") and "cl-000000000001.kss: group 4: " \
        in got.stderr and says in got.stderr, got.stderr
    # nothing converted: the file is as it was
    assert (home / "warehouse" / "_engine_state" / "r" / "engine-0000" /
            "cl-000000000001.kss").read_bytes() == _old_file({4: data})


def test_the_55_byte_bomb_is_55_bytes() -> None:
    assert len(BOMB) == 55
    with pytest.raises(StateCodecError, match="bytearray of 3,000,000,000 bytes"):
        unpickle_data(BOMB)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_pickle_is_one_line_without_a_traceback(tmp_path, monkeypatch, capsys,
                                                            kind) -> None:
    from keyshift.cli import main

    for name in list(os.environ):
        if name.startswith("KEYSHIFT_") and name != "KEYSHIFT_CACHE":
            monkeypatch.delenv(name)
    home = _home(tmp_path, "r", MALFORMED[kind])
    monkeypatch.setenv("KEYSHIFT_HOME", str(home))
    assert main(["state", "upgrade", "r", "--trust-pickled-state"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert "cl-000000000001.kss: group 4: not a" in err, err


def test_pickled_states_of_every_kind_the_codec_keeps_still_read() -> None:
    value = {"s": {1, 2}, "f": frozenset({"a"}), "d": deque([b"x", bytearray(b"yz")], maxlen=4),
             "b": bytearray(b"\x00\xff"), "e": bytearray(), "t": (1, "x"), "big": 10**40,
             "shared": ["label"] * 3}
    for protocol in (2, 3, 4, 5):
        assert unpickle_data(pickle.dumps(value, protocol=protocol)) == value
