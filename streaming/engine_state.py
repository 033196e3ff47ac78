"""Where an engine's working state lives: durable on the warehouse filesystem, cached on the
executor that last ran the engine.

Spark promises no task placement: engine *e*'s task may run on any executor in any batch,
and an executor may vanish. So the state that counts is durable off the executor, in a
per-engine changelog on the same filesystem as the Delta warehouse (any URI that
``pyarrow.fs`` speaks: local paths, ``file:``, ``s3a:``/``s3:``, ``hdfs:``, ``gs:``,
``abfss:``)::

    <state_uri>/engine-0003/base-000000000200.kss   every group's state after batch 200
    <state_uri>/engine-0003/cl-000000000201.kss     the groups batch 201 changed (or dropped)
    <state_uri>/engine-0003/cl-000000000202.kss     ...

Each engine task appends one changelog file for its batch (only the groups it touched,
moved in or released), which is the same idea as Kafka Streams' changelog topics and
Flink's incremental checkpoints. Every ``compact_every`` batches the task writes a base
file and deletes what the base *before* it made redundant (a re-executed batch b needs the
state as of b−1, so one older base and its changelogs are always kept).

The local SQLite file (:class:`EngineStore`, under the executor's Spark files directory)
is only a cache: it carries a random ``cache_id`` and the last batch it applied. The driver
hands every task the ``cache_id`` that the previous batch's task of the same engine
reported. A task that finds that very cache, current to b−1 (or to b: a retry of this
batch), uses it; anything else (another executor, a stale cache, a driver restart) rebuilds
the cache from the durable files first. So the common batch reads nothing remote, and a
moved task is correct, not silently empty.

A file starts with ``KSST`` and its format version. Version 3 (issue 26 item 2) is written
now: a header naming the file's engine, batch and kind, the batch of the durable file it
follows in the engine's chain (``prev``) and the length of its records, then the records
(each group's state as the operator's ``state_codec`` wrote it, :mod:`keyshift.apps.state_codec`:
data only), then an xxHash64 of everything before it. A torn, truncated or altered file, or
one under another file's name, is :class:`DamagedStateFileError`, naming run, engine, batch
and file (:func:`decode`). Version 2 (issue 26 item 1, the same records without header and
checksum) is still read, as before: unchecked. Version 1, written by keyshift before issue
26, held pickles: such a file is refused unread, naming it, and ``keyshift state upgrade
RUN_ID --trust-pickled-state`` (:func:`upgrade`) rewrites a run's files for whoever trusts
their origin.

What a damaged file costs (:meth:`DurableState.read`, docs/architecture.md "Integrity of
durable files"): a damaged or missing *base* is rebuilt from the base before it and its
changelogs, which compaction keeps for exactly this (a retry needs them too), and rewritten;
a damaged or missing *changelog* of a batch whose offsets Spark committed cannot be rebuilt
(Spark replays only the batch it died in, and the changelog is the only record of that
batch's state changes), so the read stops with one line naming the file. The changelog of
the batch being re-executed is never read: Kafka replays that batch.
"""

from __future__ import annotations

import os
import re
import sqlite3
import struct
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import xxhash

from keyshift.apps.state_codec import UPGRADE_HINT
from keyshift.lakehouse.storage import filesystem, write_atomically

_MAGIC = b"KSST\x03"  # header + records + xxh64 (issue 26 item 2)
_MAGIC_V2 = b"KSST\x02"  # issue 26 item 1: records only, no checksum (still read, unchecked)
_MAGIC_PICKLED = b"KSST\x01"  # keyshift before issue 26: each group's state a pickle
_REC = struct.Struct(">iq")  # group, length (-1: the group was dropped)
# engine, batch, kind (0 base, 1 changelog), prev, length of the records
_HEAD = struct.Struct(">iqBqQ")
_SUM = 8  # the trailing xxHash64 (big-endian) of magic, header and records
_KINDS = ("base", "cl")
_FILE = re.compile(r"^(base|cl)-(\d{12})\.kss$")
NO_PREV = -1  # ``prev`` of an engine's first file: its state was empty before
UNKNOWN_PREV = -2  # ``prev`` not known to the writer (tests, upgrade): no chain check
_HEAD_GROUP = -1  # the cache's row (not a key group) holding the engine's durable head


