"""The warehouse's Delta tables without a JVM: the side door of
:mod:`keyshift.lakehouse.delta` for the commands a person waits on and for the staged
bookkeeping's commits.

Why: ``keyshift status``, ``report`` and ``dead-letters`` read a few small tables, and starting
Spark and Delta's JVM for that cost about two minutes on a busy 2-core machine (issue 28
item 4). delta-rs (the ``deltalake`` package) replays the same Delta log (JSON commits,
Parquet checkpoints) and reads the live Parquet files in-process, in well under a second. It
reads what delta-spark 4.4 writes here: reader version 1 (no reader features), checkpoints
every ``checkpointInterval`` commits, and the columns a later schema version added
(``mergeSchema``), which are read as nulls in older files.

One write comes through here too: :func:`append_arrow`, the append of rows a running job
holds on its driver (its staged bookkeeping, read and checked,
:mod:`keyshift.streaming.staging`, and a light batch's complex events,
:mod:`keyshift.streaming.output_appends`). Through Spark the bookkeeping's append is a read job, a write job and
a log commit in the JVM, 2.4-2.6 s and 4.5-5.0 CPU s of the 2 cores for the three tables of
8 batches, while the stream runs beside it; delta-rs writes the Parquet files and log
entries in 0.11-0.12 s and 0.14-0.15 CPU s (``python -m bench staged_commit``). Spark and
delta-rs commit to the same log as two writers: each version is one file, created only where
none exists (delta-rs by a rename that cannot replace, Spark's log store by a check before
its rename), and a writer that finds the version taken reads the winner's entry and tries
the next one. Within a run one commit per table runs at a time. Every other write stays with
Spark in :mod:`keyshift.lakehouse.delta`, and both hand out exactly the contract's columns
(:mod:`keyshift.schemas`).

Where this module cannot answer, it raises :class:`FastReadUnavailable` (a read) or
:class:`FastWriteUnavailable` (the append) and the caller takes the Spark path: a warehouse
not on this machine's disk (``s3a:``, ``hdfs:``, ``abfss:`` are reached through the Hadoop
configuration Spark holds), a table whose log delta-rs refuses (a reader feature it does not
know), a table with writer features or columns other than the contract's (Spark's append
evolves it), or an installation without ``deltalake``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from keyshift.config import Config
from keyshift.schemas import SCHEMA_VERSION, table

from .delta import TableSchemaError

if TYPE_CHECKING:
    import pyarrow as pa


class FastReadUnavailable(RuntimeError):
    """This warehouse or table cannot be read without Spark; the message says why."""


class FastWriteUnavailable(FastReadUnavailable):
    """This table cannot be appended to without Spark; the message says why."""


def arrow_type(ddl_type: str) -> pa.DataType:
    """The Arrow type Spark reads back as the contract's DDL type (keyshift.schemas)."""
    import pyarrow as pa

    t = ddl_type.strip().upper()
    if t.startswith("ARRAY<") and t.endswith(">"):
        return pa.list_(arrow_type(t[6:-1]))
    simple = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32(),
              "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "BINARY": pa.binary(),
              "TIMESTAMP": pa.timestamp("us", tz="UTC")}
    if t not in simple:
        raise ValueError(f"no Arrow type for the contract type {ddl_type!r}")
    return simple[t]


def arrow_schema(name: str) -> pa.Schema:
    """Table ``name``'s contract as an Arrow schema (every column nullable: Delta checks the
    NOT NULL ones at commit)."""
    import pyarrow as pa

    return pa.schema([(c.name, arrow_type(c.type)) for c in table(name).columns])


def contract_table(name: str, tab: pa.Table) -> pa.Table:
    """Rows of table ``name`` in its contract's Arrow schema (:func:`arrow_schema`): the
    columns in order, the types Spark reads back, and null for a column the rows lack (a
    staged file of an older version, written before the column was added)."""
    import pyarrow as pa

    schema = arrow_schema(name)
    for f in schema:
        if f.name not in tab.column_names:
            tab = tab.append_column(f, pa.nulls(tab.num_rows, f.type))
    return tab.select(schema.names).cast(schema)


