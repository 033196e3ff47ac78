"""The cluster simulator: N engines, their queues and key-group state, driven by a policy
through the control loop.

Discrete time in ticks of ``tick_s``. Every tick: the workload's arrivals per key group are
routed through the current plan (moved groups that are still paused go to a migration
buffer instead), the source is admitted (or throttled under back-pressure), every engine
serves its capacity FIFO (:mod:`keyshift.sim.queues`), and queues age. Every statistic
window (``window_s``) the simulator records the window's metrics, updates each group's state
size, lets an optional controller hook change the engine count, and every
``rebalance_every`` windows hands the window (histogram Y_t, state d, history) to the control
loop through its driver (:mod:`keyshift.sim.driver`): the same
:meth:`keyshift.control.ControlLoop.step` the Spark job makes, with the policy under test as
its balancer, its ``min_gain`` veto, ``recommend`` mode and records. The driver applies
what the loop realizes.

Migration (dlb §3.3): the moved groups pause for ``pause_fixed_s + pause_s_per_state ·
Σ state moved``; their tuples are buffered (aging, never dropped) and join the new engine's
queue when the pause ends. Meanwhile the source and destination engines spend
``transfer_cost`` service units per state tuple moved, spread over the pause, so a big
migration also slows the engines it touches.

A policy with a per-tuple router (:meth:`Policy.router`: ``dc``, ``wc``) routes every
tick's arrivals itself, from its own view of the stream so far, as the paper's partitioner
does; its window decisions still update the plan (the engine that keeps each group).

Elasticity: :meth:`Simulator.set_engines` changes the number of live engines between
windows (a controller hook passed to :meth:`run` is called after every window; the loop
adopts the plan it made). With ``policy=None`` the simulator has no loop of its own: a
driver outside it steps one (:mod:`keyshift.drivers.elastic_sim`, with a scaler) and
realizes its plans.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from keyshift.errors import FieldError
from keyshift.metrics import load_variance, rstd
from keyshift.plan import Plan
from keyshift.policies.base import Decision, Policy, SplitRouting
from keyshift.sim.driver import SimulatorDriver
from keyshift.sim.queues import CohortQueues
from keyshift.sim.result import SimResult, WindowOutcome
from keyshift.sim.workload import Workload

if TYPE_CHECKING:
    from keyshift.control import LoopSettings


class SimError(FieldError):
    """Bad simulator parameter; ``field`` names it."""


@dataclass(frozen=True)
class ExternalLoad:
    """Another tenant on an engine's host takes ``share`` of its capacity in [start, stop)."""

    engine: int
    start_s: float
    stop_s: float
    share: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise SimError("external.share", f"must be in [0, 1], got {self.share}")
        if self.stop_s < self.start_s:
            raise SimError("external", "stop_s must not precede start_s")
        if self.engine < 0:
            raise SimError("external.engine", f"must be >= 0, got {self.engine}")


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the simulated cluster (validated here, nothing computed)."""

    engines: int = 5
    tick_s: float = 0.1
    window_s: float = 1.0
    service_rate: float | Sequence[float] = 1000.0
    queue_limit: float = math.inf
    overload: Literal["miss", "backpressure"] = "miss"
    deadline_s: float = 0.0  # miss mode: a tuple older than this is missed; 0 = window_s
    max_age_s: float = 60.0  # back-pressure mode: age resolution of the latency histogram
    state_model: Literal["time", "length"] = "time"
    state_per_tuple: float = 1.0  # time-based: state units per tuple of the recent windows
    state_windows: int = 1  # time-based: how many recent windows the state spans
    length_h: float = 500.0  # length-based: state tuples kept per key (dlb Listing 1.1 H)
    pause_fixed_s: float = 0.05
    pause_s_per_state: float = 1e-5
    transfer_cost: float = 0.0
    rebalance_every: int = 1
    trigger_rstd: float = 0.0  # > 0: ask the policy only when the window's RSTD exceeds it
    history_windows: int = 0
    external: tuple[ExternalLoad, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        def positive(name: str, v: float) -> None:
            if not (v > 0 and math.isfinite(v)):
                raise SimError(name, f"must be a finite number > 0, got {v}")

        def non_negative(name: str, v: float) -> None:
            if not (v >= 0 and math.isfinite(v)):
                raise SimError(name, f"must be a finite number >= 0, got {v}")

        if int(self.engines) != self.engines or self.engines < 1:
            raise SimError("engines", f"must be an integer >= 1, got {self.engines}")
        positive("tick_s", self.tick_s)
        positive("window_s", self.window_s)
        ratio = self.window_s / self.tick_s
        if abs(ratio - round(ratio)) > 1e-6:
            raise SimError("window_s", f"must be a multiple of tick_s ({self.tick_s})")
        rates = np.atleast_1d(np.asarray(self.service_rate, dtype=np.float64))
        if rates.size not in (1, self.engines):
            raise SimError("service_rate", f"give one rate or {self.engines}, got {rates.size}")
        if not np.isfinite(rates).all() or (rates <= 0).any():
            raise SimError("service_rate", "rates must be finite and > 0 tuples/s")
        if not self.queue_limit > 0:
            raise SimError("queue_limit", f"must be > 0, got {self.queue_limit}")
        if self.overload not in ("miss", "backpressure"):
            raise SimError("overload", f"must be miss or backpressure, got {self.overload!r}")
        non_negative("deadline_s", self.deadline_s)
        positive("max_age_s", self.max_age_s)
        if self.state_model not in ("time", "length"):
            raise SimError("state_model", f"must be time or length, got {self.state_model!r}")
        non_negative("state_per_tuple", self.state_per_tuple)
        if self.state_windows < 1:
            raise SimError("state_windows", f"must be >= 1, got {self.state_windows}")
        non_negative("length_h", self.length_h)
        non_negative("pause_fixed_s", self.pause_fixed_s)
        non_negative("pause_s_per_state", self.pause_s_per_state)
        non_negative("transfer_cost", self.transfer_cost)
        if self.rebalance_every < 1:
            raise SimError("rebalance_every", f"must be >= 1, got {self.rebalance_every}")
        non_negative("trigger_rstd", self.trigger_rstd)
        if self.history_windows < 0:
            raise SimError("history_windows", f"must be >= 0, got {self.history_windows}")

    @property
    def ticks_per_window(self) -> int:
        return int(round(self.window_s / self.tick_s))

    @property
    def ages(self) -> int:
        horizon = self.max_age_s if self.overload == "backpressure" else (
            self.deadline_s or self.window_s
        )
        return max(1, int(round(horizon / self.tick_s)))

    def rates(self) -> np.ndarray:
        rates = np.atleast_1d(np.asarray(self.service_rate, dtype=np.float64))
        return np.resize(rates, self.engines).astype(np.float64)


@dataclass
class _Migration:
    """One rebalance's moved groups in flight: their buffered tuples and the transfer work."""

    end_s: float
    buffer: CohortQueues
    work_rate: np.ndarray  # service units per second taken from each engine until end_s


