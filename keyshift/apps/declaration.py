"""Checks an operator class's declaration before keyshift runs it (Operator API, base.py).

A user's operator arrives as ``module:Class`` or by entry point, so a mistake in it (a column
typed ``STRNG``, a ``required`` field never declared, a version this keyshift does not know)
must stop the job at start with one line naming the class and the fault, not surface as a
Spark analysis error or wrong output mid-run. Types are checked against Spark SQL DDL
grammar here, without Spark, so the pure core can do it.
"""

from __future__ import annotations

import inspect
import re

from keyshift.apps.base import SUMMARY_HOOKS, SUPPORTED_API_VERSIONS, Operator
from keyshift.schemas import ENVELOPE, Column, TableSchema

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Spark SQL DDL type names (case-insensitive) that ``from_json`` can read from an event.
_PRIMITIVES = frozenset({
    "STRING", "BIGINT", "LONG", "INT", "INTEGER", "SMALLINT", "SHORT", "TINYINT", "BYTE",
    "DOUBLE", "FLOAT", "REAL", "BOOLEAN", "TIMESTAMP", "TIMESTAMP_NTZ", "DATE", "BINARY",
})
_SIZED = frozenset({"DECIMAL", "DEC", "NUMERIC", "VARCHAR", "CHAR"})  # NAME(n[, m])
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\d+)|(.))")


class DeclarationError(ValueError):
    """One fault of a declaration; the loader prefixes the operator's spec."""


def is_ddl_type(text: str) -> bool:
    """Whether ``text`` is a Spark SQL DDL type: a primitive, ``DECIMAL(p,s)``,
    ``ARRAY<T>``, ``MAP<K,V>`` or ``STRUCT<name: T, ...>``, nested freely."""
    if not isinstance(text, str):
        return False
    tokens = [m.group(0).strip() for m in _TOKEN.finditer(text) if m.group(0).strip()]
    try:
        end = _parse_type(tokens, 0)
    except (IndexError, DeclarationError):
        return False
    return end == len(tokens)


def _expect(tokens: list[str], i: int, tok: str) -> int:
    if tokens[i] != tok:
        raise DeclarationError(f"expected {tok!r}")
    return i + 1


def _parse_type(tokens: list[str], i: int) -> int:
    """Index after the type starting at ``tokens[i]`` (recursive descent)."""
    word = tokens[i].upper()
    i += 1
    if word in _PRIMITIVES:
        return i
    if word in _SIZED:
        if i < len(tokens) and tokens[i] == "(":
            i += 1
            if not tokens[i].isdigit():
                raise DeclarationError("size must be a number")
            i += 1
            if tokens[i] == ",":
                if not tokens[i + 1].isdigit():
                    raise DeclarationError("scale must be a number")
                i += 2
            return _expect(tokens, i, ")")
        if word in ("DECIMAL", "DEC", "NUMERIC"):
            return i
        raise DeclarationError(f"{word} needs a length")
    if word == "ARRAY":
        i = _parse_type(tokens, _expect(tokens, i, "<"))
        return _expect(tokens, i, ">")
    if word == "MAP":
        i = _parse_type(tokens, _expect(tokens, i, "<"))
        i = _parse_type(tokens, _expect(tokens, i, ","))
        return _expect(tokens, i, ">")
    if word == "STRUCT":
        i = _expect(tokens, i, "<")
        while True:
            if not _NAME.match(tokens[i]):
                raise DeclarationError("struct field name")
            i += 1
            if tokens[i] == ":":
                i += 1
            i = _parse_type(tokens, i)
            if tokens[i] == ">":
                return i + 1
            i = _expect(tokens, i, ",")
    raise DeclarationError(f"unknown type {word}")


