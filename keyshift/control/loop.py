"""The control loop: collect → evaluate → decide → realize → record, once per window.

Shaped like the Flink Kubernetes autoscaler's ``JobAutoScalerImpl``: the driver collects a
:class:`~keyshift.control.window.WindowStats`, :meth:`ControlLoop.step` evaluates it
(:func:`~keyshift.control.evaluate.evaluate`), decides (the scaler, then the balancer, then
the vetoes: :mod:`keyshift.control.decision`), realizes a new plan version through the
store and a :class:`Realizer` (the simulator's plan switch; the Spark job's engines read the
store), judges each realized scale-out a few windows later and holds the next after one
that did not help (:mod:`keyshift.control.guard`), and records the typed state
(:class:`~keyshift.control.store.ControlRecord`) and the
audit rows. The Spark job, the simulator and the elastic replay all drive this one step.

Plans and recovery: the plan in force for batch b is the newest plan version put in force at
a window end before b, so a restarted driver routes a re-executed batch as the first
attempt did. A window's record is written before its plan and its audit rows: a batch
re-executed after a crash takes the scaler's recorded decision (its timings differ; the
decision must not) and recomputes the rest, which is deterministic.

``mode = "recommend"`` decides and records with the reasons, and realizes nothing: no new
plan version, no migration (the Flink autoscaler's recommendation mode, for a first week
on a production job).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from keyshift.elastic.decision import ScalingDecision
from keyshift.elastic.reconfiguration import MeasuredMigration, ReconfigurationCost
from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan
from keyshift.policies import Decision, Policy, Window, make_policy, policy_class

from .decision import (
    DRY_RUN,
    RECOMMEND,
    ControlDecision,
    audit_row,
    balancer_reason,
    min_gain_veto,
    plan_action,
    plan_diff,
)
from .evaluate import Evaluation, evaluate
from .guard import INEFFECTIVE, GuardSettings, GuardState, ScalingGuard
from .overrule import Overrule
from .scaling import Forecaster, ScalerStep, one_line, scale_plan
from .store import ControlRecord, ControlStore
from .window import WindowSample, WindowStats

MODES = ("act", "recommend")


class Realizer(Protocol):
    """Makes a realized decision happen outside the loop (the loop has already stored the
    new plan version)."""

    def realize(self, decision: ControlDecision) -> None: ...


@dataclass(frozen=True)
class LoopSettings:
    """The loop's own settings (the policies and the scaler take theirs in constructors)."""

    window_s: float
    min_gain: float = 0.0
    mode: str = "act"
    theta: float = 0.0
    theta2: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"controller.mode: must be one of {', '.join(MODES)}, "
                             f"got {self.mode!r}")
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"controller.min_gain: must be in [0, 1), got {self.min_gain}")

    @classmethod
    def from_config(cls, cfg: Any) -> LoopSettings:
        c = cfg.controller
        return cls(window_s=float(c.window_s), min_gain=float(c.min_gain), mode=c.mode,
                   theta=float(c.theta), theta2=float(cfg.planner.theta2))


@dataclass
class _ScalerPart:
    """The scaler's part of one window: its decision, the sample it decided on, the reason's
    text, the plan of a new N (None: N stays) and whether it was replayed from the store."""

    replayed: bool = False
    scaling: ScalingDecision | None = None
    sample: WindowSample | None = None
    text: str = ""
    candidate: Plan | None = None


@dataclass
class _BalancerPart:
    """The balancer's part of one window: the policy's decision, the action the loop takes
    on it (none, rebalance or declined), the reason's text and the plan it would put in
    force."""

    decision: Decision | None = None
    action: str = "none"
    text: str = ""
    candidate: Plan | None = None


