"""The one policy interface: (plan, window) → decision.

Policies follow scikit-learn's manners: parameters go to the constructor (validated, no work
done there), :meth:`Policy.decide` takes arrays and returns a :class:`Decision`, and nothing
is kept between calls except what a policy declares (none of the shipped ones keep hidden
state: CLB's load history arrives in the window). Deterministic for a given ``seed``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

import numpy as np

from keyshift.errors import FieldError
from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan


class PolicyInputError(FieldError):
    """Bad input to a policy; ``field`` names the offending input for the CLI's message."""


@dataclass(frozen=True)
class Window:
    """One statistic window: histogram Y_t (tuples per group) and state size d_i per group.

    ``history`` holds the previous windows' histograms, oldest first, shape (m, p); CLB
    needs it, the others ignore it. ``state`` defaults to the loads (time-based windows,
    where a group's state grows with its recent load).
    """

    loads: np.ndarray
    state: np.ndarray | None = None
    history: np.ndarray | None = None

    def __post_init__(self) -> None:
        loads = np.asarray(self.loads, dtype=np.float64)
        if loads.ndim != 1:
            raise PolicyInputError("loads", "must be a flat list of numbers, one per group")
        if not np.isfinite(loads).all() or (loads < 0).any():
            raise PolicyInputError("loads", "must be finite and non-negative")
        state = loads if self.state is None else np.asarray(self.state, dtype=np.float64)
        if state.shape != loads.shape:
            raise PolicyInputError(
                "state", f"has {state.size} entries, loads has {loads.size}"
            )
        if not np.isfinite(state).all() or (state < 0).any():
            raise PolicyInputError("state", "must be finite and non-negative")
        history = None
        if self.history is not None:
            history = np.asarray(self.history, dtype=np.float64)
            if history.ndim != 2 or history.shape[1] != loads.size:
                raise PolicyInputError(
                    "history", f"must be a list of windows with {loads.size} loads each"
                )
            if not np.isfinite(history).all() or (history < 0).any():
                raise PolicyInputError("history", "must be finite and non-negative")
        object.__setattr__(self, "loads", loads)
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "history", history)

    @property
    def groups(self) -> int:
        return int(self.loads.size)


@dataclass(frozen=True)
class Moves:
    """Groups that change engine, as parallel arrays (no per-move Python objects)."""

    groups: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    state: np.ndarray

    @classmethod
    def between(cls, old: Plan, new: Plan, state: np.ndarray) -> Moves:
        g = np.flatnonzero(old.assignment != new.assignment)
        return cls(g, old.assignment[g], new.assignment[g], np.asarray(state, dtype=float)[g])

    def __len__(self) -> int:
        return int(self.groups.size)

    @property
    def total_state(self) -> float:
        return float(self.state.sum())

    def to_list(self) -> list[dict[str, Any]]:
        return [
            {"group": int(g), "from": int(a), "to": int(b), "state": float(d)}
            for g, a, b, d in zip(self.groups, self.src, self.dst, self.state, strict=True)
        ]


@dataclass(frozen=True)
class SplitRouting:
    """A splitting policy's shares (PKG, dc, wc): for each entry, ``share`` of group
    ``groups[i]``'s tuples go to engine slot ``engines[i]`` instead of the plan's engine (a
    group split over k engines is listed k − 1 times)."""

    groups: np.ndarray
    engines: np.ndarray
    share: np.ndarray

    @classmethod
    def of(cls, value: SplitRouting | Mapping[str, Any] | None) -> SplitRouting | None:
        """A routing as a policy may give it: None, a SplitRouting, or a mapping with
        ``groups``, ``engines`` and ``share`` (checked where it is put in force)."""
        if value is None or isinstance(value, SplitRouting):
            return value
        try:
            return cls(np.asarray(value["groups"]), np.asarray(value["engines"]),
                       np.asarray(value["share"]))
        except (KeyError, TypeError):
            raise PolicyInputError("routing", "needs arrays groups, engines and share") from None

    def to_dict(self) -> dict[str, np.ndarray]:
        return {"groups": self.groups, "engines": self.engines, "share": self.share}


