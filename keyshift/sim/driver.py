"""The simulator's driver of the one control loop (:class:`keyshift.control.ControlLoop`).

The simulator decides nothing itself. After each statistic window it hands the loop the
window as the Spark job measures one (the group histogram Y_t, the state sizes, In and Lat,
and the last histograms for a policy that learns from them), and the loop decides exactly as
it does in the job and in the elastic replay: the scaler if there is one, the balancer's
policy, the ``min_gain`` veto, ``recommend`` mode, the typed records and the ``decisions``
audit rows in its store. Before, the simulator called the policy itself, with no veto, no
recommend mode and no records, so a simulation and the job could decide differently on the
same input (issue 25 item 2).

The driver realizes what the loop decides: a balancer's plan through
:meth:`Simulator.apply` (the policy's split routing, PKG's ``info.routing``, and the
migration pauses), a scaler's plan through :meth:`Simulator.switch_plan`. A plan the
simulator switched outside the loop (the elasticity hook's :meth:`Simulator.set_engines`)
is adopted by the loop before it decides again, so it decides from the plan that routed
the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from keyshift.control import (
    ControlDecision,
    ControlLoop,
    Forecaster,
    LoopSettings,
    MemoryControlStore,
    WindowStats,
    loop_from_config,
)
from keyshift.plan import Plan
from keyshift.policies import Decision, Policy, SplitRouting
from keyshift.sim.result import SimResult, WindowOutcome


class DrivenConfig(Protocol):
    """What the driver reads of a simulator's configuration (``keyshift.sim.SimConfig``)."""

    @property
    def window_s(self) -> float: ...
    @property
    def rebalance_every(self) -> int: ...
    @property
    def trigger_rstd(self) -> float: ...
    def rates(self) -> np.ndarray: ...


class DrivenSimulator(Protocol):
    """What the driver needs of a simulator (:class:`keyshift.sim.Simulator` is one): its
    configuration, clock, plan, state and result to read; one window to run; and the three
    ways to realize a plan. The driver does not import the simulator, which constructs it."""

    plan: Plan
    now: float
    state: np.ndarray
    result: SimResult

    @property
    def config(self) -> DrivenConfig: ...
    @property
    def window_loads(self) -> np.ndarray: ...
    def history(self) -> np.ndarray | None: ...
    def step_window(self) -> WindowOutcome: ...
    def set_routing(self, routing: SplitRouting | None) -> None: ...
    def apply(self, decision: Decision) -> None: ...
    def switch_plan(self, plan: Plan, reason: str = "") -> None: ...


def policy_label(policy: Policy) -> str:
    """The name the loop records a policy's decisions under (a test's or an experiment's
    own class may have no registry name)."""
    return getattr(type(policy), "name", None) or type(policy).__name__


