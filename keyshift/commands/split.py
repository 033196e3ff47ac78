"""``keyshift split``: the weighted split of an ordered, stateless region, as a filter.

One JSON object on stdin, one on stdout (like ``keyshift rebalance``). Either per-connection
blocking-rate samples, from which the functions are built as the controller builds them
(blocking-rate §5.1), or the functions themselves; Fox's greedy then picks the weights
(§5.2), over clusters of similar connections when there are 32 or more (§5.3).
See docs/split.md for the format.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np

from keyshift.cli import add_json_options, json_indent
from keyshift.commands.json_request import key_name, read_request
from keyshift.split import (
    BlockingRateModel,
    SplitInputError,
    check_problem,
    cluster_connections,
)
from keyshift.split.splitter import solve_weights

READS_CONFIG = False  # keyshift.cli: no --config

SUMMARY = "split a stateless region's input by blocking rates (JSON)"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "split",
        help=SUMMARY,
        description="Read one JSON object on stdin (see docs/split.md), print the weights.",
    )
    p.add_argument("--input", "-i", help="read this file instead of stdin")
    add_json_options(p, json_help=None)  # always JSON; --pretty indents it
    p.set_defaults(func=run)
    return p


MAX_GRID_POINTS = 10_000_000
"""Connections × (total + 1) at most: the samples' grid holds two floats per point (raw and
fitted), 160 MB here. Fox's greedy needs O(N + R log N), so a bigger grid buys nothing a
split can use; before this bound, a total of 10^30 reached numpy as an array shape."""


def _int(value: Any, field: str, low: int = 0) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value)) or int(value) != value):
        raise SplitInputError(field, "must be a whole number")
    if value < low:
        raise SplitInputError(field, f"must be ≥ {low}")
    return int(value)


def _int_list(value: Any, field: str) -> np.ndarray:
    """Per-function bounds: a list of whole numbers (their count is check_problem's)."""
    if not isinstance(value, list):
        raise SplitInputError(field, "must be a list, one per function")
    out = [_int(v, f"{field}[{i}]") for i, v in enumerate(value)]
    for i, v in enumerate(out):
        if v >= 2**62:  # a bound no split reaches, and beyond a machine integer
            raise SplitInputError(f"{field}[{i}]", "is too large (more than any total)")
    return np.array(out, dtype=np.int64)


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise SplitInputError(field, f"must be a number in ({low}, {high})")
    try:
        return float(value)
    except OverflowError:  # a JSON integer beyond float range
        raise SplitInputError(field, f"must be a number in ({low}, {high}) that fits a "
                                     "float") from None


def _bounds_from(conns: list[dict], total: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([_int(c.get("min", 0), f"connections[{j}].min") for j, c in enumerate(conns)])
    hi = np.array([_int(c.get("max", total), f"connections[{j}].max") for j, c in enumerate(conns)])
    return lo, hi


def solve_request(req: Any) -> dict[str, Any]:
    """The whole command without I/O: request object in, response object out."""
    if not isinstance(req, dict):
        raise SplitInputError("input", "must be a JSON object")
    unknown = set(req) - {"total", "connections", "functions", "min", "max", "cluster",
                          "cluster_threshold", "delta", "smoothing"}
    if unknown:
        raise SplitInputError(key_name(min(unknown)), "unknown field")
    if ("connections" in req) == ("functions" in req):
        raise SplitInputError("input", "give exactly one of 'connections' (samples) or 'functions'")
    delta = _number(req.get("delta", 1e-6), "delta", 0.0, 1.0)
    threshold = _number(req.get("cluster_threshold", 1.2), "cluster_threshold", 0.0, float("inf"))
    cluster = req.get("cluster", "auto")
    if cluster not in ("auto", True, False):
        raise SplitInputError("cluster", "must be true, false or \"auto\"")
    started = time.perf_counter()
    pooled = None
    if "connections" in req:
        conns = req["connections"]
        if not isinstance(conns, list) or not conns or not all(isinstance(c, dict) for c in conns):
            raise SplitInputError("connections", "must be a non-empty list of objects")
        total = _int(req.get("total", 1000), "total", 1)
        if (points := len(conns) * (total + 1)) > MAX_GRID_POINTS:
            raise SplitInputError(
                "total", f"{total} units for {len(conns)} connections is a grid of "
                         f"{points:,} points, over the {MAX_GRID_POINTS:,} this command holds "
                         "(a unit is a share of the weight: use fewer)")
        samples = []
        for j, c in enumerate(conns):
            extra = set(c) - {"samples", "min", "max"}
            if extra:
                raise SplitInputError(f"connections[{j}].{key_name(min(extra))}",
                                      "unknown field")
            pts = c.get("samples", [])
            if not isinstance(pts, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)
                for p in pts
            ):
                raise SplitInputError(f"connections[{j}].samples", "must be a list of [weight, blocking_rate] pairs")
            try:
                samples.append(np.array(pts, dtype=np.float64).reshape(-1, 2))
            except OverflowError:
                raise SplitInputError(f"connections[{j}].samples",
                                      "a number is too large for a float") from None
        smoothing = _number(req.get("smoothing", 0.5), "smoothing", 0.0, 1.0 + 1e-12)
        model = BlockingRateModel.from_samples(samples, total, smoothing, delta)
        plain, tilted = model.functions(tilt=False), model.functions(tilt=True)
        lo, hi = _bounds_from(conns, total)
        pooled = model.pooled
    else:
        funcs = req["functions"]
        if not isinstance(funcs, list) or not funcs or not all(isinstance(f, list) for f in funcs):
            raise SplitInputError("functions", "must be a non-empty list of lists of numbers")
        if len({len(f) for f in funcs}) != 1:
            raise SplitInputError("functions", "must all have the same length (R + 1 weights)")
        try:
            plain = np.array(funcs, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise SplitInputError("functions", "must hold numbers that fit a float") from None
        total = _int(req.get("total", plain.shape[1] - 1), "total", 1)
        n = plain.shape[0]
        lo = _int_list(req.get("min", [0] * n), "min")
        hi = _int_list(req.get("max", [plain.shape[1] - 1] * n), "max")
        tilted = plain + delta * np.arange(plain.shape[1])
    tilted, total, lo, hi = check_problem(tilted, total, lo, hi)
    n = tilted.shape[0]
    use_clusters = (cluster is True) or (cluster == "auto" and n >= 32)
    labels = cluster_connections(plain, threshold, delta) if use_clusters and n > 1 else None
    weights, _ = solve_weights(tilted, lo, hi, labels, pooled)
    elapsed_ms = (time.perf_counter() - started) * 1e3
    predicted = plain[np.arange(n), np.minimum(weights, plain.shape[1] - 1)]
    return {
        "weights": weights.tolist(),
        "total": total,
        "max_blocking": float(predicted.max()),
        "predicted_blocking": predicted.tolist(),
        "clusters": (labels if labels is not None else np.arange(n)).tolist(),
        "elapsed_ms": round(elapsed_ms, 3),
    }


def run(args: argparse.Namespace) -> int:
    req = read_request(args.input)
    out = solve_request(req)  # its FieldErrors become the CLI's one-line message
    print(json.dumps(out, indent=json_indent(args)))
    return 0