class StateFormatError(ValueError):
    """A durable state file that is not one keyshift wrote (or was cut short)."""


_LOST_CHANGES = ("batch {b}'s state changes exist nowhere else (Spark replays no committed "
                 "batch): restore the file and restart, or start a new run id")


class _BaseDamaged(Exception):
    """A damaged or missing base: :meth:`DurableState.read_chain` falls back (internal)."""

    def __init__(self, error: StateFormatError) -> None:
        super().__init__(str(error))
        self.error = error


class PickledStateFileError(StateFormatError):
    """A durable state file of an older keyshift, whose groups' states are pickles: refused
    unread (:func:`upgrade` converts it where the user trusts it)."""


# -- the durable changelog --------------------------------------------------------------
class DamagedStateFileError(StateFormatError):
    """A durable state file that is torn, truncated, altered, under another file's name, or
    missing where the chain of the engine's files says one should be. ``path`` names it."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def encode(states: Mapping[int, bytes | None], *, engine: int = -1, batch: int = -1,
           kind: str = "cl", prev: int = UNKNOWN_PREV) -> bytes:
    """Groups' state (None = dropped) as one file body, groups ascending: the header (whose
    file this is, which file it follows), the records and their checksum."""
    parts = []
    for g in sorted(states):
        data = states[g]
        parts.append(_REC.pack(int(g), -1 if data is None else len(data)))
        if data is not None:
            parts.append(bytes(data))
    records = b"".join(parts)
    head = _MAGIC + _HEAD.pack(int(engine), int(batch), _KINDS.index(kind), int(prev),
                               len(records))
    digest = xxhash.xxh64()
    digest.update(head)
    digest.update(records)
    return head + records + digest.digest()


@dataclass(frozen=True)
class FileHead:
    """What a version-3 file says of itself (None for an older file: nothing is known)."""

    engine: int
    batch: int
    kind: str
    prev: int


def decode(body: bytes, where: str = "state file") -> dict[int, bytes | None]:
    """Inverse of :func:`encode`; a foreign, torn, truncated or altered file is an error
    naming it, and so is a file in the pickled format of an older keyshift (never unpickled
    here)."""
    return decode_file(body, where)[0]


def decode_file(body: bytes, where: str = "state file"
                ) -> tuple[dict[int, bytes | None], FileHead | None]:
    """:func:`decode`, with the file's header (None: a version-2 file, which has none)."""
    if body.startswith(_MAGIC_PICKLED):
        raise PickledStateFileError(
            f"{where}: engine state pickled by an older keyshift, refused unread; "
            + UPGRADE_HINT)
    if body.startswith(_MAGIC_V2):
        # written by keyshift between issue 26 items 1 and 2: no checksum, so read as before
        # (a cut is still found by the record lengths; an altered byte is not)
        return _records(body, len(_MAGIC_V2), len(body), where), None
    if not body.startswith(_MAGIC):
        if len(body) < len(_MAGIC) and _MAGIC.startswith(body):
            raise DamagedStateFileError(f"{where}: truncated to {len(body)} bytes", where)
        raise StateFormatError(f"{where}: not a keyshift state file")
    start = len(_MAGIC) + _HEAD.size
    if len(body) < start + _SUM:
        raise DamagedStateFileError(
            f"{where}: truncated to {len(body)} bytes (a header and checksum take "
            f"{start + _SUM})", where)
    engine, batch, kind, prev, n = _HEAD.unpack_from(body, len(_MAGIC))
    end = start + n
    if len(body) != end + _SUM:
        raise DamagedStateFileError(
            f"{where}: truncated or torn: {len(body)} bytes where its header announces "
            f"{end + _SUM}", where)
    if xxhash.xxh64(body[:end]).digest() != body[end:]:
        raise DamagedStateFileError(f"{where}: checksum mismatch (altered bytes)", where)
    if kind >= len(_KINDS):
        raise DamagedStateFileError(f"{where}: unknown file kind {kind}", where)
    return _records(body, start, end, where), FileHead(engine, batch, _KINDS[kind], prev)


