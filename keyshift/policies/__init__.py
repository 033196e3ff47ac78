"""Balancing policies behind one interface (see :mod:`keyshift.policies.base`).

``make_policy(name, **params)`` is the one way to build a policy from a name and parameters
(the CLI, the simulator, the streaming controller and the batch jobs all use it).
"""

from __future__ import annotations

import importlib
from typing import Any

from keyshift.policies.base import Decision, Moves, Policy, PolicyInputError, Window

# name → "module:Class"; modules are imported on first use so that a policy with heavy
# imports (the MILP) costs nothing to the others.
REGISTRY: dict[str, str] = {
    "kg": "keyshift.policies.kg:KeyGrouping",
    "dlb-h": "keyshift.policies.dlb:DLBHeavy",
    "dlb-l": "keyshift.policies.dlb:DLBLight",
    "dlb-s": "keyshift.policies.dlbs:DLBState",
    "lptf": "keyshift.policies.lptf:LongestProcessingTimeFirst",
    "uhlb": "keyshift.policies.uhlb:UniversalHashing",
    "pkg": "keyshift.policies.pkg:PartialKeyGrouping",
    "dc": "keyshift.policies.choices:DChoices",
    "wc": "keyshift.policies.choices:WChoices",
    "elb": "keyshift.policies.elb:EagerLoadBalancing",
    "clb": "keyshift.policies.clb:CorrelationLoadBalancing",
    "optimal": "keyshift.policies.optimal:ExactReference",
}


def policy_names() -> list[str]:
    return sorted(REGISTRY)


def policy_class(name: str) -> type[Policy]:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise PolicyInputError(
            "policy", f"unknown policy {name!r}; choose one of {', '.join(policy_names())}"
        ) from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def make_policy(name: str, **params: Any) -> Policy:
    """Build a policy; unknown or invalid parameters raise PolicyInputError naming them."""
    cls = policy_class(name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise PolicyInputError("params", f"{name}: {exc}") from None


def check_operator(policy: str, operator: Any) -> None:
    """Refuse a key-splitting policy for an operator that cannot merge partial per-key state.

    A split key's events reach several engines, each with part of the key's state; only an
    operator that declares ``mergeable`` can combine the parts into what key grouping would
    have computed. An FSD or CEP pattern cannot: a pattern spanning two engines' halves is
    missed and each half's partial state raises false positives (dlb §5). ``operator`` is an
    :class:`keyshift.apps.base.Operator` class or instance.
    """
    cls = policy_class(policy)
    if not cls.splits_keys:
        return
    op = operator if isinstance(operator, type) else type(operator)
    if getattr(op, "mergeable", False):
        return
    app = getattr(op, "app", op.__name__)
    raise PolicyInputError(
        "policy",
        f"{policy} splits a hot key's events over several engines, but operator {app!r} "
        f"({op.__name__}) does not merge partial per-key state (mergeable = False): its "
        f"complex events would differ from key grouping's; use a policy that moves whole "
        f"key groups (e.g. dlb-h, lptf, elb)",
    )


__all__ = [
    "Decision",
    "Moves",
    "Policy",
    "PolicyInputError",
    "REGISTRY",
    "Window",
    "check_operator",
    "make_policy",
    "policy_class",
    "policy_names",
]
