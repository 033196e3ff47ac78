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

A file starts with ``KSST`` and its format version. Version 2 holds each group's state as
the operator's ``state_codec`` wrote it (:mod:`keyshift.apps.state_codec`: data only).
Version 1, written by keyshift before issue 26, held pickles: such a file is refused unread,
naming it, and ``keyshift state upgrade RUN_ID --trust-pickled-state`` (:func:`upgrade`)
rewrites a run's files in version 2 for whoever trusts their origin.
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

from keyshift.apps.state_codec import UPGRADE_HINT
from keyshift.lakehouse.storage import filesystem, write_atomically

_MAGIC = b"KSST\x02"
_MAGIC_PICKLED = b"KSST\x01"  # keyshift before issue 26: each group's state a pickle
_REC = struct.Struct(">iq")  # group, length (-1: the group was dropped)
_FILE = re.compile(r"^(base|cl)-(\d{12})\.kss$")


class StateFormatError(ValueError):
    """A durable state file that is not one keyshift wrote (or was cut short)."""


class PickledStateFileError(StateFormatError):
    """A durable state file of an older keyshift, whose groups' states are pickles: refused
    unread (:func:`upgrade` converts it where the user trusts it)."""


# -- the durable changelog --------------------------------------------------------------
def encode(states: Mapping[int, bytes | None]) -> bytes:
    """Groups' state (None = dropped) as one file body, groups ascending."""
    parts = [_MAGIC]
    for g in sorted(states):
        data = states[g]
        parts.append(_REC.pack(int(g), -1 if data is None else len(data)))
        if data is not None:
            parts.append(bytes(data))
    return b"".join(parts)


def decode(body: bytes, where: str = "state file") -> dict[int, bytes | None]:
    """Inverse of :func:`encode`; a foreign or truncated file is an error naming it, and so
    is a file in the pickled format of an older keyshift (never unpickled here)."""
    if body.startswith(_MAGIC_PICKLED):
        raise PickledStateFileError(
            f"{where}: engine state pickled by an older keyshift, refused unread; "
            + UPGRADE_HINT)
    if not body.startswith(_MAGIC):
        raise StateFormatError(f"{where}: not a keyshift state file")
    return _records(body, where)


def _records(body: bytes, where: str) -> dict[int, bytes | None]:
    out: dict[int, bytes | None] = {}
    i = len(_MAGIC)  # both versions' headers are 5 bytes
    while i < len(body):
        if i + _REC.size > len(body):
            raise StateFormatError(f"{where}: truncated record header at byte {i}")
        g, n = _REC.unpack_from(body, i)
        i += _REC.size
        if n < 0:
            out[g] = None
            continue
        if i + n > len(body):
            raise StateFormatError(f"{where}: group {g} truncated ({n} bytes announced)")
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

    def write_changes(self, engine: int, batch: int, states: Mapping[int, bytes | None]) -> None:
        """The groups batch ``batch`` changed; written again identically by a retry."""
        if states:
            self._write(engine, f"cl-{batch:012d}.kss", encode(states))

    def write_base(self, engine: int, batch: int, states: Mapping[int, bytes]) -> None:
        """Every group the engine owns after ``batch``; then prune what an older base covers."""
        self._write(engine, f"base-{batch:012d}.kss", encode(states))
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
        fs, _, files = self._files(engine)
        usable = [f for f in files if f[1] <= upto]
        start = max((b for kind, b, _ in usable if kind == "base"), default=-1)
        state: dict[int, bytes | None] = {}
        for kind, b, path in usable:
            if b < start or (kind == "cl" and b == start):
                continue
            with fs.open_input_stream(path) as f:
                state.update(decode(f.read(), path))
        return {g: d for g, d in state.items() if d is not None}

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
    import pickle  # only here, only behind the user's explicit trust

    from keyshift.lakehouse.storage import read_if_exists

    found = Upgrade(uri, [], [], [])
    for f in state_files(uri):
        body = read_if_exists(f) or b""
        if body.startswith(_MAGIC):
            found.current.append(f)
            continue
        if not body.startswith(_MAGIC_PICKLED):
            raise StateFormatError(f"{f}: not a keyshift state file")
        found.pickled.append(f)
        if not trust_pickled_state:
            continue
        states: dict[int, bytes | None] = {}
        for g, data in _records(body, f).items():
            if data is None:
                states[g] = None
                continue
            value = pickle.loads(data)  # the user vouched for this file (see above)
            if not isinstance(value, dict):
                raise StateFormatError(f"{f}: group {g}: not a key map "
                                       f"({type(value).__name__})")
            try:
                states[g] = codec.encode(value)  # type: ignore[attr-defined]
            except Exception as exc:  # a value the codec cannot keep: name where it is
                raise StateFormatError(f"{f}: group {g}: {exc}") from None
        write_atomically(f, encode(states))
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

    def reset(self, states: Mapping[int, bytes], as_of: int) -> None:
        """Replace everything with ``states`` (the durable copy after batch ``as_of``) under a
        new cache id: whoever expected the old cache must not take this one for it."""
        with self._tx():
            self._db.execute("DELETE FROM state")
            self._db.executemany("INSERT INTO state VALUES (?, ?, ?)",
                                 [(int(g), int(as_of), d) for g, d in states.items()])
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

    def newest(self) -> dict[int, bytes]:
        """Every owned group's newest state (what a base file holds)."""
        rows = self._db.execute(
            "SELECT s.grp, s.data FROM state s JOIN (SELECT grp, MAX(version) v "
            "FROM state GROUP BY grp) m ON s.grp = m.grp AND s.version = m.v"
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
    store.reset(durable.read(engine, batch - 1), batch - 1)
    return store, True
