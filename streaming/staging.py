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

Each file carries an xxHash64 of its rows' values in its Parquet metadata (``keyshift.xxh64``,
issue 26 item 2; :func:`rows_digest`). A commit reads every file it is about to hand to Spark
with :func:`read_staged` first, so a torn, truncated or altered file, or one gone between the
listing and the read, stops the commit with one line naming run, table, batch and file
(:class:`StagedFileError`): its rows are never silently left out. A file staged by a keyshift
before that has no checksum and is read as before.
"""

from __future__ import annotations

import io
import math
import re
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from keyshift.lakehouse.delta_arrow import arrow_schema, arrow_type  # noqa: F401 (staging's names)
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
CHECKSUM_KEY = b"keyshift.xxh64"  # Parquet key-value metadata: rows_digest of the file's rows
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


class StagedFileError(ValueError):
    """A staged bookkeeping file that is torn, truncated, altered or gone: named in one line,
    never skipped (its rows would be missing from the table for good)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


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
    """xxHash64 (hex) of a table's column names and values, each value with its type and
    length: what a reader decodes, so it does not depend on how Parquet laid the bytes out
    (another pyarrow may write other bytes for the same rows). xxh64 because it is the
    cheapest hash at hand (xxhash is a dependency already) and a 64-bit one misses a random
    change with odds of 2⁻⁶⁴; it detects damage, not a forger, who could recompute it."""
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
        raise _damaged(uri, "missing (listed, then gone)") from None
    except (pa.ArrowException, OSError) as exc:  # cut short, torn, or a byte that breaks it
        if storage_failure(exc) is not None:  # the storage refused the read: not damage
            raise
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        first = re.sub(r"^Could not open Parquet input source '[^']*': ", "", first)
        first = first.split(". ")[0][:60]
        raise _damaged(uri, f"truncated or torn ({first})") from None
    want = (tab.schema.metadata or {}).get(CHECKSUM_KEY)
    if want is None:
        # staged by a keyshift before issue 26 item 2: no checksum, read as before
        return tab
    try:
        got = rows_digest(tab)
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
        "died in it: restore the file, or move it aside to go on without them", uri)


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

    # -- staging ----------------------------------------------------------------------
    def put(self, name: str, rows: Sequence[Mapping[str, Any]], batch_id: int) -> int:
        """Stage the driver's rows of ``name`` for batch ``batch_id``; returns how many."""
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
        return sum(concurrently(*self.commits(before)))

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
        from keyshift.lakehouse.delta import append_frame, run_keys

        cfg = self.appends.cfg
        uris = [u for _, us in sorted(batches.items()) for u in us]
        self.check(uris)  # every file whole before Spark reads it: none is left out silently
        df = self.spark.read.schema(table(name).ddl()).parquet(*uris)
        if name in self._unsure or any(self.appends.may_exist(b) for b in batches):
            # a predecessor may have committed some of these rows (it died before deleting
            # their files, or a batch it began is running again), or a commit of this
            # process that failed did before its delete failed: append only the others
            key = list(ROW_KEY[name])
            have = run_keys(self.spark, cfg, name, key, self.appends.run_id)
            df = df.join(have, key, "left_anti")
        append_frame(df.coalesce(1), cfg, name)
        self._delete(uris)
        return len(batches)

    def check(self, uris: Sequence[str]) -> None:
        """Each staged file read and checked against its checksum (:func:`read_staged`):
        small files, on the commit's own thread, beside the stream."""
        fs, base = filesystem(self.root)
        for uri in uris:
            read_staged(uri, fs, base + uri[len(self.root):])

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
