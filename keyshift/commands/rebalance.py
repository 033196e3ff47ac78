"""``keyshift rebalance --policy NAME``: one balancing decision, JSON in on stdin, JSON out.

In:  {"engines": N, "plan": [engine per group] | null, "loads": [...], "state": [...]?,
      "history": [[...], ...]?, "live": [bool per engine]?, "params": {...}?}
Out: {"plan", "engines" (live π), "moves", "before", "after", "moved_groups",
      "moved_state", "elapsed_ms", "slots", "live", "info"}

This is a contract other tools script against, so every bad input ends in exit status 2
and one line that names the field, never a traceback. ``params`` go to the policy's
constructor; the keys shared by the controller's configuration (theta, band, seed) are
dropped, and listed in ``info.ignored_params``, for policies that do not use them, so a
caller may send one parameter set to any policy. Any other unknown key is an error.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from typing import Any

import numpy as np

from keyshift.cli import UsageError, add_json_options, json_indent
from keyshift.commands.json_request import key_name, read_request
from keyshift.control.once import decide_once
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, Window, policy_class, policy_names

READS_CONFIG = False  # keyshift.cli: no --config

SUMMARY = "one balancing decision for the loads you give (JSON)"

FIELDS = {"engines", "plan", "loads", "state", "history", "live", "params"}
SHARED_PARAMS = {"theta", "band", "seed"}


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "rebalance",
        help=SUMMARY,
        description="Read one JSON object from stdin (or --input): the engine count, the "
        "current plan, the load of each key group and, for some policies, state sizes and "
        "past windows. Run the policy once and print one JSON object: the new plan, the "
        "moves, and the imbalance before and after. A bad field is one line naming it, exit "
        "status 2. The fields are in docs/policies.md.",
    )
    p.add_argument("--policy", required=True, help=f"one of: {', '.join(policy_names())} "
                   "(shipped, or an entry point of group keyshift.policies)")
    p.add_argument("--input", help="read the JSON object from this file instead of stdin")
    add_json_options(p, json_help=None)  # always JSON; --pretty (old --indent N: hidden)
    p.set_defaults(func=run)
    return p


def _numbers(value: Any, field: str, ndim: int) -> np.ndarray:
    if not isinstance(value, list):
        raise UsageError(f"{field}: must be a list of numbers")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise UsageError(f"{field}: must be a list of numbers") from None
    except OverflowError:  # a JSON integer beyond float range
        raise UsageError(f"{field}: must contain only finite numbers (one is too large "
                         "for a float)") from None
    if arr.ndim != ndim:
        shape = "a list of numbers" if ndim == 1 else "a list of lists of numbers of equal length"
        raise UsageError(f"{field}: must be {shape}")
    if not np.isfinite(arr).all():
        raise UsageError(f"{field}: must contain only finite numbers")
    if (arr < 0).any():
        i = int(np.argmax((arr < 0).reshape(-1)))
        raise UsageError(f"{field}: must be non-negative (entry {i} is {arr.reshape(-1)[i]:g})")
    return arr


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{field}: must be an integer, got {json.dumps(value)}")
    return value


def parse_request(doc: Any) -> tuple[Plan, Window, dict[str, Any]]:
    """Validate the input object into (plan, window, params); UsageError names the field."""
    if not isinstance(doc, dict):
        raise UsageError("input: must be a JSON object")
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        raise UsageError(f"{key_name(unknown[0])}: unknown field; expected {', '.join(sorted(FIELDS))}")
    for required in ("engines", "loads"):
        if required not in doc:
            raise UsageError(f"{required}: missing")
    engines = _integer(doc["engines"], "engines")
    if engines < 1:
        raise UsageError(f"engines: must be >= 1, got {engines}")
    loads = _numbers(doc["loads"], "loads", 1)
    if loads.size == 0:
        raise UsageError("loads: must have one entry per key group (got none)")
    p = loads.size
    state = None if doc.get("state") is None else _numbers(doc["state"], "state", 1)
    if state is not None and state.size != p:
        raise UsageError(f"state: has {state.size} entries, loads has {p}")
    history = None
    if doc.get("history") is not None:
        history = _numbers(doc["history"], "history", 2)
        if history.shape[1] != p:
            raise UsageError(f"history: windows have {history.shape[1]} entries, loads has {p}")
    live = None
    if doc.get("live") is not None:
        raw = doc["live"]
        if not isinstance(raw, list) or not all(isinstance(v, bool) for v in raw):
            raise UsageError("live: must be a list of true/false, one per engine")
        if len(raw) != engines:
            raise UsageError(f"live: has {len(raw)} entries, engines is {engines}")
        if not any(raw):
            raise UsageError("live: needs at least one live engine")
        live = np.asarray(raw, dtype=bool)
    if doc.get("plan") is None:
        assignment = np.arange(p, dtype=np.int64) % engines
        if live is not None:  # KG over the live slots
            assignment = np.flatnonzero(live)[np.arange(p) % int(live.sum())]
    else:
        raw = doc["plan"]
        if not isinstance(raw, list):
            raise UsageError("plan: must be a list of engine ids (one per group) or null")
        try:
            assignment = np.asarray(raw)
        except ValueError:
            raise UsageError("plan: must be a list of engine ids") from None
        if assignment.ndim != 1 or (assignment.size and assignment.dtype.kind not in "iu"):
            raise UsageError("plan: must be a list of integer engine ids")
        if assignment.size != p:
            raise UsageError(f"plan: has {assignment.size} entries, loads has {p}")
        bad = np.flatnonzero((assignment < 0) | (assignment >= engines))
        if bad.size:
            g = int(bad[0])
            raise UsageError(
                f"plan: group {g} is on engine {int(assignment[g])}, outside 0..{engines - 1}"
            )
        if live is not None and not live[assignment].all():
            g = int(np.flatnonzero(~live[assignment])[0])
            raise UsageError(f"plan: group {g} is on engine {int(assignment[g])}, which is not live")
    params = doc.get("params") or {}
    if not isinstance(params, dict):
        raise UsageError("params: must be a JSON object")
    try:
        window = Window(loads, state=state, history=history)
    except PolicyInputError as exc:
        raise UsageError(str(exc)) from None
    return Plan(assignment.astype(np.int64), engines, live=live), window, params


def build_policy(name: str, params: dict[str, Any]) -> tuple[Any, list[str]]:
    try:
        cls = policy_class(name)
    except PolicyInputError as exc:
        raise UsageError(str(exc)) from None
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    ignored = sorted(k for k in params if k not in accepted and k in SHARED_PARAMS)
    unknown = sorted(k for k in params if k not in accepted and k not in SHARED_PARAMS)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "no parameters"
        raise UsageError(f"params.{key_name(unknown[0])}: policy {name} does not take it (takes {takes})")
    try:
        return cls(**{k: v for k, v in params.items() if k in accepted}), ignored
    except PolicyInputError as exc:
        raise UsageError(str(exc)) from None
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. theta = 1e400 as an integer
        raise UsageError(f"params: {str(exc).splitlines()[0][:200]}") from None


def run(args: argparse.Namespace) -> int:
    doc = read_request(args.input)
    plan, window, params = parse_request(doc)
    policy, ignored = build_policy(args.policy, params)
    try:
        decision = decide_once(policy, plan, window, args.policy)
    except PolicyInputError as exc:
        raise UsageError(str(exc)) from None
    except (TypeError, ValueError, OverflowError) as exc:  # a parameter of the wrong type
        raise UsageError(f"params: {str(exc).splitlines()[0][:200]}") from None
    out = decision.to_dict()
    if ignored:
        out["info"]["ignored_params"] = ignored
    sys.stdout.write(json.dumps(out, indent=json_indent(args)) + "\n")
    return 0