def _records(body: bytes, i: int, end: int, where: str) -> dict[int, bytes | None]:
    out: dict[int, bytes | None] = {}
    while i < end:
        if i + _REC.size > end:
            raise DamagedStateFileError(f"{where}: truncated record header at byte {i}", where)
        g, n = _REC.unpack_from(body, i)
        i += _REC.size
        if n < 0:
            out[g] = None
            continue
        if i + n > end:
            raise DamagedStateFileError(
                f"{where}: group {g} truncated ({n} bytes announced)", where)
        out[g] = body[i : i + n]
        i += n
    return out


@dataclass(frozen=True)
class DurableState:
    """The changelog of every engine of one run under ``uri``."""

    uri: str
    compact_every: int = 100

    def _dir(self, engine: int) -> tuple[object, str]:
        fs, root = filesystem(self.uri)
        return fs, f"{root.rstrip('/')}/engine-{engine:04d}"

    def _files(self, engine: int) -> tuple[object, str, list[tuple[str, int, str]]]:
        from pyarrow.fs import FileSelector

        fs, d = self._dir(engine)
        infos = fs.get_file_info(FileSelector(d, allow_not_found=True))
        found = []
        for info in infos:
            m = _FILE.match(info.base_name)
            if m:
                found.append((m.group(1), int(m.group(2)), info.path))
        found.sort(key=lambda f: (f[1], f[0] == "cl"))  # base-b before cl-b: b's base has cl-b
        return fs, d, found

    def _write(self, engine: int, name: str, body: bytes) -> None:
        write_atomically(f"{self.uri.rstrip('/')}/engine-{engine:04d}/{name}", body)

    def write_changes(self, engine: int, batch: int, states: Mapping[int, bytes | None],
                      prev: int = UNKNOWN_PREV) -> None:
        """The groups batch ``batch`` changed; written again identically by a retry.
        ``prev``: the batch of the engine's durable file this one follows (the cache's
        :meth:`EngineStore.head`), so that a reader finds a file missing before it."""
        if states:
            self._write(engine, f"cl-{batch:012d}.kss",
                        encode(states, engine=engine, batch=batch, kind="cl", prev=prev))

    def write_base(self, engine: int, batch: int, states: Mapping[int, bytes],
                   prev: int = UNKNOWN_PREV) -> None:
        """Every group the engine owns after ``batch``; then prune what an older base covers."""
        self._write(engine, f"base-{batch:012d}.kss",
                    encode(states, engine=engine, batch=batch, kind="base", prev=prev))
        fs, _, files = self._files(engine)
        bases = sorted(b for kind, b, _ in files if kind == "base")
        if len(bases) < 2:
            return
        keep_from = bases[-2]  # the previous base and its changelogs serve a retry of batch+1
        for kind, b, path in files:
            if b < keep_from or (kind == "cl" and b == keep_from):
                fs.delete_file(path)

    def read(self, engine: int, upto: int) -> dict[int, bytes]:
        """The engine's state after batch ``upto``: newest base ≤ upto, then its changelogs."""
        return self.read_chain(engine, upto)[0]

    def read_chain(self, engine: int, upto: int) -> tuple[dict[int, bytes], int]:
        """:meth:`read`, and the batch of the newest file it applied (-1: none), which the
        next file the engine writes names as its ``prev``.

        Every file is checked (:func:`decode_file`) and so is the chain: a version-3
        changelog names the file it follows, so one missing before it (a changelog, or the
        base that compaction left as the oldest) is found. A damaged or missing base falls
        back to the base before it and that base's changelogs (compaction keeps both), then
        is rewritten from them; a damaged changelog stops the read (:meth:`_replay`)."""
        fs, _, files = self._files(engine)
        usable = [f for f in files if f[1] <= upto]
        bases = sorted((b for kind, b, _ in usable if kind == "base"), reverse=True)
        damaged: list[DamagedStateFileError] = []
        for start in [*bases, NO_PREV]:
            try:
                state, head = self._replay(fs, engine, usable, start, strict=bool(damaged))
            except _BaseDamaged as exc:
                damaged.append(exc.error)
                continue
            except DamagedStateFileError as exc:
                if damaged:  # the fallback found the chain broken too: name both
                    raise DamagedStateFileError(
                        f"{damaged[0]}; no earlier base rebuilds it: {exc}", exc.path) from None
                raise
            for bad in damaged:  # rewrite each damaged base from the chain before it
                self._repair(fs, engine, usable, start, bad)
            return state, head
        raise AssertionError("unreachable: the empty start either reads or raises")

    def _where(self, engine: int, batch: int, kind: str, path: str) -> str:
        run = self.uri.rstrip("/").rsplit("/", 1)[-1]
        what = "base" if kind == "base" else "changelog"
        return f"{path} (run {run}, engine {engine}, batch {batch}, {what})"

    def _replay(self, fs: object, engine: int, usable: list[tuple[str, int, str]], start: int,
                strict: bool) -> tuple[dict[int, bytes], int]:
        """The state from base ``start`` (NO_PREV: from nothing) and the changelogs after it.
        Raises :class:`_BaseDamaged` when that base is damaged (the caller falls back),
        :class:`DamagedStateFileError` when a changelog is damaged or the chain has a hole.
        ``strict``: a fallback, so an empty start must be proven by the first changelog
        (version 3, following nothing); a version-2 chain cannot prove it."""
        state: dict[int, bytes | None] = {}
        head = start
        for kind, b, path in usable:
            if b < start or (kind == "cl" and b == start) or (kind == "base" and b != start):
                continue
            where = self._where(engine, b, kind, path)
            try:
                with fs.open_input_stream(path) as f:  # type: ignore[attr-defined]
                    body = f.read()
            except FileNotFoundError:
                err = DamagedStateFileError(f"{where}: missing (listed, then gone)", path)
                if kind == "base":
                    raise _BaseDamaged(err) from None
                raise err from None
            try:
                records, fh = decode_file(body, where)
                if fh is not None and fh.batch >= 0 and (fh.engine, fh.batch, fh.kind) != (
                        engine, b, kind):
                    raise DamagedStateFileError(
                        f"{where}: holds engine {fh.engine}'s {fh.kind} of batch {fh.batch} "
                        "(a file copied or renamed here)", path)
            except PickledStateFileError:
                raise
            except StateFormatError as exc:
                err = DamagedStateFileError(str(exc), path)
                if kind == "base":
                    raise _BaseDamaged(err) from None
                raise DamagedStateFileError(f"{err}; {_LOST_CHANGES.format(b=b)}", path) \
                    from None
            if kind == "cl":
                prev = UNKNOWN_PREV if fh is None else fh.prev
                if prev == UNKNOWN_PREV and strict and head == NO_PREV:
                    raise DamagedStateFileError(
                        f"{where}: the oldest file left, written without naming the file "
                        "before it, so nothing shows the engine's state started empty", path)
                if prev != UNKNOWN_PREV and prev != head:
                    gone = (f"batch {prev}'s file is missing" if prev > head or head == NO_PREV
                            else f"batch {head}'s file is not the one it follows")
                    raise DamagedStateFileError(
                        f"{where}: follows batch {prev}, but {gone}; "
                        + _LOST_CHANGES.format(b=prev), path)
            state.update(records)
            head = b
        return {g: d for g, d in state.items() if d is not None}, head

    def _repair(self, fs: object, engine: int, usable: list[tuple[str, int, str]], start: int,
                bad: DamagedStateFileError) -> None:
        """Rewrite a damaged base from the chain before it (so the next compaction finds the
        two bases it keeps readable), saying so in one line."""
        from keyshift.lakehouse.logs import say

        m = _FILE.match(bad.path.rsplit("/", 1)[-1])
        if m is None:
            return
        b = int(m.group(2))
        state, head = self._replay(fs, engine, [f for f in usable if f[1] <= b and
                                                not (f[0] == "base" and f[1] == b)],
                                   start, strict=True)
        self._write(engine, f"base-{b:012d}.kss",
                    encode(state, engine=engine, batch=b, kind="base", prev=head))
        say(f"keyshift: {bad}; rebuilt from "
            + (f"base {start}" if start >= 0 else "the first changelog")
            + " and the changelogs after it, and rewritten")

    def batches(self, engine: int) -> list[int]:
        """Batches with a durable file of this engine (for tests and ``status``)."""
        return [b for _, b, _ in self._files(engine)[2]]


