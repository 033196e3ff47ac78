"""How an operator's per-group state becomes bytes: the **state codec** (issue 26 item 1).

Snapshots travel between executors and runs and lie in the warehouse (the engines' durable
base and changelog files, the ``state_snapshots`` rows of a migration), so whoever can write
there chooses the bytes an engine restores. The codec therefore decodes *data only*: it never
imports a module or constructs a class named by the bytes, which the pickle that keyshift
used before did.

:data:`DEFAULT_CODEC` (:class:`MsgpackStateCodec`) writes a 5-byte header — ``KSSC`` and a
format version (1) — then one MessagePack value. These round-trip exactly, type included:
``None``, ``bool``, ``int`` (any size: beyond 64 bits as a signed big-endian ext), ``float``,
``str`` (lone surrogates too), ``bytes``, ``list``, ``tuple``, ``dict`` (keys of any of these
hashable types, not only strings), ``set``, ``frozenset`` and ``collections.deque`` (its
``maxlen`` kept). The types MessagePack lacks are ext types (:data:`EXT`). Anything else,
subclasses included (an ``OrderedDict``, a ``defaultdict``, an enum, a dataclass), is refused
when the snapshot is made, naming the type: it would not come back as itself. (A
``bytearray`` or ``memoryview`` is written as ``bytes`` and comes back as ``bytes``.)

An operator that keeps other state declares its own codec (``state_codec``, an object with
``encode(value) -> bytes`` and ``decode(bytes) -> value``; docs/operators.md, "State codec").

Bytes in the old pickled form are refused unread (:class:`PickledStateError`); ``keyshift
state upgrade RUN_ID --trust-pickled-state`` rewrites a run's durable engine state.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol, runtime_checkable

import msgpack

HEADER_MAGIC = b"KSSC"
FORMAT_VERSION = 1
HEADER = HEADER_MAGIC + bytes([FORMAT_VERSION])

UPGRADE_HINT = ("keyshift state upgrade RUN_ID --trust-pickled-state rewrites a run's durable "
                "engine state in the current format (only if you trust whoever could write it)")

# ext type codes of the default codec (0-127 are the application's)
EXT_TUPLE, EXT_SET, EXT_FROZENSET, EXT_DEQUE, EXT_BIGINT = 1, 2, 3, 4, 5
EXT = {EXT_TUPLE: "tuple", EXT_SET: "set", EXT_FROZENSET: "frozenset", EXT_DEQUE: "deque",
       EXT_BIGINT: "int beyond 64 bits"}


class StateCodecError(ValueError):
    """State bytes the codec cannot read, or a state value it cannot write."""


class PickledStateError(StateCodecError):
    """Bytes in the pickled form of an older keyshift: refused, never unpickled."""


@runtime_checkable
class StateCodec(Protocol):
    """What an operator's ``state_codec`` is: one group's ``{key: state}`` map to bytes and
    back. ``decode`` must construct nothing the bytes choose (no pickle) and raise
    ``ValueError`` on bytes it did not write."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


def looks_pickled(data: bytes) -> bool:
    """Whether ``data`` starts as a pickle of protocol 2 or later (what keyshift wrote)."""
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


def _default(obj: Any) -> msgpack.ExtType:
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(EXT_TUPLE, _pack(list(obj)))
    if t is frozenset:
        return msgpack.ExtType(EXT_FROZENSET, _pack(list(obj)))
    if t is set:
        return msgpack.ExtType(EXT_SET, _pack(list(obj)))
    if t is deque:
        return msgpack.ExtType(EXT_DEQUE, _pack([obj.maxlen, list(obj)]))
    if t is int:  # beyond msgpack's 64-bit range (msgpack handles the rest itself)
        n = (obj.bit_length() + 8) // 8  # room for the sign bit
        return msgpack.ExtType(EXT_BIGINT, obj.to_bytes(n, "big", signed=True))
    raise TypeError(
        f"{t.__module__}.{t.__qualname__} is not state data the default codec keeps "
        "(None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset, deque); "
        "keep plain data or declare a state_codec"
    )


def _pack(value: Any) -> bytes:
    # strict_types: a tuple, a subclass of dict/list/int/str reaches _default instead of
    # being written as its base type (it would come back as another type)
    return msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True,
                         unicode_errors="surrogatepass")


def _ext(code: int, data: bytes) -> Any:
    if code not in EXT:
        raise StateCodecError(f"unknown ext type {code}")
    if code == EXT_BIGINT:
        return int.from_bytes(data, "big", signed=True)
    items = _unpack(data)
    if not isinstance(items, list):
        raise StateCodecError(f"ext {EXT.get(code, code)}: not a list inside")
    if code == EXT_TUPLE:
        return tuple(items)
    if code == EXT_FROZENSET:
        return frozenset(items)
    if code == EXT_SET:
        return set(items)
    if code == EXT_DEQUE:
        if len(items) != 2 or not (items[0] is None or type(items[0]) is int) \
                or not isinstance(items[1], list):
            raise StateCodecError("ext deque: not [maxlen, items]")
        return deque(items[1], maxlen=items[0])
    raise AssertionError(code)  # every code of EXT is handled above


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext, raw=False, use_list=True,
                           strict_map_key=False, unicode_errors="surrogatepass")


class MsgpackStateCodec:
    """The default codec: :data:`HEADER`, then one MessagePack value (see the module)."""

    name = "msgpack-v1"

    def encode(self, value: Any) -> bytes:
        try:
            return HEADER + _pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise StateCodecError(f"cannot encode state: {exc}") from None

    def decode(self, data: bytes) -> Any:
        data = bytes(data)
        if not data.startswith(HEADER_MAGIC):
            if looks_pickled(data):
                raise PickledStateError(
                    "pickled state of an older keyshift, refused unread: " + UPGRADE_HINT)
            raise StateCodecError("not keyshift state (no KSSC header)")
        if len(data) < len(HEADER) or data[len(HEADER_MAGIC)] != FORMAT_VERSION:
            version = data[len(HEADER_MAGIC)] if len(data) > len(HEADER_MAGIC) else None
            raise StateCodecError(f"state format version {version}; this keyshift reads "
                                  f"{FORMAT_VERSION}")
        try:
            return _unpack(data[len(HEADER):])
        except StateCodecError:
            raise
        except Exception as exc:  # truncated, extra data, bad UTF-8, an unhashable key...
            raise StateCodecError(f"damaged state ({type(exc).__name__}: {exc})") from None


DEFAULT_CODEC = MsgpackStateCodec()


def encode_state(value: Any) -> bytes:
    """``DEFAULT_CODEC.encode``."""
    return DEFAULT_CODEC.encode(value)


def decode_state(data: bytes) -> Any:
    """``DEFAULT_CODEC.decode``."""
    return DEFAULT_CODEC.decode(data)
