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
state upgrade RUN_ID --trust-pickled-state`` rewrites a run's durable engine state, reading
each pickle with :func:`unpickle_data` only: data, and no more memory than its size allows.
"""

from __future__ import annotations

import io
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


# --- the old pickled form, read for the trusted upgrade only ----------------------------------
# What a pickled state of the codec's kinds may name (protocols 2-5): the containers the
# state codec keeps, and the latin-1 helper protocol 2 writes bytes with. Nothing else.
PICKLE_DATA_CLASSES = frozenset({
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"),
    ("collections", "deque"), ("_codecs", "encode"),
})
# how many bytes the data of a pickle of n bytes may take unpickled, shared objects counted
# each time they occur (the encoder writes each occurrence): a list that holds another list
# twice, 60 levels deep, is a 300-byte pickle of 2^60 elements
EXPANSION, EXPANSION_FLOOR = 64, 1 << 20
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_LATIN1 = frozenset({"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"})


def _bytearray(*args: Any) -> bytearray:
    """``bytearray`` as a pickle of one calls it (from bytes, or a latin-1 str under
    protocol 2), never from a size: ``bytearray(3_000_000_000)`` is 54 bytes of pickle."""
    if len(args) == 1 and type(args[0]) in (bytes, bytearray):
        return bytearray(args[0])
    if len(args) == 2 and type(args[0]) is str and str(args[1]).lower() in _LATIN1:
        return bytearray(args[0], "latin-1")
    if not args:
        return bytearray()
    what = (f"a bytearray of {args[0]:,} bytes" if type(args[0]) is int
            else f"bytearray({', '.join(type(a).__name__ for a in args)})")
    raise StateCodecError(f"the pickle asks for {what}, which no pickled state holds; "
                          "refused before making it")


def _latin1(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocol 2 calls it for bytes: a str to latin-1, nothing else
    (another codec name would import a module of ``encodings``)."""
    if type(obj) is not str or str(encoding).lower() not in _LATIN1:
        raise StateCodecError(f"the pickle encodes with {encoding!r}, which no pickled state "
                              "does; refused")
    return obj.encode("latin-1", errors)


_PICKLE_CALLS = {("builtins", "bytearray"): _bytearray, ("_codecs", "encode"): _latin1}


def _scan(data: bytes) -> None:
    """The pickle's opcodes read without running any (:func:`pickletools.genops`): a length
    beyond the data, an opcode that is none, a memo index or frame beyond the pickle's size
    (the unpickler makes room for them before it reads on) is refused here."""
    import pickletools

    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name in _MEMO_PUTS and int(arg) > len(data):
                raise StateCodecError(f"memo index {int(arg):,} in a pickle of {len(data)} "
                                      "bytes; refused before making room for it")
            if op.name == "FRAME" and int(arg) > len(data):
                raise StateCodecError(f"a frame of {int(arg):,} bytes in a pickle of "
                                      f"{len(data)} bytes; refused")
    except StateCodecError:
        raise
    except Exception as exc:  # genops: an unknown opcode, a length beyond the data, no STOP
        raise StateCodecError(f"not a whole pickle ({exc})") from None


def _within(value: Any, limit: int) -> None:
    """Refuse data larger than ``limit`` bytes with each shared object counted each time
    it occurs; walks at most ``limit`` steps whatever the value (a list that holds itself)."""
    size, todo = 0, [value]
    while todo:
        v = todo.pop()
        size += 8
        if isinstance(v, str | bytes | bytearray):
            size += len(v)
        elif isinstance(v, int):
            size += v.bit_length() // 8
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list | tuple | set | frozenset | deque):
            todo.extend(v)
        if size > limit:
            raise StateCodecError(f"the pickled state takes more than {limit:,} bytes as data "
                                  "(shared parts counted each time they occur); refused")


def unpickle_data(data: bytes) -> Any:
    """A pickled state (protocols 2-5) as data, for ``keyshift state upgrade
    --trust-pickled-state``: the opcodes are checked before any runs (:func:`_scan`), the
    Unpickler resolves no class but the codec's containers (:data:`PICKLE_DATA_CLASSES`),
    ``bytearray`` is made from bytes only, and the result may take at most
    ``EXPANSION`` × its size (at least ``EXPANSION_FLOOR``). Trusting the writer is not
    trusting the bytes: a damaged or forged pickle is :class:`StateCodecError` in one line,
    having run nothing and allocated no more than that bound."""
    import pickle

    data = bytes(data)
    _scan(data)

    class DataOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            module = "builtins" if module == "__builtin__" else module  # protocol 2's name
            if (module, name) not in PICKLE_DATA_CLASSES:
                raise StateCodecError(f"the pickled state names {module}.{name}, which is not "
                                      "state data; refused (nothing of it was run)")
            return _PICKLE_CALLS.get((module, name)) or super().find_class(module, name)

        def persistent_load(self, pid: Any) -> Any:
            raise StateCodecError("the pickle refers to a persistent object; refused")

    try:
        value = DataOnly(io.BytesIO(data)).load()
    except StateCodecError:
        raise
    except Exception as exc:  # truncated, a bad memo reference, a call with wrong arguments
        first = (str(exc).splitlines() or [""])[0][:120]
        raise StateCodecError(f"not a readable pickle ({type(exc).__name__}: {first})") \
            from None
    _within(value, max(EXPANSION * len(data), EXPANSION_FLOOR))
    return value


def encode_state(value: Any) -> bytes:
    """``DEFAULT_CODEC.encode``."""
    return DEFAULT_CODEC.encode(value)


def decode_state(data: bytes) -> Any:
    """``DEFAULT_CODEC.decode``."""
    return DEFAULT_CODEC.decode(data)