class SimulatorDriver:
    """The simulator's adapter of the control loop: hands the loop each window's
    :class:`~keyshift.control.WindowStats` and realizes the loop's plans."""

    def __init__(self, sim: DrivenSimulator, lat_s: float, window_s: float,
                 loop: ControlLoop | None = None) -> None:
        self.sim = sim
        self.lat_s = lat_s
        self.window_s = window_s
        self.loop = loop

    @classmethod
    def for_policy(cls, sim: DrivenSimulator, policy: Policy,
                   settings: LoopSettings | None = None) -> SimulatorDriver:
        """The loop of a simulation under one balancing policy, in memory and without a
        scaler, started on the simulator's plan. ``settings`` default to Δ = the simulator's
        window, ``min_gain`` off and ``act``: the papers' experiments move whenever their
        policy decides to (``keyshift simulate`` passes the config's ``[controller]``)."""
        cfg = sim.config
        settings = settings or LoopSettings(window_s=cfg.window_s)
        # Lat: the mean engine's seconds per tuple, what the job measures as engine s / tuples
        driver = cls(sim, 1.0 / float(cfg.rates().mean()), cfg.window_s)
        driver.loop = ControlLoop(MemoryControlStore(), settings, policy, policy_label(policy),
                                  realizer=driver)
        driver.loop.start(sim.plan)
        return driver

    @classmethod
    def from_config(cls, sim: DrivenSimulator, cfg: Any, policy: str, lat_s: float,
                    forecaster: Forecaster | None = None,
                    clock: Callable[[], float] = time.time) -> SimulatorDriver:
        """A driver whose loop is built from a keyshift config exactly as the Spark job's
        (:func:`keyshift.control.loop_from_config`); started on the simulator's plan."""
        driver = cls(sim, lat_s, float(cfg.controller.window_s))
        driver.loop = loop_from_config(cfg, MemoryControlStore(), policy, forecaster,
                                       realizer=driver, clock=clock)
        driver.loop.start(sim.plan)
        return driver

    # -- collect --------------------------------------------------------------------------
    def measure(self, stats: WindowOutcome) -> WindowStats:
        """The loop's view of the window the simulator just ran, measured as the job
        measures (In = the tuples routed to the engines, the sum of the group loads; Lat
        the engines' per-tuple seconds; the histogram, the state sizes and the history)."""
        loads = self.sim.window_loads
        window = WindowStats.measured(stats.index, loads, float(loads.sum()), self.lat_s,
                                      stats.index * self.window_s, self.sim.state.copy())
        window.history = self.sim.history()
        return window

    def run_window(self) -> tuple[WindowOutcome, WindowStats]:
        """One simulator window and the loop's view of it (for a driver that steps the
        loop itself: the elastic bridge, the equivalence tests)."""
        stats = self.sim.step_window()
        return stats, self.measure(stats)

    # -- decide -----------------------------------------------------------------------------
    def due(self, stats: WindowOutcome) -> bool:
        """Whether the loop is asked after this window: every ``rebalance_every`` windows
        (CLB's period m), and with ``trigger_rstd`` only when the engines' imbScore is above
        it (the dlb experiment's LPTF, re-run whenever RSTD > θ)."""
        cfg = self.sim.config
        if (stats.index + 1) % cfg.rebalance_every:
            return False
        return cfg.trigger_rstd <= 0 or stats.rstd > cfg.trigger_rstd

    def after_window(self, stats: WindowOutcome) -> ControlDecision | None:
        """What :meth:`Simulator.step_window` calls after a window and its hook."""
        self.follow(stats.index)
        return self.step(self.measure(stats)) if self.due(stats) else None

    def follow(self, batch_id: int) -> None:
        """Adopt a plan the simulator switched outside the loop after ``batch_id``."""
        current, plan = self.loop.plan_for(batch_id + 1), self.sim.plan
        if plan is current or (plan.version == current.version and plan.slots == current.slots
                               and np.array_equal(plan.assignment, current.assignment)
                               and np.array_equal(plan.live, current.live)):
            return
        self.loop.adopt(plan, batch_id, "simulator", "switched outside the loop")

    def step(self, window: WindowStats) -> ControlDecision:
        """Step the loop on ``window``; the balancer's decision goes into the result."""
        d = self.loop.step(window)
        b = d.balancing
        if b is not None:
            # "none": the policy's plan is the plan in force; a splitting policy (PKG) may
            # still have new shares for it, which act mode puts in force with it
            applied = d.realized or (d.action == "none" and self.loop.settings.mode == "act")
            if applied and not d.realized:
                self.sim.set_routing(b.info.routing)
            self.sim.result.add_decision(self.sim.now, b, d.before.parallelism,
                                         float(self.sim.state.sum()), d.action, applied)
        return d

    # -- realize ----------------------------------------------------------------------------
    def realize(self, decision: ControlDecision) -> None:
        if decision.component == "balancer" and decision.balancing is not None:
            self.sim.apply(replace(decision.balancing, plan=decision.after))
        else:
            self.sim.switch_plan(decision.after, decision.reason)
