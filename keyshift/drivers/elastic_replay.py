"""Replay a load series window by window through a scaler: the per-window model the
elasticity evaluation runs in (elastic-cep's accounting, Eq. 1–2 and 11–12).

Each window j: the control loop (:class:`keyshift.control.ControlLoop`, scaler only: the
model has no key groups) decides the engine count from the previous window's observation; the window's latency is drawn from the :class:`LatencyModel` at that count;
a change of engine count pauses processing for ``pause_s`` (state migration, §III-D);
then Out = sel · min(Cap, In) and Miss = sel · In − Out exactly as the monitor of Eq. 1–2
counts them: a tuple not processed within its window is missed, not queued. The bill is
Eq. 11 on what happened: Miss · MC + i · EC · Δt + RC per change.

It is one loop over windows (thousands), each O(1) numpy work, plus the scaler's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from keyshift.control import (
    ControlLoop,
    FunctionForecaster,
    LoopSettings,
    MemoryControlStore,
    ScalerStep,
    WindowStats,
)
from keyshift.elastic.capacity import LatencyModel
from keyshift.elastic.cost import Costs
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.reconfiguration import MeasuredMigration, ReconfigurationCost
from keyshift.elastic.scaler import ForecastFn, Scaler

NOMINAL_GROUPS = 4096
"""Key groups a change of N is counted to move in the replay, which has none (groups.count's
default; a change from N to N' moves |N' − N| / max(N, N') of them, as a minimal plan does)."""


@dataclass
class ReplayResult:
    """Per-window series of one replay and the decisions with their reasons."""

    policy: str
    engines: np.ndarray
    in_tuples: np.ndarray
    missed: np.ndarray
    latency: np.ndarray
    cost: np.ndarray
    changes: np.ndarray
    window_s: float
    decisions: list[ScalingDecision] = field(default_factory=list)
    planner_ms: list[float] = field(default_factory=list)
    # executor-seconds held per window (whole executors of ``executors_of`` engines, with
    # the start-up and release each change costs); None: not modelled
    executor_s: np.ndarray | None = None

    def summary(self) -> dict[str, float]:
        total_in = float(self.in_tuples.sum())
        held = {} if self.executor_s is None else {
            "executor_hours": float(self.executor_s.sum() / 3600.0)}
        return {
            **held,
            "policy": self.policy,
            "windows": int(self.engines.size),
            "missed_tuples": float(self.missed.sum()),
            "missed_pct": 100.0 * float(self.missed.sum()) / total_in if total_in else 0.0,
            "engine_hours": float(self.engines.sum() * self.window_s / 3600.0),
            "mean_engines": float(self.engines.mean()),
            "total_cost": float(self.cost.sum()),
            "scale_actions": int(self.changes.sum()),
            "plans": len(self.planner_ms),
            "planner_ms_median": float(np.median(self.planner_ms)) if self.planner_ms else 0.0,
        }


@dataclass(frozen=True)
class ExecutorModel:
    """Engines on whole executors (issue 41 item 6): ``engines_per_executor`` engines each,
    ``startup_s`` from request to registered, ``release_s`` from release to gone (this
    project measured 2.7-3.5 s and 5.1-5.2 s on a standalone cluster, docs/elasticity.md)."""

    engines_per_executor: int = 1
    startup_s: float = 0.0
    release_s: float = 0.0

    def __post_init__(self) -> None:
        if self.engines_per_executor < 1:
            raise ElasticInputError("engines_per_executor",
                                    f"must be >= 1, got {self.engines_per_executor}")
        if self.startup_s < 0 or self.release_s < 0:
            raise ElasticInputError("executor_startup_s",
                                    "start-up and release seconds must be >= 0")

    def of(self, engines: int) -> int:
        return -(-int(engines) // self.engines_per_executor)


def scaler_loop(scaler: Scaler, forecast: ForecastFn | None, window_s: float, sel: float,
                initial_engines: int, groups: int, policy: str | None = None,
                min_gain: float = 0.0, realizer=None,
                reconfiguration: ReconfigurationCost | None = None) -> ControlLoop:
    """The control loop of an offline run, in memory: ``scaler`` (errors propagate: a bad
    experiment fails loudly) and, with ``policy``, the balancer on ``groups`` key groups."""
    from keyshift.plan import Plan
    from keyshift.policies import make_policy

    step = ScalerStep(scaler, None if forecast is None else
                      FunctionForecaster(forecast, "the experiment's forecast"),
                      window_s, sel=sel, keep_on_error=False)
    loop = ControlLoop(MemoryControlStore(), LoopSettings(window_s=window_s, min_gain=min_gain),
                       None if policy is None else make_policy(policy), policy or "none",
                       step, realizer, reconfiguration=reconfiguration)
    loop.start(Plan.hashed(groups, int(initial_engines)) if groups else
               Plan(np.zeros(0, dtype=np.int64), int(initial_engines)))
    return loop


def idle_window(groups: int) -> WindowStats:
    """The "window before the first": nothing observed, so the first decision has no
    observation (window -1, closed by batch -1: its decision routes window 0)."""
    return WindowStats.empty(-1, groups, -1)


def replay(
    in_tuples: np.ndarray,
    scaler: Scaler,
    latency: LatencyModel,
    window_s: float,
    costs: Costs,
    initial_engines: int,
    forecast: ForecastFn | None = None,
    observe: Callable[[int, Observation], None] | None = None,
    pause_s: float = 0.0,
    sel: float = 1.0,
    seed: int = 0,
    reconfiguration: ReconfigurationCost | None = None,
    executors: ExecutorModel | None = None,
) -> ReplayResult:
    """Run ``scaler`` over the windows of ``in_tuples``; ``observe(j, obs)`` is called after
    each window (the evaluation feeds its forecasters online from it).

    Every change of N is measured as the job measures a migration (the pause, the input
    rate, the tuples the pause made miss: those a window without the pause would have
    served) and handed to the loop, which keeps it in its store; with ``reconfiguration``
    (the learned RC, :mod:`keyshift.elastic.reconfiguration`) the planner prices the next
    changes with it.

    With ``executors`` the engines run on whole executors (:class:`ExecutorModel`): a
    scale-out that adds executors waits their start-up before the window is served (the
    job's wait, :mod:`keyshift.control.resources`), and each window bills the executors
    held plus the start-up and release seconds of those that came or went."""
    in_tuples = np.asarray(in_tuples, dtype=np.float64)
    if in_tuples.ndim != 1 or not np.isfinite(in_tuples).all() or (in_tuples < 0).any():
        raise ElasticInputError("in_tuples", "must be a flat array of finite counts >= 0")
    if not 0 <= pause_s < window_s:
        raise ElasticInputError("pause_s", f"must be in [0, window_s), got {pause_s}")
    rng = np.random.default_rng(seed)
    n = in_tuples.size
    engines = np.empty(n, dtype=np.int64)
    missed = np.empty(n)
    lat = np.empty(n)
    changes = np.zeros(n, dtype=bool)
    executor_s = np.zeros(n)
    loop = scaler_loop(scaler, forecast, window_s, sel, initial_engines, groups=0,
                       reconfiguration=reconfiguration)
    window = idle_window(0)
    decisions: list[ScalingDecision] = []
    for j in range(n):
        d = loop.step(window)
        decisions.append(d.scaling)
        changes[j] = d.after.parallelism != d.before.parallelism
        current = d.after.parallelism
        lat[j] = float(latency.sample(current, rng))
        busy_s = window_s - pause_s * changes[j]
        if executors is not None:
            before_x = executors.of(d.before.parallelism)
            after_x = executors.of(current)
            added, gone = max(after_x - before_x, 0), max(before_x - after_x, 0)
            busy_s = max(busy_s - executors.startup_s * (added > 0), 0.0)
            executor_s[j] = (after_x * window_s + added * executors.startup_s
                             + gone * executors.release_s)
        capacity = busy_s * current / lat[j]
        out = sel * min(capacity, in_tuples[j])
        missed[j] = sel * in_tuples[j] - out
        engines[j] = current
        if changes[j]:
            before = d.before.parallelism
            unpaused = sel * min(window_s * current / lat[j], in_tuples[j])
            loop.measured_migration(MeasuredMigration(
                j, round(NOMINAL_GROUPS * abs(current - before) / max(current, before)), 0,
                pause_s, float(in_tuples[j]) / window_s, True, before, current,
                missed=max(unpaused - out, 0.0)))
        window = WindowStats.measured(j, np.zeros(0), float(in_tuples[j]), float(lat[j]),
                                      j * window_s)
        if observe is not None:
            observe(j, Observation(float(in_tuples[j]), float(lat[j]), current, window_s, sel))
    planner_ms = [d.planner_ms for d in decisions if d.planner_ms is not None]
    cost = missed * costs.mc + engines * costs.ec * window_s + costs.rc * changes
    return ReplayResult(
        policy=scaler.name, engines=engines, in_tuples=in_tuples, missed=missed, latency=lat,
        cost=cost, changes=changes, window_s=window_s, decisions=decisions, planner_ms=planner_ms,
        executor_s=executor_s if executors is not None else None,
    )