def local_table(cfg: Config, name: str) -> Path:
    """Table ``name``'s folder on this machine's disk; a remote warehouse cannot be read here."""
    try:
        return cfg.warehouse_path / name
    except ValueError:
        raise FastReadUnavailable(
            f"the warehouse {cfg.warehouse_uri} is not on this machine's disk") from None


def read_arrow(cfg: Config, name: str, run_id: str | None = None,
               columns: list[str] | None = None) -> pa.Table:
    """Table ``name``'s rows (of one run when ``run_id`` is given and the table has a
    ``run_id`` column) in the contract's Arrow schema, or the chosen ``columns`` of it. A
    table no job has written yet is empty; columns a later schema version added are null in
    older rows; a table without a column of the first version is a :class:`TableSchemaError`
    (the same checks as :func:`keyshift.lakehouse.delta.conform`)."""
    import pyarrow as pa

    schema = arrow_schema(name)
    wanted = columns or schema.names
    target = pa.schema([schema.field(c) for c in wanted])
    folder = local_table(cfg, name)
    if not (folder / "_delta_log").is_dir():
        return target.empty_table()
    DeltaTable, DeltaError = _deltalake()
    try:
        dt = DeltaTable(str(folder))
        have = set(dt.schema().to_arrow().names)
        _check_columns(name, have, str(folder))
        filters = ([("run_id", "=", run_id)]
                   if run_id is not None and "run_id" in schema.names else None)
        got = dt.to_pyarrow_table(columns=[c for c in wanted if c in have], filters=filters)
    except DeltaError as exc:
        raise FastReadUnavailable(f"{name}: delta-rs cannot read the table at {folder}: "
                                  f"{_first_line(exc)}") from exc
    for field in target:
        if field.name not in got.column_names:  # written before the version that added it
            got = got.append_column(field, pa.nulls(got.num_rows, field.type))
    return got.select(target.names).cast(target)