# -- upgrading a run's state from the pickled format ------------------------------------
_ENGINE_DIR = re.compile(r"^engine-(\d{4})$")


@dataclass
class Upgrade:
    """What :func:`upgrade` found under a run's state folder (file URIs)."""

    uri: str
    current: list[str]  # already in the current format
    pickled: list[str]  # in the pickled format (converted when trusted)
    converted: list[str]  # rewritten in the current format


def state_files(uri: str) -> list[str]:
    """Every engine's base and changelog files under a run's state ``uri``, as URIs."""
    from pyarrow.fs import FileSelector, FileType

    fs, root = filesystem(uri)
    out = []
    for d in fs.get_file_info(FileSelector(root, allow_not_found=True)):
        if d.type != FileType.Directory or not _ENGINE_DIR.match(d.base_name):
            continue
        for f in fs.get_file_info(FileSelector(d.path)):
            if _FILE.match(f.base_name):
                out.append(f"{uri.rstrip('/')}/{d.base_name}/{f.base_name}")
    return sorted(out)


def upgrade(uri: str, codec: object, *, trust_pickled_state: bool) -> Upgrade:
    """Rewrite the pickled-format state files of one run (under ``uri``) in the current
    format, each group's ``{key: state}`` map encoded by ``codec`` (the run's operator's
    ``state_codec``).

    Only with ``trust_pickled_state``: unpickling runs whatever code the file names, so it is
    for state whose every writer the user trusts. Without it nothing is unpickled: the
    result lists the files that need it. Each file is rewritten through a temporary name and
    a rename, so an interrupted upgrade is simply run again.
    """
    from keyshift.lakehouse.storage import read_if_exists

    found = Upgrade(uri, [], [], [])
    for f in state_files(uri):
        body = read_if_exists(f) or b""
        if body.startswith((_MAGIC, _MAGIC_V2)):  # both read without unpickling anything
            found.current.append(f)
            continue
        if not body.startswith(_MAGIC_PICKLED):
            raise StateFormatError(f"{f}: not a keyshift state file")
        found.pickled.append(f)
        if not trust_pickled_state:
            continue
        states: dict[int, bytes | None] = {}
        for g, data in _records(body, len(_MAGIC_PICKLED), len(body), f).items():
            if data is None:
                states[g] = None
                continue
            value = _data_only_unpickle(data, f, g)  # the user vouched for this file
            if not isinstance(value, dict):
                raise StateFormatError(f"{f}: group {g}: not a key map "
                                       f"({type(value).__name__})")
            try:
                states[g] = codec.encode(value)  # type: ignore[attr-defined]
            except Exception as exc:  # a value the codec cannot keep: name where it is
                raise StateFormatError(f"{f}: group {g}: {exc}") from None
        m = _FILE.match(f.rsplit("/", 1)[-1])
        engine = _ENGINE_DIR.match(f.rsplit("/", 2)[-2])
        assert m is not None and engine is not None  # state_files lists only these
        # prev unknown: the pickled chain named no files, so a reader checks none before it
        write_atomically(f, encode(states, engine=int(engine.group(1)),
                                   batch=int(m.group(2)), kind=m.group(1)))
        found.converted.append(f)
    return found


