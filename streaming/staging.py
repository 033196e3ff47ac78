"""A run's bookkeeping rows, staged beside the warehouse and committed to Delta together.

Why: a Delta append costs a fixed ~0.3–0.6 s on this machine whatever its size (a write job,
the log commit, the new snapshot), and a micro-batch had three of them for bookkeeping alone
(``key_loads`` from the executors, ``metrics`` and ``decisions`` from the driver) on top of
its outputs, where a plain Spark query has one commit per batch; a migration had three more
(``state_snapshots``, ``migrations`` started and completed). Nothing in a running job reads
those rows back (a restart does, and commits what is staged first), so each batch writes
them as small Parquet files under ``<warehouse>/_runs/<run>/staged/<table>/``, durable
before the batch's offsets commit exactly like the engines' changelog, and every
``warehouse.commit_interval_s`` one append per table commits all that is staged. Flink's
transactional sinks commit on a checkpoint the same way; the price is that these tables
trail the stream by up to the interval (0 = commit with the next batch), and the commit
runs behind the stream, on a thread of its own, while the next batch runs. A decision's
``plans`` and ``control_state`` rows are staged too: a restart commits them before its loop
reads them. The outputs (``events_out``, ``dead_letter``) are committed in their batch.

Files are ``<table>/b<batch:012d>-<part>.parquet`` with part ``driver`` (rows the driver
made; one put per table and batch, a batch run again replaces them) or ``e<engine>`` (an
engine or release task's rows), written through a temporary name and a rename. A row lands
in Delta once: a commit that includes batches a predecessor process may have committed
(:meth:`keyshift.lakehouse.delta.RunAppends.may_exist`) appends only the rows whose key
(:data:`ROW_KEY`) the table does not have yet.

Each file carries an xxHash64 of its rows' values in its Parquet metadata
(``keyshift.xxh64.columns``, :func:`rows_digest`, column by column; issue 26 item 2 wrote
``keyshift.xxh64``, value by value, which is still checked in a file that has it). A commit
reads every file it is about to hand to Spark with :func:`read_staged` first, so a torn,
truncated or altered file, or one gone between the listing and the read, stops the commit
with one line naming run, table, batch and file (:class:`StagedFileError`): its rows are
never silently left out. A file staged by a keyshift before that has no checksum and is
read as before.

A file belongs to the run whose folder it is in: its rows' run (the first column of
:data:`ROW_KEY`) must be that run. A commit that finds another run's file there (copied in by
hand or by a forger: the key check compares against the committing run only, so its rows
would land a second time as that other run's) moves it aside to
``<warehouse>/_runs/<run>/quarantine/<table>/`` and says so in one line: never committed,
never deleted. The readers of ``keyshift status`` and ``keyshift report``
(:func:`read_for_display`) check the checksum and the owner the same way and leave out, with
a one-line note, a file that fails either: what they show is what a commit would commit.
"""

from __future__ import annotations

import io
import math
import re
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from keyshift.lakehouse.delta_arrow import arrow_schema, contract_table
from keyshift.lakehouse.logs import say
from keyshift.lakehouse.storage import filesystem, write_atomically
from keyshift.schemas import SCHEMA_VERSION, table

from .storage_watch import StorageWatch, storage_failure

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from keyshift.lakehouse.delta import RunAppends

# each staged table with the columns that identify one of its rows (the first names the run)
ROW_KEY = {
    "key_loads": ("run_id", "batch_id", "group", "engine"),
    "metrics": ("run_id", "batch_id"),
    "decisions": ("run_id", "batch_id", "component"),
    "state_snapshots": ("run_id", "migration_id", "group"),
    "migrations": ("run_id", "migration_id", "status"),
    "plans": ("scope", "version"),
    "control_state": ("run_id", "batch_id"),
    "migration_costs": ("run_id", "batch_id"),
}
BOOKKEEPING = tuple(ROW_KEY)
_FILE = re.compile(r"^b(-?\d{11,12})-(driver|e\d+)\.parquet$")  # batch -1: the initial plan
CHECKSUM_KEY = b"keyshift.xxh64.columns"  # Parquet key-value metadata: rows_digest of the rows
VALUES_CHECKSUM_KEY = b"keyshift.xxh64"  # what keyshift staged before: values_digest
# what a table's staged rows are, for the line that names a damaged file
_ROWS = {
    "key_loads": "an engine's key loads",
    "metrics": "the batch's metrics",
    "decisions": "controller decisions",
    "state_snapshots": "a migration's moved state",
    "migrations": "a migration's record",
    "plans": "plans a restart replays",
    "control_state": "the state a restart resumes",
    "migration_costs": "a migration's measured cost",
}


