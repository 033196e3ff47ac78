"""``keyshift plan-engines``: one planning step of elastic-cep §III-C over JSON.

Reads one object on stdin (engines now, limits, Δt, selectivity, costs and per-window
forecasts of In and Lat for 1..K engines) and prints one object: the engine count per
window, its expected cost (Eq. 11 on the means) and σ, where the path is rejected (θ1),
and the planner's time. Kept to the pure core so it starts in milliseconds and can be
driven by any controller, not only keyshift's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from keyshift.cli import add_json_options, json_indent
from keyshift.commands.json_request import key_name, read_request
from keyshift.elastic.cost import OBJECTIVES, Forecast
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.planner import GraphPlanner, check_count, check_nonneg

READS_CONFIG = False  # keyshift.cli: no --config

SUMMARY = "plan the engines per coming window from forecasts (JSON)"

_KNOWN = {
    "engines_now", "min_engines", "max_engines", "window_s", "sel", "costs", "windows",
    "theta1", "cooldown_windows", "windows_since_change", "max_step", "objective",
}
_WINDOW_KEYS = ("in_mean", "in_std", "lat_mean", "lat_std")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plan-engines",
        help=SUMMARY,
        description=(
            "Read one JSON object on stdin: {engines_now, min_engines, max_engines, window_s, "
            "sel, costs: {mc, ec, rc}, windows: [{in_mean, in_std, lat_mean: [s/tuple for "
            "1..K engines], lat_std: [...]}, ...]}; optional theta1, max_step, "
            "cooldown_windows, windows_since_change, objective (mean|expected), and per "
            "window in_floor (tuples the capacity must cover: the burst reserve). Print "
            "{path, cost, cost_std, rejected_at, elapsed_ms}."
        ),
    )
    p.add_argument("--input", "-i", help="read the JSON from this file instead of stdin")
    add_json_options(p, json_help=None)  # always JSON; --pretty indents it
    p.set_defaults(func=run)
    return p


def _nonneg(name: str, value: object) -> float:
    """``check_nonneg``, with an integer too large for a float refused by name (a JSON
    number may have any number of digits; float() raises OverflowError on them)."""
    try:
        return check_nonneg(name, value)
    except OverflowError:
        raise ElasticInputError(name, "must be a finite number >= 0, got an integer too "
                                      "large for a float") from None


def _get(obj: dict[str, Any], key: str, default: Any = None, required: bool = False) -> Any:
    if key not in obj:
        if required:
            raise ElasticInputError(key, "is required")
        return default
    return obj[key]


def parse_request(doc: Any) -> tuple[GraphPlanner, Forecast, int, int | None, list | None]:
    """Validate the request object; every error names its field. Returns the planner, the
    forecast, engines_now, windows_since_change and the per-window floors (None: none)."""
    if not isinstance(doc, dict):
        raise ElasticInputError("input", "must be a JSON object")
    unknown = sorted(set(doc) - _KNOWN)
    if unknown:
        raise ElasticInputError(key_name(unknown[0]), "unknown field")
    windows = _get(doc, "windows", required=True)
    if not isinstance(windows, list) or not windows:
        raise ElasticInputError("windows", "must be a non-empty list of window objects")
    cols: dict[str, list] = {k: [] for k in _WINDOW_KEYS}
    width = None
    floors = [w.get("in_floor") if isinstance(w, dict) else None for w in windows]
    if all(f is None for f in floors):
        floors = None
    for j, w in enumerate(windows):
        if not isinstance(w, dict):
            raise ElasticInputError(f"windows[{j}]", "must be an object")
        if floors is not None:
            # Optional service level (the burst reserve): the path's capacity must cover
            # it; a window without one gets 0, i.e. no floor.
            floors[j] = _nonneg(f"windows[{j}].in_floor", w.get("in_floor", 0.0))
        for k in _WINDOW_KEYS:
            if k not in w:
                raise ElasticInputError(f"windows[{j}].{k}", "is required")
            v = w[k]
            if k.startswith("lat"):
                if not isinstance(v, list) or not v:
                    raise ElasticInputError(f"windows[{j}].{k}", "must be a non-empty list of seconds")
                if width is None:
                    width = len(v)
                if len(v) != width:
                    raise ElasticInputError(
                        f"windows[{j}].{k}", f"has {len(v)} entries, window 0 has {width}"
                    )
                for x in v:
                    _nonneg(f"windows[{j}].{k}", x)
            else:
                _nonneg(f"windows[{j}].{k}", v)
            cols[k].append(v)
    forecast = Forecast(**cols)
    costs = _get(doc, "costs", {})
    if not isinstance(costs, dict):
        raise ElasticInputError("costs", "must be an object {mc, ec, rc}")
    bad = sorted(set(costs) - {"mc", "ec", "rc"})
    if bad:
        raise ElasticInputError(f"costs.{key_name(bad[0])}", "unknown field")
    window_s = _nonneg("window_s", _get(doc, "window_s", required=True))
    if window_s <= 0:
        raise ElasticInputError("window_s", "must be > 0 seconds")
    sel = _nonneg("sel", _get(doc, "sel", 1.0))
    if sel <= 0:
        raise ElasticInputError("sel", "must be > 0")
    objective = _get(doc, "objective", "mean")
    if objective not in OBJECTIVES:
        raise ElasticInputError("objective", f"must be one of {', '.join(OBJECTIVES)}")
    planner = GraphPlanner(
        window_s=window_s,
        sel=sel,
        mc=_nonneg("costs.mc", costs.get("mc", 1.0)),
        ec=_nonneg("costs.ec", costs.get("ec", 1.0)),
        rc=_nonneg("costs.rc", costs.get("rc", 10.0)),
        theta1=_nonneg("theta1", _get(doc, "theta1", 0.0)),
        min_engines=check_count("min_engines", _get(doc, "min_engines", 0)),
        max_engines=check_count("max_engines", _get(doc, "max_engines", 0)),
        cooldown_windows=check_count("cooldown_windows", _get(doc, "cooldown_windows", 0)),
        max_step=check_count("max_step", _get(doc, "max_step", 0)),
        objective=objective,
    )
    engines_now = check_count("engines_now", _get(doc, "engines_now", required=True), low=1)
    since = _get(doc, "windows_since_change")
    since = None if since is None else check_count("windows_since_change", since)
    since = _clamp_cooldown(planner, len(windows), since)
    return planner, forecast, engines_now, since, floors


def _clamp_cooldown(planner: GraphPlanner, horizon: int, since: int | None) -> int | None:
    """A cooldown longer than the horizon, as an equivalent one of ``horizon`` windows.

    The planner's state carries the windows since the last change up to the cooldown, so
    its memory grows with it: a cooldown of 4e8 windows (fuzzing found it) asked for 28 GiB.
    Beyond the horizon only two things matter and both are kept: the wait before the first
    change (cooldown − windows since the last one), and that no second change fits. Returns
    the windows since the last change under the clamped cooldown."""
    cooldown = planner.cooldown_windows
    if cooldown <= horizon:
        return since
    held = cooldown if since is None else min(since, cooldown)
    wait = cooldown - held  # windows before a change is allowed
    planner.cooldown_windows = horizon
    return max(horizon - wait, 0)


def plan_request(doc: Any) -> dict[str, Any]:
    planner, forecast, engines_now, since, floors = parse_request(doc)
    return planner.plan(forecast, engines_now, since, in_floor=floors).to_json()


def run(args: argparse.Namespace) -> int:
    doc = read_request(args.input)
    out = plan_request(doc)  # its FieldErrors become the CLI's one-line message
    print(json.dumps(out, indent=json_indent(args)))
    return 0
