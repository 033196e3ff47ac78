"""The one list of balancing policies, and the one resolver from a name to a policy class.

A policy declares itself once, on its class: ``name`` (and ``aliases``), ``kind`` (a
:class:`~keyshift.policies.base.PolicyKind`: what the streaming job does with it) and its
parameters (the constructor's keyword arguments). This module lists the shipped classes,
adds the installed packages' policies (entry points of group ``keyshift.policies``,
``name = "module:Class"``) and answers every consumer: ``make_policy``, the commands'
``--policy`` choices, the validation of ``controller.policy``, the job's controller (online
or a plan from the batch layer) and the demo. Two names resolve in this order:

1. a shipped policy's name (always available, even from a source tree never installed);
2. the name of an entry point of group ``keyshift.policies`` (how an installed package
   offers its policies, as ``keyshift.operators`` offers operators).

A name nobody declares, a class of the wrong kind for the command, an entry point that does
not load or whose object is not a :class:`~keyshift.policies.base.Policy` are refused with
one line (a :class:`~keyshift.policies.base.PolicyInputError` on field ``policy``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from keyshift.policies.base import Policy, PolicyInputError, PolicyKind

ENTRY_POINT_GROUP = "keyshift.policies"

# The shipped policy classes ("module:Class"); their names and kinds are on the classes.
SHIPPED: tuple[str, ...] = (
    "keyshift.policies.kg:KeyGrouping",
    "keyshift.policies.dlb:DLBHeavy",
    "keyshift.policies.dlb:DLBLight",
    "keyshift.policies.dlbs:DLBState",
    "keyshift.policies.elb:EagerLoadBalancing",
    "keyshift.policies.lptf:LongestProcessingTimeFirst",
    "keyshift.policies.clb:CorrelationLoadBalancing",
    "keyshift.policies.uhlb:UniversalHashing",
    "keyshift.policies.choices:DChoices",
    "keyshift.policies.choices:WChoices",
    "keyshift.policies.pkg:PartialKeyGrouping",
    "keyshift.policies.optimal:ExactReference",
)

ALL_KINDS: tuple[PolicyKind, ...] = tuple(PolicyKind)
# What the streaming job runs (``keyshift run``, ``controller.policy``); reference policies
# are for the simulator and ``keyshift rebalance``.
JOB_KINDS: tuple[PolicyKind, ...] = (PolicyKind.ONLINE, PolicyKind.FIXED,
                                     PolicyKind.FROM_PLANS, PolicyKind.SPLITTER)
# Where a policy's whole groups move and each group's state stays on one engine
# (``keyshift stream``, ``keyshift demo``).
WHOLE_GROUP_KINDS: tuple[PolicyKind, ...] = (PolicyKind.ONLINE, PolicyKind.FIXED,
                                             PolicyKind.FROM_PLANS)


@dataclass(frozen=True)
class PolicyInfo:
    """A resolved policy: the name it was asked by, its class, kind and where it came from.

    ``origin`` is ``shipped`` or ``entry point``; ``target`` is ``module:Class``.
    """

    name: str
    cls: type[Policy]
    kind: PolicyKind
    origin: str
    target: str

    def parameters(self) -> list[str] | None:
        """The names the policy's constructor takes (None: it takes any ``**kwargs``)."""
        if self.cls.__init__ is object.__init__:
            return []
        sig = inspect.signature(self.cls.__init__)
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return [n for n, p in list(sig.parameters.items())[1:]
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    def build(self, **params: Any) -> Policy:
        """A new policy; a parameter its constructor refuses raises PolicyInputError on
        ``params`` naming the policy (its own checks name their field)."""
        try:
            return self.cls(**params)
        except TypeError as exc:
            raise PolicyInputError("params", f"{self.name}: {exc}") from None


def _kind_of(cls: Any, what: str) -> PolicyKind:
    """The declared kind of a policy class, checked; ``what`` names it in the message."""
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PolicyInputError(
            "policy", f"{what} is {_describe(cls)}, not a subclass of keyshift.policies.Policy")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise PolicyInputError("policy",
                               f"{what}: {cls.__name__} is abstract (implement {missing})")
    kinds = ", ".join(k.value for k in PolicyKind)
    declared = getattr(cls, "kind", None)
    try:
        kind = PolicyKind(declared)
    except ValueError:
        said = "declares no kind" if declared is None else f"declares kind {declared!r}"
        raise PolicyInputError(
            "policy", f"{what}: {cls.__name__} {said}; set the class attribute kind to one "
            f"of {kinds} (keyshift.policies.PolicyKind)") from None
    if cls.splits_keys and kind not in (PolicyKind.SPLITTER, PolicyKind.REFERENCE):
        raise PolicyInputError(
            "policy", f"{what}: {cls.__name__} splits keys (splits_keys = True), so its kind "
            f"must be {PolicyKind.SPLITTER.value} or {PolicyKind.REFERENCE.value}, "
            f"not {kind.value}")
    if kind is PolicyKind.SPLITTER and not cls.splits_keys:
        raise PolicyInputError(
            "policy",
            f"{what}: {cls.__name__} is a {kind.value} but does not set splits_keys = True")
    return kind


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__name__} object"