# -- the executor-local cache -----------------------------------------------------------
class EngineStore:
    """Versioned group → state bytes of one engine slot, cached on one executor.

    Rows carry the batch version that wrote them; ``state IS NULL`` marks a group dropped in
    that batch (it left the engine). Older versions are pruned as soon as a newer one has
    been written on top of the version a batch loaded, so at most two versions per group
    exist: the one a re-executed batch would start from, and the newest. ``cache_id`` and
    ``applied`` let the driver tell this cache from any other copy of the engine's state.
    """

    def __init__(self, root: str | os.PathLike[str], engine: int) -> None:
        self.engine = engine
        self.path = Path(root) / f"engine-{engine:04d}.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS state (grp INTEGER, version INTEGER, data BLOB, "
            "PRIMARY KEY (grp, version))"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('cache_id', ?)", (_new_id(),))
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('applied', '-1')")

    def close(self) -> None:
        self._db.close()

    @property
    def cache_id(self) -> str:
        return self._meta("cache_id")

    @property
    def applied(self) -> int:
        """The last batch whose changes this cache holds (-1: none)."""
        return int(self._meta("applied"))

    def _meta(self, k: str) -> str:
        return self._db.execute("SELECT v FROM meta WHERE k = ?", (k,)).fetchone()[0]

    def mark_applied(self, batch: int) -> None:
        self._db.execute("UPDATE meta SET v = ? WHERE k = 'applied'", (str(int(batch)),))

    def reset(self, states: Mapping[int, bytes], as_of: int, head: int | None = None) -> None:
        """Replace everything with ``states`` (the durable copy after batch ``as_of``, whose
        newest file is of batch ``head``) under a new cache id: whoever expected the old cache
        must not take this one for it."""
        rows = [(int(g), int(as_of), d) for g, d in states.items()]
        if head is not None:
            rows.append((_HEAD_GROUP, int(as_of), struct.pack(">q", int(head))))
        with self._tx():
            self._db.execute("DELETE FROM state")
            self._db.executemany("INSERT INTO state VALUES (?, ?, ?)", rows)
            self._db.execute("UPDATE meta SET v = ? WHERE k = 'cache_id'", (_new_id(),))
            self._db.execute("UPDATE meta SET v = ? WHERE k = 'applied'", (str(int(as_of)),))

    def rollback(self, version: int) -> None:
        """Forget everything a (failed or repeated) attempt of batch ≥ ``version`` wrote."""
        with self._tx():
            self._db.execute("DELETE FROM state WHERE version >= ?", (version,))
            self._db.execute("UPDATE meta SET v = ? WHERE k = 'applied' AND CAST(v AS INTEGER) "
                             ">= ?", (str(int(version) - 1), version))

    def load(self, groups: Iterable[int], before: int) -> dict[int, bytes]:
        """Newest state of each group written before batch ``before`` (dropped ones omitted)."""
        return _load(self._db, groups, before)

    def save(self, version: int, states: Mapping[int, bytes | None]) -> None:
        """Write the groups' state under ``version`` (None = dropped) and prune old versions."""
        if not states:
            return
        with self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO state VALUES (?, ?, ?)",
                [(int(g), version, d) for g, d in states.items()],
            )
            self._db.executemany(
                "DELETE FROM state WHERE grp = ? AND version < (SELECT MAX(version) FROM state "
                "WHERE grp = ? AND version < ?)",
                [(int(g), int(g), version) for g in states],
            )

    def head(self, before: int) -> int:
        """The batch of the engine's newest durable file as of batch ``before`` − 1 (what
        the next file names as ``prev``); UNKNOWN_PREV for a cache of an older keyshift.
        Kept as a versioned row like a group's, so a rollback restores it too."""
        got = _load(self._db, [_HEAD_GROUP], before).get(_HEAD_GROUP)
        return UNKNOWN_PREV if got is None else struct.unpack(">q", got)[0]

    def set_head(self, batch: int) -> None:
        """Batch ``batch`` wrote a durable file of this engine."""
        self.save(batch, {_HEAD_GROUP: struct.pack(">q", int(batch))})

    def newest(self) -> dict[int, bytes]:
        """Every owned group's newest state (what a base file holds)."""
        rows = self._db.execute(
            "SELECT s.grp, s.data FROM state s JOIN (SELECT grp, MAX(version) v "
            "FROM state WHERE grp >= 0 GROUP BY grp) m ON s.grp = m.grp AND s.version = m.v"
        )
        return {g: d for g, d in rows if d is not None}

    def owned(self) -> set[int]:
        """Groups whose newest version holds state (a dropped group is not owned)."""
        return set(self.newest())

    def _tx(self) -> _Tx:
        return _Tx(self._db)


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


