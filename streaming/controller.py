"""The Spark job's adapter of the control loop (:mod:`keyshift.control`).

The job calls, per micro-batch: :meth:`Controller.plan_for` (which plan routes the batch),
:meth:`Controller.collect` (the batch's group loads, state sizes, engine seconds and start),
and :meth:`Controller.end_of_batch`; when the batch closes a statistic window (the job's
windows are timed: the first batch to end Δ or more after the window opened closes it,
:mod:`keyshift.control.window_clock`) that is one :meth:`keyshift.control.ControlLoop.step`. A realized decision is a new plan version in Delta
``plans``; the engines migrate in the next batch (:mod:`keyshift.streaming.migration`).

State lives in Delta behind :class:`~keyshift.streaming.control_store.ControlLog` (plans, the typed
``control_state``, the executors' ``key_loads``); :meth:`Controller.recover` rebuilds the loop
from it at start and after a crash, so a re-executed batch is routed, and decided, as its
first attempt was. What the controller does with a policy is the kind its class declares
(:class:`keyshift.policies.PolicyKind`, from :mod:`keyshift.policies.registry`): ``online``
ones (dlb-h, dlb-l, dlb-s, elb, or an installed package's) decide every window; ``fixed``
(kg), ``splitter`` (dc, wc: the job splits hot keys, the plan stays) and ``from-plans`` (the
batch layer's lptf / clb / uhlb from ``plans`` scope ``baseline``) never rebalance. With
``[planner] enabled`` the scaler decides the engine count first
(:mod:`keyshift.streaming.scaling` supplies its forecasts).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import numpy as np

from keyshift.config import Config
from keyshift.control.window_clock import BatchWindows, Close, WindowClock
from keyshift.control import (
    ControlDecision,
    ControlStore,
    Floor,
    Forecaster,
    WindowStats,
    key_group_floor,
    loop_from_config,
    policy_params,
)
from keyshift.plan import Plan
from keyshift.policies import JOB_KINDS, PolicyInputError, PolicyKind, policy_info

from .control_store import ControlLog
from .events import events_of, publisher_for
from .scaling import JobForecaster


class ControllerError(ValueError):
    """Bad controller configuration; the message starts with the config key."""


class Controller:
    """One run's loop as the job drives it, batch by batch."""

    def __init__(
        self, cfg: Config, run_id: str, policy: str, groups: int, initial_engines: int,
        windows: WindowClock | int, log: ControlStore, params: dict[str, Any] | None = None,
        forecaster: Forecaster | None = None, clock=time.time,
    ) -> None:
        # an int is a count of batches a window (tests, replays); the job's are timed
        if isinstance(windows, int):
            if windows < 1:
                raise ControllerError(f"controller.window_s: gives {windows} batches")
            windows = BatchWindows(windows)
        self.windows = windows
        self.cfg = cfg
        self.run_id = run_id
        self.policy_name = policy
        try:  # online, fixed, from the batch layer's plans or a splitter: its class says
            self.policy_kind = policy_info(policy, JOB_KINDS, "the streaming job").kind
        except PolicyInputError as exc:
            raise ControllerError(f"controller.{exc}") from None
        self.groups = groups
        self.initial_engines = initial_engines
        self.log = log
        self.params = dict(params or {})
        self.forecaster = forecaster
        if cfg.planner.enabled and self.forecaster is None:
            self.forecaster = JobForecaster(cfg)
        self._load_models()  # on its own thread, beside the rest of the start-up
        # an online policy decides in the loop; the others' plans come from the batch
        # layer, a fixed hash or the splitter (recover() installs the first plan)
        self.loop = loop_from_config(cfg, log, policy, self.forecaster, run_id=run_id,
                                     clock=clock, params=self.params,
                                     balance=self.policy_kind is PolicyKind.ONLINE)
        self._window: WindowStats | None = None
        self._clock = clock
        self._window_end: float | None = None  # wall time the last window closed
        self.decide_s = 0.0
        self.last_decision: ControlDecision | None = None
        # the last close: how many windows its batch spanned (a batch longer than Δ)
        self.last_close: Close | None = None
        self.closed_batch: int | None = None  # the batch that closed it
        # the last closed window's loads (dc / wc split on them), or after a restart the
        # batches [first, end) to read them back from the store
        self._last_loads: np.ndarray | None = None
        self._last_range: tuple[int, int] | None = None
        # every decision also as a JSON event on [events] topic (off when ""); a broker
        # that is away never stops the job (keyshift.streaming.events)
        self.events = publisher_for(cfg, say=_say)

    @property
    def scaler(self):
        return self.loop.scaler

    def recover(self, batch_id: int, fresh: bool = False) -> None:
        """Load plans, control state and the open window's loads (start / restart);
        ``fresh``: a run no process started before, with nothing in the store to read."""
        self._load_models()
        self.loop.start(self._initial_plan(), batch_id, fresh=fresh)
        last = self.loop.last_closed
        before = self.loop.closed_before_last
        self._last_loads = None
        self._last_range = None if last is None else (
            self.windows.first_batch(last.batch_id, None if before is None else before.batch_id),
            last.batch_id + 1)
        self.windows.replay(self.loop.recorded_closes())
        start = self.windows.first_batch(batch_id, None if last is None else last.batch_id)
        index = self.windows.index(start, None if last is None else last.window)
        self._window = WindowStats.empty(index, self.groups, start)
        if start < batch_id:
            self._window.reopen(*self.log.window_loads(start, batch_id, self.groups))

    def _load_models(self) -> None:
        load = getattr(self.forecaster, "load_models", None)
        if load is not None:
            load()

    def _initial_plan(self) -> Plan:
        if self.policy_kind is PolicyKind.FROM_PLANS:
            plan = self.log.baseline_plan(self.policy_name, self.groups)
            if plan is None:
                raise ControllerError(
                    f"controller.policy: no '{self.policy_name}' plan with scope 'baseline' "
                    f"and {self.groups} groups in Delta plans; compute it with the batch layer "
                    "first (keyshift job baseline)"
                )
            return plan
        return Plan.hashed(self.groups, self.initial_engines, version=0)

    def _span(self, w: WindowStats) -> float:
        """Seconds the window's input arrived over: since the previous window closed, or,
        for a process's first window, since its first batch started — and never less than
        Δ. Batches on time close a window every Δ; batches slower than the trigger close
        it later, and the window then holds more than Δ's worth of input (issue 28: a
        150 events/s producer read as 1,129/s with 12-16 s batches). A window closed in
        less than Δ is a backlog being caught up, whose producers' rate is not the
        catch-up's, so Δ stays the divisor there."""
        now = self._clock()
        before, self._window_end = self._window_end, now
        start = before if before is not None else w.t0
        window_s = float(self.cfg.controller.window_s)
        return max(now - start, window_s) if start is not None else window_s

    def last_window_loads(self) -> np.ndarray | None:
        """The per-group loads of the last closed window (None while the first is open):
        counted in this process, or read back from the store's key loads after a restart."""
        if self._last_loads is None and self._last_range is not None:
            self._last_loads = self.log.window_loads(*self._last_range, self.groups)[0]
        return self._last_loads

    @property
    def window_index(self) -> int:
        """The open window's number (0 before :meth:`recover`)."""
        return self._window.index if self._window is not None else 0

    def plan_for(self, batch_id: int) -> Plan:
        """The plan that routes batch ``batch_id``."""
        return self.loop.plan_for(batch_id)

    @staticmethod
    def floor(loads: np.ndarray, engines: int) -> Floor:
        """The floor of one batch's group loads on ``engines`` live engines: the loop's
        measure of a window (:func:`keyshift.control.key_group_floor`), for the job's
        per-batch ``metrics`` row."""
        return key_group_floor(loads, engines)

    def collect(self, batch_id: int, loads: np.ndarray, state: np.ndarray,
                engine_s: float | None = None, started: datetime | None = None,
                kafka_span: tuple[float, float] | None = None) -> None:
        """One batch's per-group loads and state sizes; for the scaler also the seconds its
        engine tasks ran, the batch's start (the window's time for the forecasters) and the
        Kafka append times of its first and last event (the producers' rate)."""
        assert self._window is not None, "recover() first"
        if started is not None:
            self.windows.opened(batch_id, started.timestamp()
                                if isinstance(started, datetime) else float(started))
        self._window.add_batch(batch_id, loads, state, engine_s, started, kafka_span)

    def end_of_batch(self, batch_id: int, lag: float | None = None) -> ControlDecision | None:
        """At a window's last batch: the loop's step (evaluate, decide, realize, record);
        its decision, also kept as :attr:`last_decision`. None inside a window. ``lag``:
        records of the topic not read yet (:func:`progress_lag`), which the guardrails
        judge a scale-out on besides the busiest engine's share."""
        close = self.windows.close_at(batch_id, self._clock())
        if close is None:
            return None
        assert self._window is not None
        t0 = time.perf_counter()
        self.last_close, self.closed_batch = close, batch_id
        w = self._window
        self._last_loads, self._last_range = w.loads.copy(), None
        w.last_batch = batch_id
        w.spanned, w.spanned_window_s = close.spanned, close.window_s
        w.span_s = self._span(w)
        w.lag = lag
        self._window = WindowStats.empty(w.index + 1, self.groups, batch_id + 1)
        self._window.lag_before = lag  # the next window's backlog starts where this one's ends
        self.last_decision = d = self.loop.step(w)
        if self.events is not None:
            self.events.publish(events_of(d.rows, self.run_id, d.window, d.realized))
        self.decide_s = time.perf_counter() - t0
        return self.last_decision

    def planned_ahead(self, windows: int) -> int | None:
        """The most engines the scaler's path plans for the ``windows`` windows after the
        next one (None: no path, or the planner off): what the executors must be asked for
        ahead when they take that long to start (keyshift.streaming.executors)."""
        scaler = self.loop.scaler
        path = getattr(scaler.scaler, "path_", None) if scaler is not None else None
        if path is None or windows < 1:
            return None
        pos = int(getattr(scaler.scaler, "position_", 0) or 0)
        ahead = [int(n) for n in path[pos:pos + windows]]
        return max(ahead) if ahead else None

    def close(self, timeout_s: float = 10.0) -> None:
        """Send the scaling events still buffered (up to ``timeout_s``) and stop their thread."""
        if self.events is not None:
            self.events.close(timeout_s)


def progress_lag(query: Any) -> float | None:
    """Records the query had not read when it planned its last reported batch (Spark's
    ``latestOffset - endOffset``, :func:`keyshift.streaming.live_metrics.kafka_lag`): 0
    while batches take all there is, growing while the job falls behind (batches capped at
    ``spark.max_offsets_per_trigger``). None without a query or a progress report."""
    from .live_metrics import kafka_lag

    try:
        lag = kafka_lag(query.lastProgress) if query is not None else None
    except Exception:  # noqa: BLE001 -- a stopping query: no lag this window
        return None
    return None if lag is None else float(lag)


def _say(line: str) -> None:
    from keyshift.lakehouse.logs import say

    say(f"keyshift: {line}")


__all__ = ["ControlLog", "Controller", "ControllerError",
           "policy_params", "progress_lag"]