@functools.cache
def _shipped() -> dict[str, PolicyInfo]:
    """Every shipped policy by each of its names (imports the shipped modules, once)."""
    found: dict[str, PolicyInfo] = {}
    for target in SHIPPED:
        module, _, qualname = target.partition(":")
        cls = getattr(importlib.import_module(module), qualname)
        kind = _kind_of(cls, target)
        for name in (cls.name, *cls.aliases):
            if name in found:
                raise RuntimeError(f"policy name {name!r} declared twice: {target}, "
                                   f"{found[name].target}")
            found[name] = PolicyInfo(name, cls, kind, "shipped", target)
    return found


def _entry_points() -> dict[str, Any]:
    """Entry points of group ``keyshift.policies`` by name (a seam for tests)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


@functools.lru_cache(maxsize=64)
def _from_entry_point(name: str, value: str) -> PolicyInfo:
    what = f"entry point {name} = {value!r} of group {ENTRY_POINT_GROUP}"
    ep = _entry_points().get(name)
    if ep is None or ep.value != value:
        raise PolicyInputError("policy", f"{what} is no longer installed")
    try:
        cls = ep.load()
    except Exception as exc:  # a third party's module that fails to import, or no such class
        why = str(exc).splitlines()[0] if str(exc) else ""
        raise PolicyInputError("policy", f"{what} does not load: {type(exc).__name__}"
                               + (f": {why}" if why else "")) from None
    kind = _kind_of(cls, what)
    return PolicyInfo(name, cls, kind, "entry point", value)


def clear_cache() -> None:
    """Forget the entry points seen (after installing or removing a package in-process)."""
    _from_entry_point.cache_clear()


def _kinds(kinds: Iterable[PolicyKind | str] | None) -> tuple[PolicyKind, ...]:
    return ALL_KINDS if kinds is None else tuple(PolicyKind(k) for k in kinds)


def _installed(kinds: Collection[PolicyKind]) -> Iterator[PolicyInfo]:
    """The entry points' policies of those kinds; one that does not load is left out of
    listings (choosing it by name says why)."""
    shipped = _shipped()
    for name, ep in sorted(_entry_points().items()):
        if name in shipped:
            continue  # a shipped name always means the shipped policy
        try:
            info = _from_entry_point(name, ep.value)
        except PolicyInputError:
            continue
        if info.kind in kinds:
            yield info


def policy_names(kinds: Iterable[PolicyKind | str] | None = None) -> list[str]:
    """The names a user may choose, shipped and installed, of ``kinds`` (default: all)."""
    wanted = _kinds(kinds)
    names = {n for n, info in _shipped().items() if info.kind in wanted}
    names.update(info.name for info in _installed(wanted))
    return sorted(names)


def _kind_list(kinds: tuple[PolicyKind, ...]) -> str:
    return ", ".join(k.value for k in kinds)


def policy_info(name: str, kinds: Iterable[PolicyKind | str] | None = None,
                use: str = "") -> PolicyInfo:
    """The policy a name declares, refused in one line when unknown, broken, or not of
    ``kinds`` (``use`` says what refuses it, e.g. ``keyshift run``)."""
    wanted = _kinds(kinds)
    if not isinstance(name, str) or not name:
        raise PolicyInputError("policy", f"expected a policy name, got {name!r}")
    info = _shipped().get(name)
    if info is None:
        ep = _entry_points().get(name)
        if ep is None:
            raise PolicyInputError(
                "policy", f"unknown policy {name!r}; choose one of "
                f"{', '.join(policy_names(wanted))} (shipped, or an entry point of group "
                f"{ENTRY_POINT_GROUP})")
        info = _from_entry_point(name, ep.value)
    if info.kind not in wanted:
        where = f" for {use}" if use else ""
        raise PolicyInputError(
            "policy", f"{name} is a {info.kind.value} policy, not one{where} "
            f"({_kind_list(wanted)}); choose one of {', '.join(policy_names(wanted))}")
    return info


def policy_class(name: str) -> type[Policy]:
    """The class a policy name declares (shipped or an entry point)."""
    return policy_info(name).cls


def policy_kind(name: str) -> PolicyKind:
    return policy_info(name).kind


def make_policy(name: str, **params: Any) -> Policy:
    """Build a policy; unknown or invalid parameters raise PolicyInputError naming them."""
    return policy_info(name).build(**params)


class _ShippedTargets(Mapping[str, str]):
    """``REGISTRY``: the shipped policies' names → ``module:Class``, read from the classes
    on first use (kept for callers that test ``name in REGISTRY``)."""

    def __getitem__(self, name: str) -> str:
        return _shipped()[name].target

    def __iter__(self) -> Iterator[str]:
        return iter(_shipped())

    def __len__(self) -> int:
        return len(_shipped())

    def __repr__(self) -> str:
        return f"REGISTRY({dict(self)!r})"


REGISTRY: Mapping[str, str] = _ShippedTargets()


__all__ = [
    "ALL_KINDS",
    "ENTRY_POINT_GROUP",
    "JOB_KINDS",
    "REGISTRY",
    "SHIPPED",
    "WHOLE_GROUP_KINDS",
    "PolicyInfo",
    "PolicyKind",
    "clear_cache",
    "make_policy",
    "policy_class",
    "policy_info",
    "policy_kind",
    "policy_names",
]