@dataclass(frozen=True)
class DecisionInfo:
    """What a policy says about its decision beyond the plan: the facts the control loop,
    the simulator and the job act on, typed, and ``details``, the policy's own facts that
    are only reported (ELB's band, added and removed engines; CLB's ħ; DLB's steps; the
    optimum's lower bound; ...).

    ``reason``: why the policy did what it did ("" if it says nothing); ``routing``: the
    split shares of a policy that splits keys (None: every group goes to its plan's engine);
    ``stateful_safe``: False when the policy keeps no key's state on one engine, so its
    moves pause nothing; ``engines_changed``: whether a policy that may change the engine
    count (ELB) did (None: the policy never does); ``split_keys``: how many keys a splitting
    policy split.

    A policy's ``_decide`` may return a plain dict instead (a third-party policy written
    before this type): :meth:`of` takes the typed facts out of it by these names and keeps
    the rest as ``details``. :meth:`as_dict` gives the flat dict back, the ``info`` of
    ``keyshift rebalance --json``.
    """

    reason: str = ""
    routing: SplitRouting | None = None
    stateful_safe: bool = True
    engines_changed: bool | None = None
    split_keys: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    TYPED: ClassVar[tuple[str, ...]] = ("reason", "routing", "stateful_safe",
                                        "engines_changed", "split_keys")

    @classmethod
    def of(cls, info: DecisionInfo | Mapping[str, Any] | None) -> DecisionInfo:
        if isinstance(info, DecisionInfo):
            return info
        details = dict(info or {})
        typed = {k: details.pop(k) for k in cls.TYPED if k in details}
        if "reason" in typed:
            typed["reason"] = str(typed["reason"] or "")
        if "routing" in typed:
            typed["routing"] = SplitRouting.of(typed["routing"])
        if "stateful_safe" in typed:
            typed["stateful_safe"] = typed["stateful_safe"] is not False
        if typed.get("engines_changed") is not None:
            typed["engines_changed"] = bool(typed["engines_changed"])
        if "split_keys" in typed:
            typed["split_keys"] = int(typed["split_keys"])
        return cls(**typed, details=details)

    def as_dict(self) -> dict[str, Any]:
        """The facts as one flat dict: the typed ones the policy reported (a reason, a
        routing with its split keys, ``stateful_safe`` when false, ``engines_changed`` when
        the policy may scale), then the details."""
        out: dict[str, Any] = {}
        if self.reason:
            out["reason"] = self.reason
        if self.routing is not None or self.split_keys:
            out["split_keys"] = self.split_keys
        if self.routing is not None:
            out["routing"] = self.routing.to_dict()
        if not self.stateful_safe:
            out["stateful_safe"] = False
        if self.engines_changed is not None:
            out["engines_changed"] = self.engines_changed
        out.update(self.details)
        return out


@dataclass(frozen=True)
class Decision:
    """What a policy decided for one window, with the metrics before and after.

    ``engine_loads_after`` overrides the loads implied by ``plan`` for policies that split a
    group over engines (PKG); ``info`` is the policy's :class:`DecisionInfo` (the reason,
    PKG's split routing, whether ELB changed the engine count, and the policy's details).
    """

    plan: Plan
    moves: Moves
    before: Balance
    after: Balance
    elapsed_ms: float = 0.0
    info: DecisionInfo = field(default_factory=DecisionInfo)

    @property
    def changed(self) -> bool:
        return len(self.moves) > 0 or bool(self.info.engines_changed)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``keyshift rebalance`` (see the CLI contract)."""
        return {
            "plan": self.plan.assignment.tolist(),
            "engines": self.plan.parallelism,
            "slots": self.plan.slots,
            "live": self.plan.live.tolist(),
            "moves": self.moves.to_list(),
            "before": {"rstd": self.before.rstd, "var": self.before.var},
            "after": {"rstd": self.after.rstd, "var": self.after.var},
            "moved_groups": len(self.moves),
            "moved_state": self.moves.total_state,
            "elapsed_ms": self.elapsed_ms,
            "info": _jsonable(self.info.as_dict()),
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Router(Protocol):
    """Per-tuple routing for the simulator (a policy that decides tuple by tuple, not per
    window): tuples per engine slot for one tick's arrivals per group under ``plan``."""

    def route(self, counts: np.ndarray, plan: Plan) -> np.ndarray: ...