Hook = Callable[["Simulator", WindowOutcome], None]


class Simulator:
    """Run a workload through a simulated cluster under one policy.

    ``plan`` defaults to KG over ``config.engines`` (``Plan.hashed``). Use :meth:`run`
    for a whole experiment, or :meth:`step_window` to drive it window by window.
    ``control`` are the loop's settings (:class:`keyshift.control.LoopSettings`; default:
    Δ = ``config.window_s``, ``min_gain`` off, ``act``); ``sim.driver.loop`` is the loop, its
    store the decisions' records.
    """

    def __init__(
        self,
        workload: Workload,
        policy: Policy | None,
        config: SimConfig | None = None,
        plan: Plan | None = None,
        seed: int = 0,
        control: LoopSettings | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.workload = workload
        self.policy = policy
        p = workload.groups
        self.plan = plan or Plan.hashed(p, self.config.engines)
        if self.plan.groups != p:
            raise SimError("plan", f"has {self.plan.groups} groups, the workload has {p}")
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.windows_done = 0
        cfg = self.config
        self._rates = cfg.rates()
        self._default_rate = float(self._rates.mean())
        self._grow_rates(self.plan.slots)
        self._queues = CohortQueues(self.plan.slots, cfg.ages)
        self._batch_of_group = np.full(p, -1, dtype=np.int64)
        self._migrations: dict[int, _Migration] = {}
        self._next_batch = 0
        self._backlog = np.zeros(p)
        self._recent = np.zeros((max(cfg.state_windows, cfg.history_windows, 1), p))
        self._cumulative = np.zeros(p)
        self.state = np.zeros(p)
        self._latency_hist = np.zeros(cfg.ages)
        self.result = SimResult(tick_s=cfg.tick_s, window_s=cfg.window_s)
        self._split: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._router = policy.router(p) if policy is not None else None
        self.driver = SimulatorDriver.for_policy(self, policy, control) \
            if policy is not None else None

    # ---- engines ---------------------------------------------------------------------
    def _grow_rates(self, engines: int) -> None:
        if engines > self._rates.size:
            extra = np.full(engines - self._rates.size, self._default_rate)
            self._rates = np.concatenate([self._rates, extra])

    @property
    def engines(self) -> int:
        """π, the number of live engines."""
        return self.plan.parallelism

    def _capacity(self, t: float, dt: float) -> np.ndarray:
        """Tuples each slot can serve this tick: rate, minus external load and migrations."""
        n = self.plan.slots
        cap = self._rates[:n] * dt
        for ext in self.config.external:
            if ext.engine < n and ext.start_s <= t < ext.stop_s:
                cap[ext.engine] *= 1.0 - ext.share
        for mig in self._migrations.values():
            if t < mig.end_s:
                # a pause started before a scale-out has no work on the slots added since
                work = mig.work_rate[:n]
                cap[: work.size] -= work * dt
        # a dead slot keeps draining what was queued before it was removed
        draining = ~self.plan.live & (self._queues.lengths()[:n] > 0)
        cap[~self.plan.live & ~draining] = 0.0
        return np.clip(cap, 0.0, None)

    # ---- one tick --------------------------------------------------------------------
    def _tick(self, acc: dict[str, Any]) -> None:
        cfg = self.config
        dt = cfg.tick_s
        t = self.now
        n = self.plan.slots
        arrivals = self.workload.arrivals(t, dt, self.rng)
        if arrivals.shape != (self.workload.groups,):
            raise SimError("workload", "arrivals must have one count per group")
        offered = arrivals + self._backlog
        self._backlog[:] = 0.0
        assign = self.plan.assignment
        paused = self._batch_of_group >= 0
        direct = np.where(paused, 0.0, offered)
        if self._router is not None:
            to_engine = self._router.route(direct, self.plan)
        else:
            to_engine = np.bincount(assign, weights=direct, minlength=n)
            if self._split is not None:
                g, dest, share = self._split
                part = direct[g] * share
                to_engine -= np.bincount(assign[g], weights=part, minlength=n)
                to_engine += np.bincount(dest, weights=part, minlength=n)
                np.clip(to_engine, 0.0, None, out=to_engine)
        cap = self._capacity(t, dt)
        queued = self._queues.lengths()

        admit = 1.0
        if cfg.overload == "backpressure" and math.isfinite(cfg.queue_limit):
            room = cfg.queue_limit + cap - queued
            busy = to_engine > 0
            if busy.any():
                admit = float(np.clip((room[busy] / to_engine[busy]).min(), 0.0, 1.0))
        if admit < 1.0:
            refused = offered * (1.0 - admit)
            if self.workload.open_loop:
                self._backlog += refused
            else:
                acc["not_generated"] += float(refused.sum())
            offered = offered * admit
            to_engine *= admit
        acc["generated"] += float(arrivals.sum()) - (
            0.0 if self.workload.open_loop else float((arrivals * (1.0 - admit)).sum())
        )
        acc["loads"] += offered
        engine_in = to_engine.copy()

        if paused.any():
            for bid, mig in self._migrations.items():
                mask = paused & (self._batch_of_group == bid)
                if mask.any():
                    per = np.bincount(assign[mask], weights=offered[mask], minlength=n)
                    mig.buffer.grow(n)
                    mig.buffer.push(per)
                    engine_in += per

        self._queues.push(to_engine)
        served, by_age = self._queues.serve(cap)
        self._latency_hist += by_age
        acc["latency"] += by_age
        acc["processed"] += float(served.sum())
        acc["engine_in"] += engine_in
        acc["engine_served"] += served
        if math.isfinite(cfg.queue_limit) and cfg.overload == "miss":
            over = np.clip(self._queues.lengths() - cfg.queue_limit, 0.0, None)
            acc["missed"] += float(self._queues.drop_newest(over).sum())
        expired = self._queues.age(expire=cfg.overload == "miss")
        acc["missed"] += float(expired.sum())
        for mig in self._migrations.values():
            mig.buffer.age(expire=False)

        self.now = round(t + dt, 9)
        for bid in [b for b, m in self._migrations.items() if self.now >= m.end_s - 1e-9]:
            mig = self._migrations.pop(bid)
            mig.buffer.grow(self._queues.engines)
            self._queues.add(mig.buffer.q)
            self._batch_of_group[self._batch_of_group == bid] = -1

    # ---- one window ------------------------------------------------------------------
    def step_window(self, hook: Hook | None = None) -> WindowOutcome:
        """Simulate one statistic window, then let the hook and the control loop act."""
        cfg = self.config
        p = self.workload.groups
        n = self.plan.slots
        acc: dict[str, Any] = {
            "generated": 0.0,
            "not_generated": 0.0,
            "processed": 0.0,
            "missed": 0.0,
            "loads": np.zeros(p),
            "latency": np.zeros(cfg.ages),
            "engine_in": np.zeros(n),
            "engine_served": np.zeros(n),
        }
        start = self.now
        for _ in range(cfg.ticks_per_window):
            if acc["engine_in"].size < self.plan.slots:
                grow = self.plan.slots - acc["engine_in"].size
                acc["engine_in"] = np.concatenate([acc["engine_in"], np.zeros(grow)])
                acc["engine_served"] = np.concatenate([acc["engine_served"], np.zeros(grow)])
            self._tick(acc)
        y = acc["loads"]
        self._remember(y)
        live = self.plan.live
        loads_live = acc["engine_in"][: live.size][live]
        stats = WindowOutcome(
            index=self.windows_done,
            start_s=start,
            generated=acc["generated"],
            processed=acc["processed"],
            missed=acc["missed"],
            queued=self.queued(),
            engines=self.plan.parallelism,
            rstd=rstd(loads_live),
            var=load_variance(loads_live),
            engine_loads=acc["engine_in"].copy(),
            engine_live=live.copy(),
            latency=acc["latency"],
            throughput=acc["processed"] / cfg.window_s,
        )
        self.windows_done += 1
        self.result.add_window(stats)
        if hook is not None:
            hook(self, stats)
        if self.driver is not None:
            self.driver.after_window(stats)
        return stats

    def _remember(self, y: np.ndarray) -> None:
        cfg = self.config
        self._recent = np.roll(self._recent, -1, axis=0)
        self._recent[-1] = y
        self._cumulative += y
        if cfg.state_model == "time":
            self.state = cfg.state_per_tuple * self._recent[-cfg.state_windows :].sum(axis=0)
        else:
            # asked every window: a trace discovers its keys as it goes
            keys = self.workload.keys_per_group()
            self.state = np.minimum(cfg.length_h * keys, self._cumulative)

    def history(self) -> np.ndarray | None:
        """The last ``history_windows`` histograms, oldest first (CLB's covariance input)."""
        m = self.config.history_windows
        if m == 0:
            return None
        seen = min(self.windows_done, m)
        if seen == 0:
            return None
        return self._recent[-seen:].copy()

    # ---- decisions and migrations ----------------------------------------------------
    def apply(self, decision: Decision) -> None:
        """Switch to the decision's plan (the control loop's realization of a balancer's
        decision, :mod:`keyshift.sim.driver`); moved groups pause and buffer (dlb §3.3).

        Two facts of the decision's ``info`` (:class:`keyshift.policies.DecisionInfo`)
        extend the plan for policies that split a group over engines (PKG): ``routing`` (a
        :class:`keyshift.policies.SplitRouting`) sends ``share`` of each listed group's
        tuples to ``engines`` (slots) instead of the plan's engine (a group split over k
        engines is listed k − 1 times), and ``stateful_safe = False`` says the policy keeps
        no per-key state consistent, so its plan changes count as state movement (ψ) but
        pause nothing.
        """
        old = self.plan
        new = decision.plan
        self._split = _split_routing(decision.info.routing, new)
        if new is old:
            return
        pause = decision.info.stateful_safe
        self._switch(new, decision.moves.groups, old.assignment, pause=pause)

    def _switch(
        self, new: Plan, moved: np.ndarray, old_assignment: np.ndarray, pause: bool = True
    ) -> None:
        cfg = self.config
        self._grow_rates(new.slots)
        self._queues.grow(new.slots)
        self.plan = new
        if moved.size == 0:
            return
        state = self.state[moved]
        moved_state = float(state.sum())
        if not pause:
            self.result.add_migration(len(moved), moved_state, 0.0)
            return
        pause_s = cfg.pause_fixed_s + cfg.pause_s_per_state * moved_state
        src = old_assignment[moved]
        dst = new.assignment[moved]
        work = np.bincount(src, weights=state, minlength=new.slots) + np.bincount(
            dst, weights=state, minlength=new.slots
        )
        work_rate = cfg.transfer_cost * work / pause_s if pause_s > 0 else np.zeros(new.slots)
        bid = self._next_batch
        self._next_batch += 1
        self._migrations[bid] = _Migration(
            end_s=self.now + pause_s,
            buffer=CohortQueues(new.slots, cfg.ages),
            work_rate=work_rate,
        )
        self._batch_of_group[moved] = bid
        self.result.add_migration(len(moved), moved_state, pause_s)

    def set_routing(self, routing: SplitRouting | None) -> None:
        """New split shares for the plan in force (see :meth:`apply`): a splitting policy's
        decision that moved no group's main engine."""
        self._split = _split_routing(routing, self.plan)

    @property
    def window_loads(self) -> np.ndarray:
        """The last window's histogram Y_t (tuples offered per group)."""
        return self._recent[-1].copy()

    def switch_plan(self, plan: Plan, reason: str = "") -> None:
        """Route by ``plan`` from now on (an external controller's realization): the groups
        that change engine pause and buffer like any migration; a change of the live engine
        count is logged as a scale event."""
        old = self.plan
        if plan.parallelism != old.parallelism:
            self.result.add_scale(self.now, old.parallelism, plan.parallelism, reason)
        self._split = None
        moved = np.flatnonzero(plan.assignment != old.assignment)
        self._switch(plan, moved, old.assignment)

    def set_engines(self, n: int, reason: str = "") -> Plan:
        """Make ``n`` engines live (the elasticity hook) by the control loop's one scale
        realization (:func:`keyshift.control.scale_plan`, ELB's mechanics: revive dead
        slots, then append; scale-in empties the least loaded). The policy sees the new
        plan at its next window, as in the job. Returns the new plan."""
        from keyshift.control.scaling import scale_plan

        if int(n) != n or n < 1:
            raise SimError("engines", f"must be an integer >= 1, got {n}")
        if int(n) == self.plan.parallelism:
            return self.plan
        new = scale_plan(self.plan, int(n), self._recent[-1])[0]
        self.switch_plan(Plan(new.assignment, new.slots, self.plan.version + 1, new.live),
                         reason)
        return self.plan

    # ---- whole runs ------------------------------------------------------------------
    def queued(self) -> float:
        """Tuples still inside the system: engine queues, migration buffers, source backlog."""
        buffered = sum(m.buffer.total() for m in self._migrations.values())
        return self._queues.total() + buffered + float(self._backlog.sum())

    def run(
        self,
        duration_s: float,
        hook: Hook | None = None,
        progress: bool = False,
        label: str = "simulating",
    ) -> SimResult:
        """Simulate ``duration_s`` seconds (whole windows) and return the result."""
        if not (duration_s > 0 and math.isfinite(duration_s)):
            raise SimError("duration", f"must be a finite number of seconds > 0, got {duration_s}")
        windows = max(1, int(math.ceil(duration_s / self.config.window_s - 1e-9)))
        t0 = time.perf_counter()
        if progress:
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task(label, total=windows)
                for _ in range(windows):
                    self.step_window(hook)
                    bar.advance(task)
                    if self.workload.exhausted(self.now) and self.queued() <= 1e-9:
                        break
        else:
            for _ in range(windows):
                self.step_window(hook)
                if self.workload.exhausted(self.now) and self.queued() <= 1e-9:
                    break
        self.result.wall_s += time.perf_counter() - t0
        self.result.queued_end = self.queued()
        self.result.latency_hist = self._latency_hist.copy()
        return self.result


def _split_routing(
    routing: SplitRouting | None, plan: Plan
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Validate a policy's split routing (see :meth:`Simulator.apply`)."""
    if routing is None:
        return None
    try:
        g = np.asarray(routing.groups, dtype=np.int64)
        dest = np.asarray(routing.engines, dtype=np.int64)
        share = np.asarray(routing.share, dtype=np.float64)
    except (TypeError, ValueError):
        raise SimError("routing", "needs arrays groups, engines and share") from None
    if not (g.shape == dest.shape == share.shape) or g.ndim != 1:
        raise SimError("routing", "groups, engines and share must have the same length")
    if g.size == 0:
        return None
    if g.min() < 0 or g.max() >= plan.groups or dest.min() < 0 or dest.max() >= plan.slots:
        raise SimError("routing", "group or engine out of range")
    if not plan.live[dest].all():
        raise SimError("routing", "routes tuples to an engine that is not live")
    if (share < 0).any() or (share > 1).any():
        raise SimError("routing", "share must be within [0, 1]")
    if (np.bincount(g, weights=share) > 1.0 + 1e-9).any():
        raise SimError("routing", "a group's shares add up to more than 1")
    return g, dest, share