# a commit's rows held on the driver for delta-rs at most; more (a migration's moved state,
# staged by the executors) are read again by Spark, on the executors
HELD_BYTES = 64 << 20
QUARANTINE = "quarantine"  # beside a run's staged/: its foreign files, moved aside
_GONE = "missing (listed, then gone)"


class StagedFileError(ValueError):
    """A staged bookkeeping file that is torn, truncated, altered or gone: named in one line,
    never skipped (its rows would be missing from the table for good)."""

    def __init__(self, message: str, path: str, reason: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


def is_staged(name: str) -> bool:
    """Whether a file name is a staged batch file (a temporary one being written is not)."""
    return _FILE.match(name) is not None


def stage_uri(root: str, name: str, batch_id: int, part: str) -> str:
    """Where batch ``batch_id``'s rows of table ``name`` from ``part`` are staged."""
    return f"{root}/{name}/b{batch_id:012d}-{part}.parquet"


def stage_rows(root: str, name: str, batch_id: int, part: str,
               rows: Sequence[Mapping[str, Any]]) -> None:
    """Stage ``rows`` of table ``name`` for batch ``batch_id`` from ``part`` (``driver`` or
    ``e<engine>``) under ``root``: the one way the driver and the tasks stage rows."""
    write_staged(stage_uri(root, name, batch_id, part), name, rows)


def write_staged(uri: str, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows (dicts by column name) of table ``name`` as one Parquet file at ``uri``; a column
    a row lacks is null, ``schema_version`` is stamped. Runs on executors and the driver."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(name)
    full = [{"schema_version": SCHEMA_VERSION, **r} for r in rows]
    cols = [pa.array([r.get(f.name) for r in full], type=f.type) for f in schema]
    tab = pa.Table.from_arrays(cols, schema=schema)
    tab = tab.replace_schema_metadata({CHECKSUM_KEY: rows_digest(tab).encode()})
    buf = io.BytesIO()
    # no column statistics: they are bytes the checksum (over the rows' values) does not cover
    pq.write_table(tab, buf, write_statistics=False)
    write_atomically(uri, buf.getvalue())


def rows_digest(tab: pa.Table) -> str:
    """xxHash64 (hex) of a table's column names, types and values, column by column: what a
    reader decodes, so it does not depend on how Parquet laid the bytes out or on how the
    rows are chunked (another pyarrow may write other bytes for the same rows). Each column
    is fed as its length, its null mask and its values in fixed little-endian widths, the
    null slots filled with one value and every NaN as one NaN; a string's or a list's
    lengths then its bytes or items. Column by column because the value-by-value digest
    (:func:`values_digest`) took 7.3 ms a 1,024-row ``key_loads`` file, paid by each engine
    task every batch and again by every commit; xxh64 because it is the cheapest hash at
    hand and a 64-bit one misses a random change with odds of 2⁻⁶⁴; it detects damage, not a
    forger, who could recompute it."""
    import xxhash

    h = xxhash.xxh64()
    for name, column in zip(tab.column_names, tab.columns, strict=True):
        _feed(h, name)
        _feed(h, _type_name(column.type))
        _feed_array(h, column.combine_chunks())
    return h.hexdigest()


def _type_name(kind: pa.DataType) -> str:
    """A column's type as its values read: a list's item field is named ``item`` when
    written and ``element`` when Parquet reads it back, so only its item type counts."""
    import pyarrow as pa

    return f"list<{_type_name(kind.value_type)}>" if pa.types.is_list(kind) else str(kind)


def _feed_array(h: Any, arr: pa.Array) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = arr.type
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    h.update(struct.pack("<Q", len(arr)))
    h.update(np.packbits(nulls, bitorder="little").tobytes())
    if pa.types.is_boolean(kind):
        h.update(pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype("u1").tobytes())
    elif pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
        ints = arr.cast(pa.int64()) if pa.types.is_timestamp(kind) else arr
        h.update(pc.fill_null(ints, 0).to_numpy(zero_copy_only=False).astype("<i8").tobytes())
    elif pa.types.is_floating(kind):
        x = pc.fill_null(arr, 0.0).to_numpy(zero_copy_only=False).astype("<f8")
        h.update(np.where(np.isnan(x), np.nan, x).astype("<f8").tobytes())
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        full = pc.fill_null(arr, "" if pa.types.is_string(kind) else b"")
        offsets = np.frombuffer(full.buffers()[1], dtype="<i4")[
            full.offset:full.offset + len(full) + 1]
        h.update(np.diff(offsets).astype("<i8").tobytes())  # the lengths
        data = full.buffers()[2]
        if len(full) and data is not None:
            h.update(memoryview(data)[int(offsets[0]):int(offsets[-1])])
    elif pa.types.is_list(kind):
        lengths = pc.fill_null(pc.list_value_length(arr), 0)
        h.update(lengths.to_numpy(zero_copy_only=False).astype("<i8").tobytes())
        _feed_array(h, arr.flatten())
    elif not pa.types.is_null(kind):  # a null column is all in its mask
        raise TypeError(f"no digest for a staged column of type {kind}")


def values_digest(tab: pa.Table) -> str:
    """The checksum keyshift staged files with before :func:`rows_digest` (key
    ``keyshift.xxh64``): each value with its type and length, one by one. Kept to check the
    files a run staged before an upgrade."""
    import xxhash

    h = xxhash.xxh64()
    for name, column in zip(tab.column_names, tab.columns, strict=True):
        _feed(h, name)
        for value in column.to_pylist():
            _feed(h, value)
    return h.hexdigest()


def _feed(h: Any, v: Any) -> None:
    if v is None:
        h.update(b"N")
    elif isinstance(v, bool):
        h.update(b"T" if v else b"F")
    elif isinstance(v, int):
        h.update(b"I" + str(v).encode() + b";")
    elif isinstance(v, float):
        h.update(b"D" + (b"nan" if math.isnan(v) else struct.pack(">d", v)))
    elif isinstance(v, str):
        data = v.encode("utf-8", "surrogatepass")
        h.update(b"S" + struct.pack(">Q", len(data)) + data)
    elif isinstance(v, bytes | bytearray):
        h.update(b"B" + struct.pack(">Q", len(v)))
        h.update(v)
    elif isinstance(v, list | tuple):
        h.update(b"L" + struct.pack(">Q", len(v)))
        for item in v:
            _feed(h, item)
    elif hasattr(v, "isoformat"):  # a timestamp
        h.update(b"t" + v.isoformat().encode() + b";")
    else:
        raise TypeError(f"no digest for a staged value of type {type(v).__name__}")


def describe(uri: str) -> str:
    """``uri (run R, table T, batch B, part P)``, from a staged file's place."""
    parts = uri.rstrip("/").split("/")
    m = _FILE.match(parts[-1])
    if m is None or len(parts) < 4:
        return uri
    run = parts[-4] if parts[-3] == "staged" else "?"
    return f"{uri} (run {run}, table {parts[-2]}, batch {int(m.group(1))}, part {m.group(2)})"


def read_staged(uri: str, fs: Any = None, path: str | None = None) -> pa.Table:
    """A staged file's rows, checked against the checksum written with them; a torn,
    truncated, altered or missing file is :class:`StagedFileError` naming it and saying
    what its rows are and what to do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if fs is None:
        fs, path = filesystem(uri)
    try:
        with fs.open_input_file(path) as f:
            tab = pq.read_table(f)
    except FileNotFoundError:
        raise _damaged(uri, _GONE) from None
    except (pa.ArrowException, OSError) as exc:  # cut short, torn, or a byte that breaks it
        if storage_failure(exc) is not None:  # the storage refused the read: not damage
            raise
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        first = re.sub(r"^Could not open Parquet input source '[^']*': ", "", first)
        first = first.split(". ")[0][:60]
        raise _damaged(uri, f"truncated or torn ({first})") from None
    meta = tab.schema.metadata or {}
    digest, want = rows_digest, meta.get(CHECKSUM_KEY)
    if want is None:  # staged before the column-wise checksum
        digest, want = values_digest, meta.get(VALUES_CHECKSUM_KEY)
    if want is None:
        # staged by a keyshift before issue 26 item 2: no checksum, read as before
        return tab
    try:
        got = digest(tab)
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise _damaged(uri, f"unreadable values ({exc})") from None
    if got.encode() != want:
        raise _damaged(uri, "checksum mismatch (altered bytes)")
    return tab


def _damaged(uri: str, reason: str) -> StagedFileError:
    parts = uri.rstrip("/").split("/")
    m = _FILE.match(parts[-1])
    what = _ROWS.get(parts[-2], "bookkeeping rows") if len(parts) > 1 else "bookkeeping rows"
    batch = m.group(1) if m else "?"
    return StagedFileError(
        f"{describe(uri)}: damaged, {reason}; its rows ({what}) are not "
        f"committed, none dropped; batch {int(batch) if m else batch} is rerun only if the run "
        "died in it: restore the file, or move it aside to go on without them", uri, reason)


def foreign_runs(name: str, tab: pa.Table, run_id: str) -> list[str]:
    """The runs other than ``run_id`` that rows of staged table ``name`` belong to (the
    first column of :data:`ROW_KEY`: ``run_id``, or a plan's ``scope``); a null is one."""
    column = ROW_KEY[name][0]
    if column not in tab.column_names:
        return ["?"]  # not rows a job of this keyshift staged: no run owns them
    return sorted({str(v) for v in tab.column(column).to_pylist() if v != run_id})


def _place(path: str) -> tuple[str | None, str | None]:
    """(run, table) of a staged file's path ``.../<run>/staged/<table>/<file>``."""
    parts = path.rstrip("/").split("/")
    if len(parts) < 4 or parts[-3] != "staged":
        return None, None
    return parts[-4], parts[-2]


def read_for_display(name: str, paths: Iterable[str], fs: Any) -> pa.Table | None:
    """Staged rows of table ``name`` from these files (paths on ``fs``, each under
    ``<run>/staged/<name>/``) in the contract's Arrow schema, for the watching commands.

    A file is read as a commit reads it (:func:`read_staged`, its checksum checked) and must
    hold its folder's run's rows (:func:`foreign_runs`): one that fails either is left out
    with a one-line note, so an altered or copied-in file is not shown, and a torn one does
    not stop the listing of every run. A file the job committed and deleted since the listing
    is left out quietly (its rows are in Delta, whose snapshot the caller takes later)."""
    import pyarrow as pa

    parts = []
    for path in paths:
        try:
            got = read_staged(path, fs, path)
        except StagedFileError as exc:
            if exc.reason != _GONE:
                say(f"staged file left out: {describe(path)}: {exc.reason}")
            continue
        run, _ = _place(path)
        others = foreign_runs(name, got, run) if run is not None and got.num_rows else []
        if others:
            say(f"staged file left out: {describe(path)}: holds rows of run "
                f"{', '.join(others)}, not of run {run} (its next commit moves it aside)")
            continue
        parts.append(contract_table(name, got))
    return pa.concat_tables(parts) if parts else None


class StagedAppends:
    """The staged bookkeeping of one run: put rows, ask whether a commit is due, commit."""

    def __init__(self, spark: SparkSession, root: str, appends: RunAppends,
                 interval_s: float, clock: Callable[[], float] = time.monotonic,
                 watch: StorageWatch | None = None) -> None:
        self.spark = spark
        self.root = root
        self.appends = appends
        self.interval_s = interval_s
        self.clock = clock
        self._since: dict[int, float] = {}  # batch → when its first rows were staged
        self.last_commit: dict[str, float] = {}  # table → seconds, of the latest commit
        self._behind: threading.Thread | None = None  # a commit running behind the stream
        self._damaged: StagedFileError | None = None  # what that commit found damaged
        # tables whose last commit failed: it may have appended its rows and failed to delete
        # their files (a warehouse gone read-only in between), so the next one goes by key
        self._unsure: set[str] = set()
        self.watch = watch  # the job's storage watch: an outage is said there, once
        # another run's files found by the commits under way: (file, where it went, runs)
        self._foreign: list[tuple[str, str, list[str]]] = []

    @property
    def run_id(self) -> str:
        """The run this staging belongs to: only files of its rows are committed."""
        return self.appends.run_id

    @property
    def quarantine(self) -> str:
        """Where another run's files found among this run's staged ones are moved aside."""
        return f"{self.root.rsplit('/', 1)[0]}/{QUARANTINE}"

    # -- staging ----------------------------------------------------------------------
    def put(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int,
            match: Mapping[str, Any] | None = None) -> int:
        """Stage the driver's rows of ``name`` for batch ``batch_id``; returns how many.
        (``match`` is for an append at once; the staged commit goes by the table's key.)"""
        if name not in BOOKKEEPING:
            raise ValueError(f"{name}: not a staged table (staged: {', '.join(BOOKKEEPING)})")
        if not rows:
            return 0
        stage_rows(self.root, name, batch_id, "driver", rows)
        self.staged(batch_id)
        return len(rows)

    def staged(self, batch_id: int) -> None:
        """Batch ``batch_id`` has staged rows (the executors', or the driver's)."""
        self._since.setdefault(batch_id, self.clock())

    def due(self, before: int) -> bool:
        """Whether rows of a batch before ``before`` have waited ``interval_s`` (and no
        commit is running behind the stream already)."""
        if self.running:
            return False
        waited = [t for b, t in self._since.items() if b < before]
        return bool(waited) and self.clock() - min(waited) >= self.interval_s

    @property
    def pending(self) -> bool:
        return bool(self._since) or self.running

    @property
    def running(self) -> bool:
        return self._behind is not None and self._behind.is_alive()

    # -- commits ----------------------------------------------------------------------
    def files(self) -> dict[str, dict[int, list[str]]]:
        """What is staged now: table → batch → file URIs (a temporary file is not there)."""
        from pyarrow.fs import FileSelector, FileType

        fs, base = filesystem(self.root)
        found: dict[str, dict[int, list[str]]] = {}
        for info in fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True)):
            if info.type != FileType.File:
                continue
            rel = info.path[len(base):].lstrip("/")
            name, _, fname = rel.partition("/")
            m = _FILE.match(fname)
            if name in BOOKKEEPING and m:
                found.setdefault(name, {}).setdefault(int(m.group(1)), []).append(
                    f"{self.root}/{rel}")
        return found

    def commits(self, before: int | None = None) -> list[Callable[[], int]]:
        """One call per table with staged rows of batches before ``before`` (all: None) that
        appends them in one commit and deletes their files; meant to run concurrently with a
        batch's other writes. Each returns the batches it handed to Delta."""
        calls = []
        self.last_commit = {}
        for name, batches in self.files().items():
            chosen = {b: uris for b, uris in batches.items() if before is None or b < before}
            if chosen:
                calls.append(lambda name=name, chosen=chosen: self._timed(name, chosen))
        self._since = {} if before is None else {
            b: t for b, t in self._since.items() if b >= before}
        return calls

    def commit(self, before: int | None = None) -> int:
        """Commit what is staged now (before batch ``before``), table by table at once,
        after any commit running behind the stream; returns the (table, batch) pairs
        committed."""
        from keyshift.lakehouse.delta import concurrently

        self.wait()
        try:
            return sum(concurrently(*self.commits(before)))
        finally:
            self._say_foreign()

    def commit_behind(self, before: int) -> None:
        """Commit what batches before ``before`` staged on a thread of its own, while the
        stream goes on: nothing in the running job reads these rows, every file stays until
        its rows are in Delta, and a restart commits what is left (:meth:`recover`), so the
        next batch need not wait for a commit. A failed commit is said in one line and
        tried again at the next due batch (or by :meth:`commit` at stop, which raises)."""
        self.wait()
        calls = self.commits(before)
        if not calls:
            return

        def run() -> None:
            from keyshift.lakehouse.delta import concurrently

            try:
                concurrently(*calls)
            except StagedFileError as exc:  # trying again reads the same bytes: stop
                self._damaged = exc
            except Exception as exc:  # the files stay: retried when due again, or at stop
                self._since.setdefault(before - 1, float("-inf"))
                if self.watch is None or not self.watch.failed(exc):
                    say(f"keyshift: bookkeeping rows not committed yet ({exc}); trying again")
            finally:
                self._say_foreign()

        self._behind = threading.Thread(target=run, name="keyshift-staged-commit", daemon=True)
        self._behind.start()

    def finished(self) -> dict[str, float]:
        """Seconds per table of the latest commit, reported once, after it has ended."""
        if self.running:
            return {}
        done, self.last_commit = self.last_commit, {}
        return done

    def wait(self) -> None:
        """Until the commit running behind the stream (if any) has ended; a damaged staged
        file it found is raised here, in the job's own thread, so the job stops on it."""
        if self._behind is not None:
            self._behind.join()
            self._behind = None
        if self._damaged is not None:
            exc, self._damaged = self._damaged, None
            raise exc

    def _timed(self, name: str, batches: Mapping[int, list[str]]) -> int:
        t0 = time.perf_counter()
        try:
            done = self._commit(name, batches)
        except BaseException:
            self._unsure.add(name)
            raise
        else:
            self._unsure.discard(name)
            return done
        finally:
            self.last_commit[name] = round(time.perf_counter() - t0, 3)

    def _commit(self, name: str, batches: Mapping[int, list[str]]) -> int:
        # every file whole before its rows are appended (none is left out silently), and
        # this run's
        rows = self.check([u for _, us in sorted(batches.items()) for u in us])
        mine = {b: [u for u in us if u in rows] for b, us in batches.items()}
        mine = {b: us for b, us in mine.items() if us}
        if mine:
            self._append(name, mine, rows)
        return len(mine)

    def _append(self, name: str, batches: Mapping[int, list[str]],
                rows: Mapping[str, pa.Table | None]) -> None:
        """One append of the files' rows to ``name``, then the files deleted.

        The rows the check has just read go to Delta from this process through delta-rs
        (:meth:`_append_arrow`): a commit here runs beside the stream on the same cores, and
        Spark's read, write job and log commit of a round of 8 batches took 2.4-2.6 s and
        4.5-5.0 CPU s of them, delta-rs 0.11-0.12 s and 0.14-0.15 (``python -m bench
        staged_commit``). Spark appends instead where rows may be in the table already and
        only the missing ones go in (a key anti-join), where delta-rs cannot write the
        table, and where the rows are more than the driver should hold (a migration's moved
        state)."""
        uris = [u for _, us in sorted(batches.items()) for u in us]
        # a predecessor may have committed some of these rows (it died before deleting
        # their files, or a batch it began is running again), or a commit of this process
        # that failed did before its delete failed: append only the others
        by_key = name in self._unsure or any(self.appends.may_exist(b) for b in batches)
        held = [rows[u] for u in uris]
        if by_key or any(t is None for t in held) or not self._append_arrow(name, held):
            self._append_spark(name, uris, by_key)
        self._delete(uris)

    def _append_arrow(self, name: str, held: Sequence[pa.Table]) -> bool:
        """The rows appended by delta-rs in one commit; False where it cannot write the table."""
        import pyarrow as pa

        from keyshift.lakehouse.delta_arrow import FastWriteUnavailable, append_arrow

        try:
            append_arrow(self.appends.cfg, name,
                         pa.concat_tables(contract_table(name, t) for t in held))
        except FastWriteUnavailable:
            return False
        return True

    def _append_spark(self, name: str, uris: Sequence[str], by_key: bool) -> None:
        """The files read again and appended by Spark; ``by_key``: only the rows whose key
        (:data:`ROW_KEY`) this run's rows in the table lack."""
        from keyshift.lakehouse.delta import append_frame, run_keys

        cfg = self.appends.cfg
        df = self.spark.read.schema(table(name).ddl()).parquet(*uris)
        if by_key:
            key = list(ROW_KEY[name])
            have = run_keys(self.spark, cfg, name, key, self.appends.run_id)
            df = df.join(have, key, "left_anti")
        append_frame(df.coalesce(1), cfg, name)

    def check(self, uris: Sequence[str]) -> dict[str, pa.Table | None]:
        """The files of ``uris`` that hold this run's rows, with their rows (None past
        :data:`HELD_BYTES` in all: Spark reads them again), each read and checked against its
        checksum (:func:`read_staged`): small files, on the commit's own thread, beside the
        stream. A file of another run's rows is moved aside (:attr:`quarantine`), not
        committed: the key check that keeps a row from landing twice looks at this run's
        rows only, so it would land again as that run's."""
        fs, base = filesystem(self.root)
        mine: dict[str, pa.Table | None] = {}
        held = 0
        for uri in uris:
            tab = read_staged(uri, fs, base + uri[len(self.root):])
            others = foreign_runs(uri.rsplit("/", 2)[-2], tab, self.run_id) \
                if tab.num_rows else []
            if others:
                self._foreign.append((uri, self._move_aside(uri, fs, base), others))
                continue
            mine[uri] = tab
            held += tab.nbytes
            if held > HELD_BYTES:  # more than the driver should hold: let go of them all
                mine = dict.fromkeys(mine)
        return mine

    def _move_aside(self, uri: str, fs: Any, base: str) -> str:
        from pyarrow.fs import FileType

        rel = uri[len(self.root):].lstrip("/")  # <table>/<file>
        to = f"{self.quarantine}/{rel}"
        _, qbase = filesystem(self.quarantine)
        dest = qbase + "/" + rel
        fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
        if fs.get_file_info(dest).type != FileType.NotFound:  # the same name moved before
            suffix = f".{uuid.uuid4().hex[:8]}"
            to, dest = to + suffix, dest + suffix
        fs.move(base + uri[len(self.root):], dest)
        return to

    def _say_foreign(self) -> None:
        """One line for all of another run's files the commits just moved aside."""
        found, self._foreign = self._foreign, []
        if not found:
            return
        runs = sorted({r for _, _, others in found for r in others})
        what = (f"{len(found)} staged files in its staged folder hold" if len(found) > 1
                else "a staged file in its staged folder holds")
        say(f"keyshift: run {self.run_id}: {what} rows of run "
            f"{', '.join(runs)}, not its own: moved aside to {self.quarantine}, not committed "
            f"(first: {found[0][0]})")

    def recover(self) -> None:
        """At a process's start: commit all that a predecessor staged. Spark committed the
        offsets of all its batches but the one it died in, which runs again: that one's
        control state and plan must be there for the loop to replay the first attempt's
        decision, and the rows its new attempt stages again are left out by their key."""
        self.commit()

    def _delete(self, uris: Sequence[str]) -> None:
        fs, base = filesystem(self.root)  # one filesystem for all (an S3 client is not cheap)
        for uri in uris:
            try:
                fs.delete_file(base + uri[len(self.root):])
            except FileNotFoundError:  # a commit that ran before already took it
                pass