def _load(db: sqlite3.Connection, groups: Iterable[int], before: int) -> dict[int, bytes]:
    gs = sorted({int(g) for g in groups})
    found: dict[int, bytes | None] = {}
    for chunk in _chunks(gs, 500):
        marks = ",".join("?" * len(chunk))
        found.update(db.execute(  # ascending versions: the newest before ``before`` wins
            f"SELECT grp, data FROM state WHERE grp IN ({marks}) AND version < ? "
            "ORDER BY grp, version", (*chunk, before)))
    return {g: d for g, d in found.items() if d is not None}


def _chunks(seq: list[int], n: int) -> Iterator[list[int]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _new_id() -> str:
    return uuid.uuid4().hex


def cache_root(run_key: str) -> Path:
    """This executor's folder for engine caches: Spark's per-application files directory on
    the executor (so a new application never trusts an old one's cache), else a temp dir."""
    root: str | None = None
    try:
        from pyspark import SparkFiles

        root = SparkFiles.getRootDirectory()
    except Exception:  # outside a Spark task (unit tests): any local folder will do
        root = None
    return Path(root or tempfile.gettempdir()) / "keyshift-engines" / run_key


def read_moved(root: str | os.PathLike[str], durable: DurableState, engine: int, batch: int,
               expected: str | None, groups: Iterable[int]) -> dict[int, bytes]:
    """The state, as of batch − 1, of ``groups`` that leave ``engine`` in batch ``batch``:
    what the groups' new engine installs before their events (migration, dlb §3.3).

    Read by the receiving engine's task itself, while the source's task of the same batch
    runs: from the source's cache when this executor holds the very cache the source's last
    task reported (the common case on one host: a local read), else from the source's
    durable changelog. Neither read sees what batch ``batch`` writes (versions ≥ batch stay
    invisible, and saving batch b keeps b − 1's version), so a retry of either task reads the
    same state again. Read-only: the source's cache file is never created or changed here.
    """
    wanted = sorted({int(g) for g in groups})
    if not wanted:
        return {}
    path = Path(root) / f"engine-{engine:04d}.sqlite"
    if expected is not None and path.exists():
        db = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            db.execute("BEGIN")  # one snapshot for the identity check and the read
            meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
            if meta.get("cache_id") == expected and int(meta.get("applied", -1)) >= batch - 1:
                return _load(db, wanted, batch)
        except sqlite3.Error:
            pass  # a cache being replaced or half-written: the durable copy is the truth
        finally:
            db.close()
    state = durable.read(engine, batch - 1)
    return {g: state[g] for g in wanted if g in state}


def open_store(root: str | os.PathLike[str], durable: DurableState, engine: int, batch: int,
               expected: str | None) -> tuple[EngineStore, bool]:
    """The engine's cache, current to batch − 1; returns it and whether it was rebuilt.

    ``expected`` is the cache id the engine's previous task reported (None when the driver
    does not know: first batch of a process). Only that cache, at batch − 1 or at batch (a
    retry), is trusted; otherwise the durable files rebuild it.
    """
    store = EngineStore(root, engine)
    if expected is not None and store.cache_id == expected and store.applied >= batch - 1:
        store.rollback(batch)
        return store, False
    store.reset(*_read_for_reset(durable, engine, batch - 1))
    return store, True


def _read_for_reset(durable: DurableState, engine: int, upto: int
                    ) -> tuple[dict[int, bytes], int, int]:
    state, head = durable.read_chain(engine, upto)
    return state, upto, head


def _data_only_unpickle(data: bytes, file: str, group: int) -> object:
    """Decode a format-1 (pickled) group even behind ``--trust-pickled-state`` as data only
    (:func:`keyshift.apps.state_codec.unpickle_data`: the codec's containers, no class else,
    a bound on what it allocates); what it refuses is named with the file and the group."""
    from keyshift.apps.state_codec import StateCodecError, unpickle_data

    try:
        return unpickle_data(data)
    except StateCodecError as exc:
        raise StateFormatError(f"{file}: group {group}: {exc}") from None
