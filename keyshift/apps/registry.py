"""One resolver from an operator spec to the operator class and its event schema.

Every layer that needs "the operator" (the engines, ingestion's typed parse, the job's
checks, the CLI) goes through :func:`resolve_operator`, so a spec means the same thing
everywhere. Three forms, tried in this order:

1. a shipped application's name (``fsd``, ``traffic``, ``clicks``, ``wordcount``,
   ``heavy``): always
   available, even from a source tree that was never installed;
2. the name of an entry point in group ``keyshift.operators`` (how an installed package
   offers its operators, as ``keyshift.commands`` offers sub-commands);
3. ``module:Class`` (``Class`` may be dotted for a nested class): anything importable on the
   driver's and the executors' Python path.

The result is cached per spec: engines resolve their operator in every task.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from keyshift.apps.base import Operator, OperatorInputError
from keyshift.apps.clicks import ClickPatterns
from keyshift.apps.declaration import DeclarationError, check_declaration
from keyshift.apps.fsd import FirstStoryDetection
from keyshift.apps.heavy import HeavyRule
from keyshift.apps.traffic import TrafficAnomaly
from keyshift.apps.wordcount import WindowedWordCount
from keyshift.schemas import TableSchema

ENTRY_POINT_GROUP = "keyshift.operators"

SHIPPED: dict[str, type[Operator]] = {
    "fsd": FirstStoryDetection,
    "traffic": TrafficAnomaly,
    "clicks": ClickPatterns,
    "wordcount": WindowedWordCount,
    "heavy": HeavyRule,
}


class UnknownOperatorError(OperatorInputError, KeyError):
    """A spec that names no operator. Also a ``KeyError``, as ``event_schema`` raised before
    operators declared their own schemas."""

    __str__ = ValueError.__str__  # KeyError would quote the one-line message


@dataclass(frozen=True)
class OperatorSpec:
    """A resolved operator: what the spec named, the class, its event schema and API version.

    ``origin`` is ``shipped``, ``entry point`` or ``module``.
    """

    name: str
    cls: type[Operator]
    schema: TableSchema
    api_version: int
    origin: str

    def parameters(self) -> list[str] | None:
        """The names the operator's constructor takes (None: it takes any ``**kwargs``)."""
        sig = inspect.signature(self.cls.__init__)
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return [n for n, p in list(sig.parameters.items())[1:]
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    def build(self, **params: Any) -> Operator:
        """A new operator with the rule's parameters; a bad parameter names the field, an
        unknown one is named with the ones the operator takes."""
        known = self.parameters()
        unknown = [k for k in params if known is not None and k not in known]
        if unknown:
            takes = ", ".join(known) if known else "no parameters"
            raise OperatorInputError(
                "params", f"{self.name}: unknown parameter {', '.join(map(repr, unknown))}; "
                f"{self.name} takes {takes}")
        try:
            return self.cls(**params)
        except TypeError as exc:
            raise OperatorInputError("params", f"{self.name}: {exc}") from None


def _fail(spec: str, message: str) -> OperatorInputError:
    return OperatorInputError("app", f"{spec}: {message}")


def _operator_entry_points() -> dict[str, Any]:
    """Entry points of group ``keyshift.operators`` by name (a seam for tests)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _import_class(spec: str) -> type:
    module_name, _, qualname = spec.partition(":")
    module_name, qualname = module_name.strip(), qualname.strip()
    if not module_name or not qualname:
        raise _fail(spec, "expected module:Class")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            hint = ""
            if Path(f"{missing.replace('.', '/')}.py").is_file() or Path(missing).is_dir():
                # the keyshift script does not put the current folder on the path
                hint = (f"; it is in the current folder: give it with --py-files "
                        f"{missing.split('.')[0]}{'' if Path(missing).is_dir() else '.py'}")
            raise _fail(spec, f"module {module_name!r} is not importable (no module named "
                              f"{missing!r} on the Python path){hint}") from None
        raise _fail(spec, f"importing module {module_name!r} failed: {exc}") from None
    except Exception as exc:  # a user's module that raises on import
        raise _fail(spec, f"importing module {module_name!r} failed: "
                          f"{type(exc).__name__}: {exc}") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise _fail(spec, f"module {module_name!r} has no class {qualname!r}")
        obj = getattr(obj, part)
    return obj


def _load_entry_point(spec: str, ep: Any) -> type:
    try:
        return ep.load()
    except Exception as exc:
        raise _fail(spec, f"entry point {ep.name} = {ep.value!r} of group {ENTRY_POINT_GROUP} "
                          f"does not load: {type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=128)
def resolve_operator(spec: str) -> OperatorSpec:
    """The operator a spec names (shipped name, entry point name, or ``module:Class``).

    Raises :class:`OperatorInputError` (field ``app``) with one line for an unknown name, a
    module that does not import, a missing class, a class that is not an :class:`Operator`,
    an unsupported API version or a bad event schema declaration.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise OperatorInputError("app", f"expected an operator name or module:Class, got {spec!r}")
    if spec in SHIPPED:
        cls, origin = SHIPPED[spec], "shipped"
    elif ":" in spec:
        cls, origin = _import_class(spec), "module"
    else:
        eps = _operator_entry_points()
        if spec not in eps:
            names = sorted(set(SHIPPED) | set(eps))
            module, dot, qualname = spec.rpartition(".")
            hint = f"; did you mean {module}:{qualname}?" if dot and module and qualname else ""
            raise UnknownOperatorError(
                "app",
                f"unknown application {spec!r}; choose one of {', '.join(names)} "
                f"(shipped or entry points of {ENTRY_POINT_GROUP}), or module:Class{hint}",
            )
        cls, origin = _load_entry_point(spec, eps[spec]), "entry point"
    try:
        schema = check_declaration(cls)
    except DeclarationError as exc:
        raise _fail(spec, str(exc)) from None
    return OperatorSpec(spec, cls, schema, cls.api_version, origin)


def known_operator(name: Any) -> type[Operator] | None:
    """The operator class a name read back from a table or a run's file means on this host,
    without importing anything the name chooses: a shipped application's name, or the name
    of an installed entry point of group ``keyshift.operators`` (code the host's owner
    installed). ``module:Class`` and anything else is None: whoever can write the warehouse
    must not choose a module for its reader to import (:func:`resolve_operator` is for specs
    a person typed)."""
    if not isinstance(name, str) or not name or ":" in name:
        return None
    if name in SHIPPED:
        return SHIPPED[name]
    ep = _operator_entry_points().get(name)
    if ep is None:
        return None
    try:
        cls = _load_entry_point(name, ep)
        check_declaration(cls)
    except (OperatorInputError, DeclarationError):
        return None
    return cls


def make_operator(spec: str, **params: Any) -> Operator:
    """Build the operator a spec names; a bad spec or parameter names the field."""
    return resolve_operator(spec).build(**params)


def shipped_event_schemas() -> dict[str, TableSchema]:
    """The shipped applications' event schemas by name (``keyshift.apps.EVENTS``)."""
    return {name: resolve_operator(name).schema for name in SHIPPED}


def event_schema(spec: str) -> TableSchema:
    """The Kafka event schema of an operator spec: a shipped application's name, an entry
    point of group ``keyshift.operators`` or ``module:Class``; the envelope (id, key, ts)
    from keyshift.schemas plus the payload the operator declares."""
    return resolve_operator(spec).schema
