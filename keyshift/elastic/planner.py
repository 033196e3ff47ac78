"""The ahead-of-time engine planner: build the state graph from per-window forecasts, find
the cheapest path (elastic-cep §III-C), and say how far along it the forecasts can be
trusted (path rejection, Eq. 13 and θ1 of Algorithm 1).

The planner is pure: forecasts in, a :class:`PathPlan` out. Following the path window by
window, re-planning when it runs out or is rejected, is :mod:`keyshift.elastic.path_scaler`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from keyshift.elastic.cost import OBJECTIVES, Costs, Forecast, capacity, vertex_costs
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.graph import shortest_path


@dataclass(frozen=True)
class PathPlan:
    """The planned engine counts and what the model expects of them.

    ``cost`` is Eq. 11 summed along the path on the forecast means, ``cost_std`` its
    standard deviation (arcs independent), ``arc_std`` σ of each arc (Eq. 13).
    ``rejected_at`` is the first window whose arc σ exceeds θ1: Algorithm 1 takes that arc
    and then plans again, so only ``path[:rejected_at + 1]`` is to be followed.
    """

    path: np.ndarray
    cost: float
    cost_std: float
    arc_cost: np.ndarray
    arc_std: np.ndarray
    missed: float
    rejected_at: int | None
    elapsed_ms: float

    @property
    def usable(self) -> np.ndarray:
        """The part of the path Algorithm 1 follows before re-planning."""
        return self.path if self.rejected_at is None else self.path[: self.rejected_at + 1]

    def to_json(self) -> dict:
        return {
            "path": [int(e) for e in self.path],
            "cost": float(self.cost),
            "cost_std": float(self.cost_std),
            "rejected_at": self.rejected_at,
            "elapsed_ms": float(self.elapsed_ms),
        }


def check_count(name: str, value: object, low: int = 0) -> int:
    """Engine counts and window counts are whole numbers; bools and floats are mistakes."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ElasticInputError(name, f"must be a whole number, got {value!r}")
    if value < low:
        raise ElasticInputError(name, f"must be >= {low}, got {value}")
    return int(value)


