"""A user's own events from a file, for ``keyshift produce --from FILE.jsonl|FILE.csv``.

The shipped generators and replays know only the shipped applications' events; a custom
operator's author has a file of records in the operator's own schema. This module reads one:

* ``.jsonl`` (or ``.ndjson``, ``.json``): one JSON object per line; blank lines are skipped.
* ``.csv``: the header row names the columns; each later row is one record.

Each record must carry the envelope every event shares (:data:`keyshift.schemas.ENVELOPE`):
``id`` and ``key`` (strings; a CSV cell is text anyway, a JSON number is refused) and ``ts``
(epoch milliseconds, an integer). Given the operator's declared event schema (``--app``:
``keyshift.apps.resolve_operator(spec).schema``), every declared column is typed as well: a
CSV cell becomes the number / boolean / JSON value its DDL type says, a JSON value must
already be one, a non-nullable column must be present. Columns the schema does not declare
are passed on unchanged (the job's ``from_json`` ignores them). Without a schema only the
envelope is checked and typed; other CSV cells stay strings.

A record that fails is not sent: :func:`read_records` yields a :class:`BadRecord` naming the
line and why, the caller reports it and counts it (``keyshift produce`` prints each one and
the count at the end, and exits 1). A file that cannot be read, has no header, or whose CSV
header lacks an envelope column is refused at once (:class:`WorkloadInputError`, field
``from``), before anything is sent.

Pure core: the standard library only.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshift.schemas import ENVELOPE, Column, TableSchema
from keyshift.workloads.skew import WorkloadInputError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
ENVELOPE_NAMES = tuple(c.name for c in ENVELOPE)

_INT_BITS = {"BIGINT": 64, "LONG": 64, "INT": 32, "INTEGER": 32, "SMALLINT": 16, "SHORT": 16,
             "TINYINT": 8, "BYTE": 8}
_FLOATS = frozenset({"DOUBLE", "FLOAT", "REAL"})
_DECIMALS = frozenset({"DECIMAL", "DEC", "NUMERIC"})
_TEXT = frozenset({"STRING", "VARCHAR", "CHAR"})
_COMPLEX = re.compile(r"\s*(ARRAY|MAP|STRUCT)\s*<", re.IGNORECASE)


@dataclass(frozen=True)
class BadRecord:
    """A record that is not sent: its line in the file (1-based; a CSV record's first line)
    and why, naming the field."""

    line: int
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}"


@dataclass(frozen=True)
class Record:
    line: int
    event: dict[str, Any]


class _Bad(ValueError):
    pass


def file_format(path: str | Path, fmt: str | None = None) -> str:
    """``jsonl`` or ``csv``: ``fmt`` when given, else by the file name's suffix."""
    if fmt:
        if fmt not in ("jsonl", "csv"):
            raise WorkloadInputError("format", f"expected jsonl or csv, got {fmt!r}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise WorkloadInputError(
            "from", f"{path}: cannot tell the format from the name; use a .jsonl or .csv file")
    return FORMATS[suffix]


def _base_type(ddl: str) -> str:
    return re.split(r"[\s(<]", ddl.strip(), maxsplit=1)[0].upper()


def _typed(col: Column, value: Any, from_text: bool) -> Any:
    """``value`` as column ``col``'s type; ``from_text``: a CSV cell (text) to convert."""
    base = _base_type(col.type)
    if base in _TEXT:
        if not isinstance(value, str):
            raise _Bad(f"{col.name}: expected a string ({col.type}), got {json.dumps(value)}")
        return value
    if base in _INT_BITS:
        if from_text:
            try:
                value = int(value.strip())
            except ValueError:
                raise _Bad(f"{col.name}: expected an integer ({col.type}), got {value!r}") \
                    from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"{col.name}: expected an integer ({col.type}), got {json.dumps(value)}")
        bits = _INT_BITS[base]
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise _Bad(f"{col.name}: {value} is out of the range of {col.type}")
        return value
    if base in _FLOATS or base in _DECIMALS:
        if from_text:
            try:
                number: Any = float(value.strip())
            except ValueError:
                raise _Bad(f"{col.name}: expected a number ({col.type}), got {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise _Bad(f"{col.name}: expected a number ({col.type}), got {json.dumps(value)}")
        else:
            number = value
        if not math.isfinite(number):
            raise _Bad(f"{col.name}: expected a finite number ({col.type}), got {value!r}")
        return number
    if base == "BOOLEAN":
        if from_text:
            low = value.strip().lower()
            if low not in ("true", "false"):
                raise _Bad(f"{col.name}: expected true or false (BOOLEAN), got {value!r}")
            return low == "true"
        if not isinstance(value, bool):
            raise _Bad(f"{col.name}: expected true or false (BOOLEAN), got {json.dumps(value)}")
        return value
    if from_text and _COMPLEX.match(col.type):  # a CSV cell holds the value as JSON
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise _Bad(f"{col.name}: expected a JSON value ({col.type}), got {value!r}") \
                from None
    return value  # TIMESTAMP, DATE, BINARY, ...: as given; the job's parser decides


def _columns(schema: TableSchema | None) -> tuple[Column, ...]:
    """The columns to check: the envelope, then the schema's others (its envelope is ours)."""
    if schema is None:
        return ENVELOPE
    return ENVELOPE + tuple(c for c in schema.columns if c.name not in ENVELOPE_NAMES)


def type_record(raw: dict[str, Any], schema: TableSchema | None = None,
                from_text: bool = False) -> dict[str, Any]:
    """One record typed and checked (the envelope always, a schema's columns when given);
    ``ValueError`` naming the field when it fails. ``from_text``: values are CSV cells, an
    empty cell is a missing value."""
    out = dict(raw)
    for col in _columns(schema):
        value = raw.get(col.name)
        if from_text and value == "":
            value = None
        if value is None:
            if not col.nullable:
                raise _Bad(f"{col.name}: missing (every event needs {', '.join(ENVELOPE_NAMES)})"
                           if col.name in ENVELOPE_NAMES else f"{col.name}: missing "
                           f"({col.type} NOT NULL in the operator's event schema)")
            if from_text:  # an empty cell: the field is left out (null)
                out.pop(col.name, None)
            continue
        out[col.name] = _typed(col, value, from_text)
    return out


def read_records(path: str | Path, schema: TableSchema | None = None,
                 fmt: str | None = None) -> Iterator[Record | BadRecord]:
    """The records of a JSON-lines or CSV file, typed (module docstring), in file order: a
    :class:`Record` for each good one, a :class:`BadRecord` for each that fails.

    The file is opened (and a CSV's header read and checked) before the first item, so a
    missing file or a header without ``id``, ``key``, ``ts`` raises
    :class:`WorkloadInputError` (field ``from``) at the call, not mid-iteration."""
    kind = file_format(path, fmt)
    try:
        f = open(path, encoding="utf-8", newline="")  # noqa: SIM115 (closed by the generator)
    except OSError as exc:
        raise WorkloadInputError("from", f"cannot read {path}: {exc.strerror}") from None
    try:
        if kind == "csv":
            reader = csv.DictReader(f)
            header = reader.fieldnames
            if not header:
                raise WorkloadInputError("from", f"{path}: empty file, expected a header row")
            missing = [n for n in ENVELOPE_NAMES if n not in header]
            if missing:
                raise WorkloadInputError(
                    "from", f"{path}: the header has no column {', '.join(missing)} "
                    f"(every event needs {', '.join(ENVELOPE_NAMES)}); it has {', '.join(header)}")
            return _csv_records(f, reader, schema)
        return _jsonl_records(f, schema)
    except UnicodeDecodeError as exc:  # the header
        f.close()
        raise WorkloadInputError("from", f"{path}: not UTF-8 text ({exc.reason})") from None
    except BaseException:
        f.close()
        raise


def _csv_records(f, reader: csv.DictReader, schema: TableSchema | None
                 ) -> Iterator[Record | BadRecord]:
    with f:
        line = reader.line_num + 1
        try:
            for row in reader:
                if None in row:
                    yield BadRecord(line, f"{len(row) - 1 + len(row[None])} cells, the header "
                                    f"has {len(reader.fieldnames or [])}")
                elif any(v is None for v in row.values()):
                    yield BadRecord(line, f"{sum(v is not None for v in row.values())} cells, "
                                    f"the header has {len(row)}")
                else:
                    try:
                        yield Record(line, type_record(row, schema, from_text=True))
                    except _Bad as exc:
                        yield BadRecord(line, str(exc))
                line = reader.line_num + 1
        except (csv.Error, UnicodeDecodeError) as exc:
            yield BadRecord(line, f"unreadable, the rest of the file is skipped: {exc}")


def _jsonl_records(f, schema: TableSchema | None) -> Iterator[Record | BadRecord]:
    n = 0
    with f:
        try:
            for text in f:
                n += 1
                if not text.strip():
                    continue
                try:
                    raw = json.loads(text)
                except json.JSONDecodeError as exc:
                    yield BadRecord(n, f"not JSON: {exc.msg} at column {exc.colno}")
                    continue
                if not isinstance(raw, dict):
                    yield BadRecord(n, f"expected a JSON object, got {type(raw).__name__}")
                    continue
                try:
                    yield Record(n, type_record(raw, schema))
                except _Bad as exc:
                    yield BadRecord(n, str(exc))
        except UnicodeDecodeError as exc:
            yield BadRecord(n + 1, f"not UTF-8 text, the rest of the file is skipped: "
                            f"{exc.reason}")


__all__ = ["BadRecord", "Record", "file_format", "read_records", "type_record"]