def first_values(cfg: Config, name: str, column: str, run_ids: Iterable[str]) -> dict[str, Any]:
    """One value of ``column`` for each of ``run_ids`` that has rows in table ``name`` (the
    operator a run's ``events_out`` names, which ``status`` shows), reading what that needs
    and no more: the Delta log's statistics of each file (the least and greatest ``run_id``,
    which Delta writes with every file) leave out the files that cannot hold a wanted run,
    and each other file's ``run_id`` and ``column``, filtered to the runs still wanted, is
    read once, in file order, until every run has its value. Memory is one file's two
    columns whatever the table's size (a full read of the column took 1.7 GB at 20 M rows,
    issue 46 item 5)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted = set(run_ids)
    folder = local_table(cfg, name)
    if not wanted or not (folder / "_delta_log").is_dir():
        return {}
    DeltaTable, DeltaError = _deltalake()
    try:
        files = pa.table(DeltaTable(str(folder)).get_add_actions(flatten=True)).to_pylist()
    except DeltaError as exc:
        raise FastReadUnavailable(f"{name}: delta-rs cannot read the table at {folder}: "
                                  f"{_first_line(exc)}") from exc
    found: dict[str, Any] = {}
    for f in files:
        left = wanted - found.keys()
        if not left:
            break
        low, high = f.get("min.run_id"), f.get("max.run_id")
        if low is not None and high is not None and not any(low <= r <= high for r in left):
            continue
        if "://" in f["path"]:
            raise FastReadUnavailable(f"{name}: a file outside the table's folder: {f['path']}")
        try:
            got = pq.read_table(folder / unquote(f["path"]), columns=["run_id", column],
                                filters=pc.field("run_id").isin(sorted(left)))
        except FileNotFoundError:  # vacuumed since the log was read: its rows are elsewhere
            continue
        for rid in left:
            at = pc.index(got["run_id"], rid).as_py()
            if at >= 0:
                found[rid] = got[column][at].as_py()
    return found


def _check_columns(name: str, have: set[str], path: str) -> None:
    lost = [c.name for c in table(name).columns if c.since <= 1 and c.name not in have]
    if lost:
        raise TableSchemaError(
            f"{name}: table at {path} lacks columns {', '.join(lost)} "
            f"(schema version {SCHEMA_VERSION} expects {', '.join(table(name).names)})")


def append_arrow(cfg: Config, name: str, rows: pa.Table) -> None:
    """Append ``rows`` (the contract's columns, as :func:`arrow_schema` types them) to table
    ``name`` with delta-rs, in one commit.

    Only a table exactly as the contract has it is written here: its columns the contract's
    (a table an older keyshift made gets the added ones from Spark's ``mergeSchema``), the
    protocol Spark gives a new table (writer version 2, no writer features: a feature such as
    deletion vectors or change data feed, turned on by hand, keeps its writes with Spark).
    A null in a NOT NULL column is refused by delta-rs as Spark's Delta refuses it, and a
    refusal is a :class:`~keyshift.lakehouse.delta.TableWriteError` naming the table."""
    from .delta import TableWriteError

    try:
        folder = local_table(cfg, name)
    except FastReadUnavailable as exc:
        raise FastWriteUnavailable(str(exc)) from None
    if not (folder / "_delta_log").is_dir():
        raise FastWriteUnavailable(f"{name}: no table at {folder} yet")
    DeltaTable, DeltaError = _deltalake(FastWriteUnavailable)
    from deltalake import write_deltalake

    try:
        dt = DeltaTable(str(folder))
    except DeltaError as exc:
        raise FastWriteUnavailable(f"{name}: delta-rs cannot read the table at {folder}: "
                                   f"{_first_line(exc)}") from exc
    protocol = dt.protocol()
    if protocol.min_writer_version > 2 or protocol.writer_features:
        raise FastWriteUnavailable(
            f"{name}: writer version {protocol.min_writer_version} with features "
            f"{protocol.writer_features or []}: written by Spark")
    have = [f.name for f in dt.schema().fields]
    if sorted(have) != sorted(table(name).names):
        raise FastWriteUnavailable(f"{name}: the table's columns ({', '.join(have)}) are not "
                                   "the contract's: Spark's append evolves it")
    try:
        write_deltalake(dt, rows.select(have), mode="append")
    except (DeltaError, OSError) as exc:
        cause = _os_error(exc, folder)
        raise TableWriteError(f"cannot append to table {name} at {folder}: "
                              f"{cause.strerror if cause else _first_line(exc)}") from (
                                  cause or exc)


def _os_error(exc: BaseException, folder: Path) -> OSError | None:
    """The filesystem's refusal inside a delta-rs error, as the ``OSError`` it was: delta-rs
    says it deep in one long line (``Failed to parse parquet: External: Generic
    LocalFileSystem error: Unable to open file <path>: Read-only file system (os error
    30)``), and a one-line report of the failure (the storage watch's waiting line) must
    still name it."""
    if isinstance(exc, OSError):
        return exc
    found = re.findall(r"\(os error (\d+)\)", str(exc))
    if not found:
        return None
    code = int(found[-1])
    cause = OSError(code, os.strerror(code), str(folder))
    cause.__cause__ = exc
    return cause


def _deltalake(unavailable: type[FastReadUnavailable] = FastReadUnavailable) -> tuple[Any, Any]:
    """delta-rs's ``DeltaTable`` and ``DeltaError``, or ``unavailable`` saying how to get them
    (``deltalake`` comes with the ``spark`` extra)."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError
    except ImportError:
        raise unavailable("the deltalake package is not installed (pip install "
                          "'keyshift[spark]')") from None
    return DeltaTable, DeltaError


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else repr(exc)