def check_nonneg(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ElasticInputError(name, f"must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ElasticInputError(name, f"must be a finite number >= 0, got {value}")
    return value


_FLOOR_PRICE = 1e12
"""Cost of a state below ``in_floor`` (plus as much again per unit of relative shortfall):
larger than any real path cost, finite so the DP still ranks the shortfalls."""


FLOOR_LAT_Z = 2.0
"""The floor must hold when the latency comes out high: capacity under it is taken at
Lat + 2σ_Lat (the one-sided 97.7 % point of the Gaussian latency forecast), not at the mean."""


def floor_capacity(lat_mean: np.ndarray, lat_std: np.ndarray, engines: np.ndarray | int,
                   window_s: float) -> np.ndarray:
    """Tuples ``engines`` process in a window at a pessimistic latency (Lat + 2σ_Lat)."""
    return capacity(np.asarray(lat_mean) + FLOOR_LAT_Z * np.asarray(lat_std), engines, window_s)


def floor_penalty(forecast: Forecast, window_s: float, in_floor: object) -> np.ndarray:
    """(H, K) penalty of each state whose capacity is under the window's floor."""
    floor = np.asarray(in_floor, dtype=np.float64)
    if floor.shape != (forecast.horizon,):
        raise ElasticInputError("in_floor", f"needs one value per window ({forecast.horizon}), got shape {floor.shape}")
    if not np.isfinite(floor).all() or (floor < 0).any():
        raise ElasticInputError("in_floor", "must be finite tuple counts >= 0")
    engines = np.arange(1, forecast.max_engines + 1, dtype=np.float64)[None, :]
    cap = floor_capacity(forecast.lat_mean, forecast.lat_std, engines, window_s)
    short = np.maximum(floor[:, None] - cap, 0.0) / np.maximum(floor[:, None], 1.0)
    # Any shortfall costs at least the price (so a feasible state always wins), a larger
    # one more (so an unreachable floor is approached as closely as the limits allow).
    return _FLOOR_PRICE * ((short > 0) + short)


class GraphPlanner:
    """Shortest path over (engines, window), Eq. 9–12, with optional user limits.

    Parameters follow ``[planner]`` in the configuration; every limit is off at 0, so the
    defaults run the paper's algorithm unchanged. ``min_engines``/``max_engines`` (0: 1 and
    the number of latency forecasts K) bound the states, ``max_step`` the change per window,
    ``cooldown_windows`` the windows between two changes. ``theta1`` (0: off) is the arc
    cost σ above which the rest of the path is rejected. ``objective`` is ``"mean"`` (the
    paper: Eq. 11 on the forecast means) or ``"expected"`` (the expected cost under the
    Gaussian forecasts, which pays for headroom where the forecast is uncertain).
    """

    def __init__(
        self,
        window_s: float = 10.0,
        mc: float = 1.0,
        ec: float = 1.0,
        rc: float = 10.0,
        sel: float = 1.0,
        theta1: float = 0.0,
        min_engines: int = 0,
        max_engines: int = 0,
        cooldown_windows: int = 0,
        max_step: int = 0,
        objective: str = "mean",
    ) -> None:
        self.window_s = window_s
        self.mc = mc
        self.ec = ec
        self.rc = rc
        self.sel = sel
        self.theta1 = theta1
        self.min_engines = min_engines
        self.max_engines = max_engines
        self.cooldown_windows = cooldown_windows
        self.max_step = max_step
        self.objective = objective

    def state_range(self, k: int) -> tuple[int, int]:
        """Engine counts the graph may use, given K latency forecasts: (low, high)."""
        lo = check_count("min_engines", self.min_engines) or 1
        hi = check_count("max_engines", self.max_engines) or k
        if hi > k:
            raise ElasticInputError(
                "max_engines", f"is {hi} but the latency forecasts cover only 1..{k} engines"
            )
        if lo > hi:
            raise ElasticInputError("min_engines", f"{lo} exceeds max_engines {hi}")
        return lo, hi

    def plan(
        self,
        forecast: Forecast,
        engines_now: int,
        windows_since_change: int | None = None,
        in_floor: np.ndarray | None = None,
    ) -> PathPlan:
        """The cheapest path from ``engines_now`` over the forecast's horizon.

        ``in_floor`` (optional, tuples per window) is a service level on top of the cost
        model: the path's capacity Δt·i/Lat must cover it in every window (the burst
        reserve of :mod:`keyshift.elastic.reserve`). States below it stay in the graph at a
        prohibitive price proportional to the shortfall, so when the limits (max_step,
        cooldown, max_engines) make the floor unreachable the path comes as close as it can
        instead of failing. None (the default) is the paper's graph unchanged.
        """
        t0 = time.perf_counter()
        costs = Costs(check_nonneg("costs.mc", self.mc), check_nonneg("costs.ec", self.ec),
                      check_nonneg("costs.rc", self.rc))
        theta1 = check_nonneg("theta1", self.theta1)
        step = check_count("max_step", self.max_step)
        cooldown = check_count("cooldown_windows", self.cooldown_windows)
        engines_now = check_count("engines_now", engines_now, low=1)
        lo, hi = self.state_range(forecast.max_engines)
        if not lo <= engines_now <= hi:
            raise ElasticInputError(
                "engines_now", f"{engines_now} is outside [min_engines, max_engines] = [{lo}, {hi}]"
            )
        vc = vertex_costs(forecast, costs, self.window_s, self.sel, self.objective)
        cols = slice(lo - 1, hi)
        vertex = vc.mean[:, cols]
        if in_floor is not None:
            vertex = vertex + floor_penalty(forecast, self.window_s, in_floor)[:, cols]
        path = shortest_path(
            vertex, engines_now - lo, costs.rc, step, cooldown, windows_since_change
        )
        engines = path.engines + lo
        rows = np.arange(forecast.horizon)
        col = engines - 1
        if self.objective == "mean":
            plug_in = vc
        else:
            plug_in = vertex_costs(forecast, costs, self.window_s, self.sel, "mean")
        changes = np.diff(np.concatenate([[engines_now], engines])) != 0
        arc_cost = plug_in.mean[rows, col] + costs.rc * changes
        arc_std = vc.std[rows, col]
        rejected_at = None
        if theta1 > 0:
            over = np.flatnonzero(arc_std > theta1)
            rejected_at = int(over[0]) if over.size else None
        return PathPlan(
            path=engines,
            cost=float(arc_cost.sum()),
            cost_std=float(np.sqrt(np.sum(arc_std**2))),
            arc_cost=arc_cost,
            arc_std=arc_std,
            missed=float(plug_in.miss[rows, col].sum()),
            rejected_at=rejected_at,
            elapsed_ms=(time.perf_counter() - t0) * 1e3,
        )


__all__ = ["OBJECTIVES", "GraphPlanner", "PathPlan", "check_count", "check_nonneg", "floor_capacity", "floor_penalty"]