class PolicyKind(StrEnum):
    """What a policy is to the streaming job (every kind decides in the simulator and in
    ``keyshift rebalance``). A policy class declares its kind once, as ``kind``; the registry
    (:mod:`keyshift.policies.registry`) and every command derive their lists from it."""

    ONLINE = "online"
    """Decides every statistic window; the job's controller calls :meth:`Policy.decide`
    (dlb-h, dlb-l, dlb-s, elb)."""
    FIXED = "fixed"
    """Never rebalances: the job routes by key grouping's hashed plan and never calls the
    policy (kg)."""
    FROM_PLANS = "from-plans"
    """An offline plan: the batch layer writes it to Delta ``plans`` (scope ``baseline``) and
    the job routes by it, unchanged (lptf, clb, uhlb)."""
    SPLITTER = "splitter"
    """Splits hot keys' events over engines, for operators that merge partial state; sets
    ``splits_keys`` (dc, wc)."""
    REFERENCE = "reference"
    """Offline reference or per-tuple router, for the simulator and ``keyshift rebalance``
    only; ``keyshift run`` refuses it (pkg, optimal)."""


class Policy(ABC):
    """Base of every balancing policy. Subclasses implement :meth:`_decide`.

    A concrete policy declares, as class attributes, ``name`` (what users type; ``aliases``
    are more names for it) and ``kind`` (a :class:`PolicyKind`); its parameters are its
    constructor's keyword arguments. The registry refuses a class without a valid kind.
    """

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    kind: ClassVar[PolicyKind]
    splits_keys: ClassVar[bool] = False
    """True when one group's tuples may go to several engines (PKG, dc, wc): each engine then
    holds partial state of the key, so only an operator that merges partial per-key state
    gives the complex events of key grouping (:func:`keyshift.policies.check_operator`)."""

    def router(self, groups: int) -> Router | None:
        """The simulator's per-tuple router, or None to route each window by the decision's
        plan (and ``info.routing``, a :class:`SplitRouting`)."""
        return None

    def decide(self, plan: Plan, window: Window) -> Decision:
        """Validate, time and run the policy; metrics before/after are filled in here."""
        if plan.groups != window.groups:
            raise PolicyInputError(
                "plan", f"has {plan.groups} groups, loads has {window.groups}"
            )
        t0 = time.perf_counter()
        new_plan, info, loads_after = self._decide(plan, window)
        elapsed = (time.perf_counter() - t0) * 1e3
        before = Balance.of(live_loads(plan.assignment, window.loads, plan.live))
        after_loads = (
            live_loads(new_plan.assignment, window.loads, new_plan.live)
            if loads_after is None
            else loads_after
        )
        if new_plan is not plan and np.array_equal(new_plan.assignment, plan.assignment) and (
            new_plan.slots == plan.slots and np.array_equal(new_plan.live, plan.live)
        ):
            new_plan = plan  # nothing changed: keep the version
        return Decision(
            plan=new_plan,
            moves=Moves.between(plan, new_plan, window.state),
            before=before,
            after=Balance.of(after_loads),
            elapsed_ms=elapsed,
            info=DecisionInfo.of(info),
        )

    @abstractmethod
    def _decide(
        self, plan: Plan, window: Window
    ) -> tuple[Plan, DecisionInfo | dict[str, Any], np.ndarray | None]:
        """Return (new plan, info, live engines' loads after or None to derive from plan);
        ``info`` a :class:`DecisionInfo` or a plain dict of facts (:meth:`DecisionInfo.of`)."""

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"