def check_declaration(cls: type) -> TableSchema:
    """The event schema of operator class ``cls`` once its declaration holds; otherwise a
    :class:`DeclarationError` saying what is wrong (the caller names the class)."""
    if not isinstance(cls, type):
        name = getattr(cls, "__qualname__", repr(cls))
        raise DeclarationError(f"{name} is a {type(cls).__name__}, not a class")
    if not issubclass(cls, Operator):
        raise DeclarationError(
            f"class {cls.__qualname__} is not a subclass of keyshift.apps.base.Operator"
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise DeclarationError(f"class {cls.__qualname__} is abstract: implement {missing}")
    version = getattr(cls, "api_version", None)
    if type(version) is not int or version not in SUPPORTED_API_VERSIONS:
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_API_VERSIONS))
        raise DeclarationError(
            f"declares Operator API version {version!r}; this keyshift supports {supported}"
        )
    app = getattr(cls, "app", None)
    if not isinstance(app, str) or not _NAME.match(app):
        raise DeclarationError(
            f"app must be a name of letters, digits and _ (it names the event schema), got {app!r}"
        )
    try:
        schema = cls.event_schema()
    except Exception as exc:  # a broken declaration must name itself, not crash the loader
        raise DeclarationError(f"bad event schema: {type(exc).__name__}: {exc}") from None
    _check_schema(schema)
    _check_required(cls.required, schema)
    mergeable = getattr(cls, "mergeable", False)
    if type(mergeable) is not bool:
        raise DeclarationError(f"mergeable must be True or False, got {mergeable!r}")
    if mergeable and cls.merge is Operator.merge:
        raise DeclarationError("declares mergeable = True but does not implement merge(a, b)")
    hooks = [h for h in SUMMARY_HOOKS if getattr(cls, h) is not getattr(Operator, h)]
    if hooks and len(hooks) < len(SUMMARY_HOOKS):
        missing = ", ".join(h for h in SUMMARY_HOOKS if h not in hooks)
        raise DeclarationError(f"implements part of the summary hooks ({', '.join(hooks)}) "
                               f"but not {missing}: a key is split with all of them or none")
    if hooks and not mergeable:
        raise DeclarationError("implements the summary hooks but declares mergeable = False")
    codec = getattr(cls, "state_codec", None)
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        raise DeclarationError(f"state_codec must be an object with encode(value) -> bytes and "
                               f"decode(bytes) -> value, got {codec!r}")
    return schema


def _check_schema(schema: object) -> None:
    if not isinstance(schema, TableSchema):
        raise DeclarationError(f"bad event schema: event_schema() returned {schema!r}")
    if type(schema.version) is not int or schema.version < 1:
        raise DeclarationError(f"bad event schema: version must be an int >= 1, got "
                               f"{schema.version!r}")
    columns = schema.columns
    if tuple(columns[: len(ENVELOPE)]) != ENVELOPE:
        raise DeclarationError(
            "bad event schema: must start with the envelope id, key, ts (keyshift.schemas.ENVELOPE)"
        )
    seen = {c.name for c in ENVELOPE}
    for col in columns[len(ENVELOPE):]:
        if not isinstance(col, Column):
            raise DeclarationError(f"bad event schema: {col!r} is not a keyshift.schemas.Column")
        if not isinstance(col.name, str) or not _NAME.match(col.name):
            raise DeclarationError(f"bad event schema: column name {col.name!r} is not a name")
        if col.name in seen:
            raise DeclarationError(f"bad event schema: column {col.name!r} declared twice "
                                   "(id, key, ts are the envelope's)")
        seen.add(col.name)
        if not is_ddl_type(col.type):
            raise DeclarationError(
                f"bad event schema: column {col.name!r} type {col.type!r} is not a Spark SQL "
                "DDL type (STRING, BIGINT, INT, DOUBLE, BOOLEAN, ARRAY<..>, ...)"
            )
        if not isinstance(col.nullable, bool):
            raise DeclarationError(f"bad event schema: column {col.name!r} nullable must be "
                                   "True or False")


def _check_required(required: object, schema: TableSchema) -> None:
    if not isinstance(required, (tuple, list)) or not all(isinstance(r, str) for r in required):
        raise DeclarationError(f"required must be a tuple of field names, got {required!r}")
    payload = set(schema.names[len(ENVELOPE):])
    missing = [r for r in required if r not in payload and r not in ("id", "key", "ts")]
    if missing:
        raise DeclarationError(
            f"required field(s) {', '.join(missing)} not declared in event_columns"
        )
