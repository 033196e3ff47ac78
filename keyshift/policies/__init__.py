"""Balancing policies behind one interface (see :mod:`keyshift.policies.base`).

A policy class declares its name, kind and parameters once; :mod:`keyshift.policies.registry`
lists the shipped ones and the installed packages' (entry points of group
``keyshift.policies``). ``make_policy(name, **params)`` is the one way to build a policy from
a name and parameters (the CLI, the simulator, the streaming controller and the batch jobs
all use it).
"""

from __future__ import annotations

from typing import Any

from keyshift.policies.base import (
    Decision,
    DecisionInfo,
    Moves,
    Policy,
    PolicyInputError,
    PolicyKind,
    SplitRouting,
    Window,
)
from keyshift.policies.registry import (
    ENTRY_POINT_GROUP,
    JOB_KINDS,
    REGISTRY,
    PolicyInfo,
    make_policy,
    policy_class,
    policy_info,
    policy_kind,
    policy_names,
)


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
    "DecisionInfo",
    "ENTRY_POINT_GROUP",
    "JOB_KINDS",
    "Moves",
    "Policy",
    "PolicyInfo",
    "PolicyInputError",
    "PolicyKind",
    "REGISTRY",
    "SplitRouting",
    "Window",
    "check_operator",
    "make_policy",
    "policy_class",
    "policy_info",
    "policy_kind",
    "policy_names",
]