class ControlLoop:
    """One run's loop; all durable state goes through ``store``."""

    def __init__(self, store: ControlStore, settings: LoopSettings, policy: Policy | None,
                 policy_name: str, scaler: ScalerStep | None = None,
                 realizer: Realizer | None = None, run_id: str = "",
                 clock: Callable[[], float] = time.time,
                 guard: ScalingGuard | None = None,
                 reconfiguration: ReconfigurationCost | None = None,
                 overrule: Overrule | None = None) -> None:
        self.store = store
        # measured demand bounds the scaler's N (keyshift.control.overrule); None: off
        self.overrule = overrule if scaler is not None else None
        # the learned RC and min_gain (keyshift.elastic.reconfiguration); None: as configured
        self.reconfiguration = reconfiguration
        self.guard = guard if scaler is not None else None  # it guards the scaler
        self.settings = settings
        self.policy = policy
        self.policy_name = policy_name
        self.scaler = scaler
        self.realizer = realizer
        self.run_id = run_id
        self.clock = clock
        if scaler is not None and settings.mode == "recommend":
            scaler.scaler.dry_run = True  # the scaler's own "decide, do not apply"
        self._plans: dict[int, Plan] = {}
        self._changes: list[tuple[int, int]] = []  # (batch_id, plan_version), ascending
        self._recorded: dict[int, ControlRecord] = {}
        # the last window a previous attempt closed before the restart's first batch
        self.last_closed: ControlRecord | None = None
        # and the one before it (where the last closed window began)
        self.closed_before_last: ControlRecord | None = None
        self.last: ControlDecision | None = None

    # -- state ----------------------------------------------------------------------------
    def start(self, initial: Plan, batch_id: int = 0, fresh: bool = False) -> None:
        """(Re)start before ``batch_id``: plans, plan changes and the scaler's state from
        the store; records at >= ``batch_id`` (a crashed attempt's) are kept for replay.
        ``fresh``: no process of this run has started before, so the store holds nothing
        of it and is not read (on a cluster its reads took seconds of the start-up)."""
        groups = initial.groups
        plans = {p.version: p for p in self.store.plans(groups)} \
            if batch_id > 0 and not fresh else {}
        records = sorted(self.store.records(), key=lambda r: r.batch_id) \
            if not fresh and (batch_id > 0 or self.scaler is not None) else []
        if initial.version not in plans:
            self.store.write_plan(initial, self.policy_name, "initial plan", -1)
            plans[initial.version] = initial
        self._plans = plans
        done = [r for r in records if r.batch_id < batch_id]
        self._changes = [(r.batch_id, r.plan_version) for r in done
                         if r.plan_version is not None and r.plan_version in plans]
        self._recorded = {r.batch_id: r for r in records if r.batch_id >= batch_id}
        self.last_closed = done[-1] if done else None
        self.closed_before_last = done[-2] if len(done) > 1 else None
        if self.scaler is not None:
            states = [r.scaler for r in done if r.scaler is not None]
            self.scaler.restart([r.sample for r in done if r.sample is not None],
                                states[-1] if states else None)
        if self.guard is not None:
            guards = [r.guard for r in done if r.guard is not None]
            self.guard.state = GuardState.from_json(guards[-1] if guards else None)
        if self.reconfiguration is not None and not fresh:
            self.reconfiguration.observe(self.store.migration_costs())

    def recorded_closes(self) -> list[int]:
        """The batches at or after the restart's first one that closed a window in a crashed
        attempt: a timed window clock closes there again (keyshift.control.window_clock)."""
        return sorted(self._recorded)

    def measured_migration(self, m: MeasuredMigration) -> None:
        """A realized migration as the driver measured it: kept in the store, and with a
        learned reconfiguration cost the next windows plan with it."""
        self.store.write_migration_cost(m)
        if self.reconfiguration is not None:
            self.reconfiguration.observe([m])

    def min_gain(self) -> float:
        """The balancer's least relative gain: learned, or ``controller.min_gain``."""
        if self.reconfiguration is None:
            return self.settings.min_gain
        return self.reconfiguration.min_gain(self.settings.window_s)

    def plan_for(self, batch_id: int) -> Plan:
        """The plan that routes batch ``batch_id``."""
        version = min(self._plans)
        for b, v in self._changes:
            if b < batch_id:
                version = v
        return self._plans[version]

    def adopt(self, plan: Plan, batch_id: int, who: str, reason: str) -> None:
        """A plan put in force outside the loop from batch ``batch_id`` + 1 on (the
        simulator's elasticity hook): stored as a plan version like the loop's own, so the
        next window is decided from the plan that really routed it."""
        if plan.version in self._plans:
            raise ValueError(f"plan: version {plan.version} is already in the store")
        self.store.write_plan(plan, who, reason, batch_id)
        self._plans[plan.version] = plan
        self._changes.append((batch_id, plan.version))

    # -- the loop -----------------------------------------------------------------------------
    def step(self, window: WindowStats) -> ControlDecision:
        """Evaluate, decide, realize and record the window that ``window.last_batch`` closed."""
        s = self.settings
        old = self.plan_for(window.last_batch + 1)
        ev = evaluate(window, old, s.window_s, s.theta, s.theta2,
                      self.scaler.expected() if self.scaler is not None else None)
        recorded = self._recorded.pop(window.last_batch, None)
        state = np.where(window.state > 0, window.state, 0.0)
        # did the last scale-out help? (keyshift.control.guard; judged before the scaler,
        # whose next scale-out an ineffective verdict holds, or when the scaler asks again)
        if self.guard is not None:
            self.guard.judge(window, ev)
        # decide: the scaler first, then the balancer on the unchanged plan, and its vetoes
        scaler = self._decide_scale(window, old, recorded)
        balancer = self._decide_balance(window, old, state, ev) if scaler.candidate is None \
            else _BalancerPart()
        decision = self._decision(window, old, ev, state, scaler, balancer)
        decision = self._audited(decision, window, state, scaler, balancer)
        self._follow_guard(decision, window, scaler, recorded)
        self._record(decision, scaler, balancer)
        self.last = decision
        return decision

    # -- decide -----------------------------------------------------------------------------
    def _decide_scale(self, window: WindowStats, old: Plan,
                      recorded: ControlRecord | None) -> _ScalerPart:
        """The scaler's N for the next window (replayed as first decided when the store
        holds the window's record) and, for a new N, the plan that realizes it."""
        part = _ScalerPart(replayed=recorded is not None and recorded.scaler is not None)
        if self.scaler is None:
            return part
        n = old.parallelism
        sample = window.sample(n, self.clock(), self.settings.window_s)
        if part.replayed:
            sample = recorded.sample or sample
            scaling = self.scaler.replay(window.index + 1, n, sample, recorded.scaler)
        else:
            scaling = self._scale_anew(window, old, sample)
        text = scaling.reason
        if scaling.engines_after != n:
            try:
                part.candidate = scale_plan(old, scaling.engines_after, window.loads)[0]
            except Exception as exc:  # noqa: BLE001 -- keep N, say why
                if not self.scaler.keep_on_error:
                    raise
                text = f"{text}; not realized: {one_line(exc)}"
                scaling = self.scaler.keep(window.index + 1, n, text)
        part.sample, part.scaling, part.text = sample, scaling, text
        return part

    def _scale_anew(self, window: WindowStats, old: Plan, sample: WindowSample) -> ScalingDecision:
        """The scaler's own decision on this window, through the guardrails."""
        n = old.parallelism
        # per-engine loads only where the window counted groups (the replay has none: its
        # scalers then see the mean, as they say in their reasons)
        per_engine = (live_loads(old.assignment, window.loads, old.live)
                      if window.loads.size and window.loads.sum() > 0 else None)
        since = getattr(self.scaler.scaler, "since_change_", None)
        if self.reconfiguration is not None and hasattr(self.scaler.scaler, "rc"):
            # the planner prices a change of N at what one costs now (Eq. 11's RC)
            self.scaler.scaler.rc = self.reconfiguration.rc(
                sample.in_tuples / self.settings.window_s)
        scaling = self.scaler.decide(window.index + 1, n, sample, per_engine)
        history = self.scaler.history
        if self.overrule is not None and not scaling.dry_run and history \
                and history[-1] is sample:  # an idle window tells it nothing
            bounded = self.overrule.apply(scaling, self.scaler.history, window.lag)
            if bounded is not scaling:
                forget = getattr(self.scaler.scaler, "path_", None)
                if forget is not None:
                    self.scaler.scaler.path_ = None  # planned on the overruled forecast
                scaling = bounded
        if self.guard is not None:
            guarded = self.guard.admit(scaling, window.index, n)
            if guarded.engines_after == n != scaling.engines_after:
                self.scaler.held(since)  # N stayed: no change for its cooldown
            scaling = guarded
        return scaling

    def _decide_balance(self, window: WindowStats, old: Plan, state: np.ndarray,
                        ev: Evaluation) -> _BalancerPart:
        """The balancer's plan on the unchanged engine count, and the ``min_gain`` veto."""
        part = _BalancerPart()
        if self.policy is None:
            part.text = f"{self.policy_name} is a fixed plan"
        else:
            d = self.policy.decide(old, Window(loads=window.loads, state=state,
                                               history=window.history))
            part.decision, part.text = d, balancer_reason(d)
            veto = min_gain_veto(old, d.plan, window.loads, self.min_gain()) if d.changed else ""
            if veto:
                part.action, part.text = "declined", f"declined: {part.text}; {veto}"
            elif d.changed:
                action = plan_action(old, d.plan)
                part.candidate, part.action = d.plan, action if action != "none" else "rebalance"
        # imbalance above θ left as it is because no key-granular plan could do better
        # (keyshift.control.floor): the reason says so, naming the hot key group
        if part.action in ("none", "declined") and ev.over_theta \
                and ev.floor.reached_by(ev.max_load, self.min_gain()):
            part.text = f"{part.text}; {ev.floor.reason()}"
        return part

    # -- realize ----------------------------------------------------------------------------
    def _decision(self, window: WindowStats, old: Plan, ev: Evaluation, state: np.ndarray,
                  scaler: _ScalerPart, balancer: _BalancerPart) -> ControlDecision:
        """The window's decision: in act mode the candidate becomes the next plan version;
        its one action is what was realized, else what the scaler proposed (dry run,
        recommend), else the balancer's (recommended, declined or none)."""
        n = old.parallelism
        balanced = scaler.candidate is None
        candidate = balancer.candidate if balanced else scaler.candidate
        after, version = old, None
        if candidate is not None and self.settings.mode == "act":
            version = old.version + 1
            after = Plan(candidate.assignment, candidate.slots, version, candidate.live)
        scaling, component = scaler.scaling, "balancer" if balanced else "scaler"
        if candidate is not None and not balanced:
            action = plan_action(old, candidate)
        elif balanced and version is not None:
            action = balancer.action
        elif scaling is not None and scaling.proposed != n:
            action, component = scaling.action, "scaler"
        elif scaling is not None and scaling.held and balancer.action == "none":
            action, component = "declined", "scaler"
        else:
            action = balancer.action
        return ControlDecision(
            batch_id=window.last_batch, window=window.index, action=action,
            component=component, reason=scaler.text or balancer.text,
            realized=version is not None, before=old, after=after, candidate=candidate,
            moves=plan_diff(old, candidate if candidate is not None else old, state),
            evaluation=ev, scaling=scaling, balancing=balancer.decision,
            verdict=self.guard.last if self.guard is not None else None)

    def _follow_guard(self, d: ControlDecision, window: WindowStats, scaler: _ScalerPart,
                      recorded: ControlRecord | None) -> None:
        """The guard's state after the window: as first decided on a replay, else waiting
        for the effect of a realized change of N."""
        if self.guard is None:
            return
        if scaler.replayed and recorded.guard is not None:
            self.guard.state = GuardState.from_json(recorded.guard)  # as first decided
        elif d.realized and scaler.candidate is not None:
            self.guard.expect(window, d.before.parallelism, d.after.parallelism,
                              d.evaluation)

    # -- record -----------------------------------------------------------------------------
    def _record(self, d: ControlDecision, scaler: _ScalerPart, balancer: _BalancerPart) -> None:
        """Record (state first: a re-executed batch must find the scaler's decision) and
        realize the new plan version, then the audit rows."""
        b, version = d.batch_id, d.after.version if d.realized else None
        # every window leaves a record, also one that changed nothing: a restarted driver
        # finds where its last window closed (timed windows are not batch arithmetic)
        scaler_state = None
        if self.scaler is not None and scaler.scaling is not None:
            scaler_state = self.scaler.state(scaler.scaling, d.rows[0]["reason"])
        self.store.write_record(ControlRecord(
            b, d.window, version, scaler.sample, scaler_state,
            self.guard.state.to_json() if self.guard is not None else None))
        if version is not None:
            balanced = scaler.candidate is None
            who = self.policy_name if balanced else "scaler"
            text = balancer.text if balanced else scaler.text
            self.store.write_plan(d.after, who, text, b)
            self._plans[version] = d.after
            self._changes.append((b, version))
            if self.realizer is not None:
                self.realizer.realize(d)
        self.store.write_decisions(list(d.rows), b)

    def _audited(self, d: ControlDecision, window: WindowStats, state: np.ndarray,
                 scaler: _ScalerPart, balancer: _BalancerPart) -> ControlDecision:
        """The decision with its audit rows and the window's reason: its last row's, the
        scaler's when the guardrails held it; an ineffective scale-out gets its own row."""
        rows = self._rows(d, scaler=scaler, balancer=balancer, window=window, state=state)
        if window.spanned > 1:  # one batch ran over several windows: the loop was late
            delta = window.spanned_window_s or self.settings.window_s
            note = (f"; batch {window.last_batch} spanned {window.spanned} windows of "
                    f"{delta:g} s, decided at its end")
            rows = [{**r, "reason": r["reason"] + note} for r in rows]
        reason = rows[0 if d.action == "declined" and d.component == "scaler" else -1]["reason"]
        verdict, n = d.verdict, d.before.parallelism
        if verdict is not None and verdict.ineffective:  # its own row, after the window's
            rows.append(audit_row(
                self.run_id, d.batch_id, "scaler", self.scaler.name, INEFFECTIVE,
                verdict.reason(), rstd_before=None, rstd_after=None, moved=None, psi=None,
                engines_before=n, engines_after=n, version=None, floor=d.evaluation.floor,
                effectiveness=verdict.effectiveness, hold_until=verdict.hold_until))
        return replace(d, rows=tuple(rows), reason=reason)

    def _rows(self, d: ControlDecision, *, scaler: _ScalerPart, balancer: _BalancerPart,
              window: WindowStats, state: np.ndarray) -> list[dict[str, Any]]:
        old, after, rows = d.before, d.after, []
        recommend = self.settings.mode == "recommend"
        floor = d.evaluation.floor  # the window's, on every row of the window
        rstd = d.evaluation.balance.rstd
        scaling, scale_text, replayed = scaler.scaling, scaler.text, scaler.replayed
        balanced = scaler.candidate is None
        balancing, bal_action, bal_text = balancer.decision, balancer.action, balancer.text
        if scaling is not None:
            text, version, moved, psi, rstd_after = scale_text, None, None, None, None
            engines_after = scaling.engines_after
            if d.candidate is not None and not balanced:
                moved_groups = len(d.moves)
                psi, moved = float(state[d.moves.groups].sum()), moved_groups
                rstd_after = float(_rstd(d.candidate, window.loads))
                version = after.version if d.realized else None
                engines_after = after.parallelism
                if not replayed:
                    text += (f"; realized {old.parallelism} -> {d.candidate.parallelism} "
                             f"engines, {moved_groups} groups moved")
            if not replayed and recommend:
                text = (RECOMMEND if scaling.proposed != old.parallelism else "") + text
            elif not replayed and scaling.dry_run:
                text = DRY_RUN + text
            rows.append(audit_row(
                self.run_id, d.batch_id, "scaler", scaling.policy, scaling.action, text,
                rstd_before=rstd, rstd_after=rstd_after, moved=moved, psi=psi,
                engines_before=old.parallelism, engines_after=engines_after, version=version,
                floor=floor))
        if balanced:
            if balancing is None or bal_action in ("none", "declined"):
                before = d.evaluation.balance if balancing is None else balancing.before
                unmoved = bal_action == "declined" or balancing is None
                rows.append(audit_row(
                    self.run_id, d.batch_id, "balancer", self.policy_name, bal_action, bal_text,
                    rstd_before=before.rstd,
                    rstd_after=(before if unmoved else balancing.after).rstd,
                    moved=0 if unmoved else len(balancing.moves),
                    psi=0.0 if unmoved else balancing.moves.total_state,
                    engines_before=old.parallelism, engines_after=old.parallelism,
                    version=None, floor=floor))
            else:
                rows.append(audit_row(
                    self.run_id, d.batch_id, "balancer", self.policy_name, bal_action,
                    (RECOMMEND if recommend else "") + bal_text,
                    rstd_before=balancing.before.rstd, rstd_after=balancing.after.rstd,
                    moved=len(balancing.moves), psi=balancing.moves.total_state,
                    engines_before=old.parallelism, engines_after=after.parallelism,
                    version=after.version if d.realized else None, floor=floor))
        return rows


def _rstd(plan: Plan, loads: np.ndarray) -> float:
    return Balance.of(live_loads(plan.assignment, loads, plan.live)).rstd


def policy_params(cfg: Any, name: str) -> dict[str, Any]:
    """The controller config keys this policy's constructor accepts (by parameter name)."""
    c = cfg.controller
    offered = {
        "theta": c.theta,
        # ELB's band in events per engine per window; unset = derived from the mean (no scaling)
        "band": (c.band_low, c.band_high) if c.band_high > 0 else None,
        "min_engines": cfg.engines.min,
        "max_engines": cfg.engines.max,
    }
    accepted = inspect.signature(policy_class(name).__init__).parameters
    return {k: v for k, v in offered.items() if k in accepted and v is not None}


def policy_from_config(cfg: Any, name: str, params: dict[str, Any] | None = None) -> Any:
    """The one way a policy is built from config: its ``[controller]``/``[engines]``
    parameters (:func:`policy_params`; none without ``cfg``) under ``params``."""
    defaults = policy_params(cfg, name) if cfg is not None else {}
    return make_policy(name, **{**defaults, **(params or {})})


def loop_from_config(cfg: Any, store: ControlStore, policy_name: str,
                     forecaster: Forecaster | None = None, realizer: Realizer | None = None,
                     run_id: str = "", clock: Callable[[], float] = time.time,
                     params: dict[str, Any] | None = None, balance: bool = True) -> ControlLoop:
    """The loop every driver builds from one config: ``[controller]`` (window, θ, min_gain,
    mode), the policy with its config parameters (``params`` override them; ``balance``
    False: a fixed plan), and with ``[planner] enabled`` the planner fed by ``forecaster``."""
    from keyshift.elastic.path_scaler import path_scaler_from_config

    policy = policy_from_config(cfg, policy_name, params) if balance else None
    scaler = ScalerStep(path_scaler_from_config(cfg), forecaster, cfg.controller.window_s,
                        clock=clock) if cfg.planner.enabled else None
    return ControlLoop(store, LoopSettings.from_config(cfg), policy, policy_name, scaler,
                       realizer, run_id, clock, guard_from_config(cfg),
                       reconfiguration_from_config(cfg),
                       overrule_from_config(cfg, scaler))


def overrule_from_config(cfg: Any, scaler: ScalerStep | None) -> Overrule | None:
    """Measured demand over the scaler's N (``planner.overrule_windows``; 0 = off)."""
    p = cfg.planner
    if scaler is None or not p.overrule_windows:
        return None
    lo, hi = scaler.scaler.bounds()
    return Overrule(p.overrule_windows, float(cfg.controller.window_s),
                    p.target_utilisation, lo, hi, rise_windows=p.overrule_rise_windows)


def reconfiguration_from_config(cfg: Any) -> ReconfigurationCost | None:
    """The learned reconfiguration cost when ``planner.rc_source = "learned"``."""
    p = cfg.planner
    if p.rc_source != "learned":
        return None
    return ReconfigurationCost(p.rc, p.mc, float(cfg.controller.min_gain), p.rc_prior_changes)


def guard_from_config(cfg: Any) -> ScalingGuard | None:
    """The scaler's guardrails from ``[planner]`` (None when every one is off)."""
    settings = GuardSettings.from_config(cfg)
    return ScalingGuard(settings) if settings.active else None
