"""The scaler's part of the loop: the engine count N for the next window, from a forecast.

:class:`ScalerStep` wraps any :class:`~keyshift.elastic.scaler.Scaler` (the GP planner's
:class:`~keyshift.elastic.path_scaler.PathScaler`, or a baseline) with what a running loop
needs around it: the history of finished windows, a :class:`Forecaster` (the champion GPs of
the job, the pure-core fallback, an experiment's oracle), the reason of every decision, and
the typed state that survives a restart (:class:`~keyshift.control.store.ScalerState`).

:func:`scale_plan` turns a new N into a plan, the one realization of a change of N for every
driver: ELB's scale mechanics (elb-clb §3) with a band centred on the new mean.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from keyshift.elastic.baselines import EngineObservation
from keyshift.elastic.cost import Forecast
from keyshift.elastic.decision import ScalingDecision
from keyshift.elastic.forecast import DAY_S, EngineLatency, SeasonalProfile
from keyshift.elastic.path_scaler import PathScaler
from keyshift.elastic.scaler import ForecastFn, Scaler
from keyshift.plan import Plan
from keyshift.policies import Window, make_policy

from .store import ScalerState
from .window import WindowSample

MIN_FALLBACK_WINDOWS = 3
"""Measured windows the pure-core fallback needs before it forecasts (else N is kept)."""


class NoForecast(RuntimeError):
    """No source can forecast; the scaler keeps N and says why."""


@dataclass(frozen=True)
class SourceChange:
    """What happened to a forecaster's source since the last window (a new model loaded, a
    failed load that kept the old one), said once in the next decision's reason.
    ``replan``: the source changed, so a path planned from the old one is dropped and the
    window plans afresh with the new one."""

    text: str
    replan: bool = False


class Forecaster(Protocol):
    """Where the planner's forecasts come from. ``forecast`` returns the forecast of
    ``horizon`` windows from window ``window`` (starting at epoch ``t0``) for 1..``k``
    engines and a label naming its source; it raises :class:`NoForecast` when it cannot.
    A forecaster whose source can change while the loop runs (the job's registry) also has
    ``follow(window) -> SourceChange | None``, called once per decided window first."""

    def observe(self, sample: WindowSample) -> None: ...

    def forecast(self, window: int, t0: float, horizon: int, k: int
                 ) -> tuple[Forecast, str]: ...


def fallback_forecast(history: Sequence[WindowSample], t0: float, horizon: int, k: int,
                      window_s: float) -> Forecast:
    """Pure-core forecast fitted on this run's windows.

    In: :class:`SeasonalProfile` with one slot per window; its cycle is a day once the run
    has two days of windows, else a single slot, i.e. an AR(1) around the run's mean (a
    minutes-long run has no daily shape to learn, only the persistence of the recent level).
    Lat: :class:`EngineLatency` (affine in N) on the windows that processed tuples.
    """
    measured = [s for s in history if s.lat_s is not None]
    if len(measured) < MIN_FALLBACK_WINDOWS:
        raise NoForecast(f"too little history for the fallback ({len(measured)} of "
                         f"{MIN_FALLBACK_WINDOWS} measured windows)")
    t = np.array([s.t for s in history], dtype=np.float64)
    y = np.array([s.in_tuples for s in history], dtype=np.float64)
    if t[-1] - t[0] >= 2 * DAY_S:
        profile = SeasonalProfile(slot_s=window_s, period_s=DAY_S).fit(t, y)
        ahead = t0 + window_s * np.arange(horizon, dtype=np.float64)
    else:
        # windows numbered one Δt apart: the AR(1) steps are windows, whatever their wall time
        steps = window_s * np.arange(t.size, dtype=np.float64)
        profile = SeasonalProfile(slot_s=window_s, period_s=window_s).fit(steps, y)
        ahead = steps[-1] + window_s * np.arange(1, horizon + 1, dtype=np.float64)
    in_mean, in_std = profile.predict(ahead)
    lat = EngineLatency().fit(np.array([s.engines for s in measured], dtype=np.float64),
                              np.array([s.lat_s for s in measured], dtype=np.float64))
    lm, ls = lat.predict(np.arange(1, k + 1, dtype=np.float64))
    # the profile's std is a spread of past windows, not a predictive distribution: the
    # forecast reserve sizes on the rises instead (as the simulator's seasonal forecaster)
    return Forecast(in_mean, in_std, np.tile(lm, (horizon, 1)),
                    np.tile(np.nan_to_num(ls), (horizon, 1)), in_predictive=False)


class FallbackForecaster:
    """:func:`fallback_forecast` on the windows it observed (idle ones excluded)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.history: list[WindowSample] = []

    def observe(self, sample: WindowSample) -> None:
        self.history.append(sample)

    def forecast(self, window: int, t0: float, horizon: int, k: int) -> tuple[Forecast, str]:
        fc = fallback_forecast(self.history, t0, horizon, k, self.window_s)
        return fc, f"fallback SeasonalProfile+EngineLatency on {len(self.history)} windows"


class FunctionForecaster:
    """An experiment's forecast function (window, horizon) → Forecast as a forecaster; its
    online updates are the experiment's business."""

    def __init__(self, fn: ForecastFn, label: str = "") -> None:
        self.fn = fn
        self.label = label

    def observe(self, sample: WindowSample) -> None:
        return None

    def forecast(self, window: int, t0: float, horizon: int, k: int) -> tuple[Forecast, str]:
        return self.fn(window, horizon), self.label


def scale_plan(plan: Plan, target: int, loads: np.ndarray) -> tuple[Plan, dict]:
    """The plan with ``target`` live engines that moves the fewest groups, via ELB.

    ELB's band [0, 2w/N] is centred on the new mean w/N, so its π is exactly N; its
    preparation revives dead slots (lowest first) or appends slots on a scale-out and drops
    the least loaded engines on a scale-in; its shedding moves, from each engine above
    w/N, the heaviest groups that fit under the excess (at most w/N each), onto the
    emptiest engines. Groups of removed engines all move; nothing else does. A window with
    no load weighs every group equally, so the new slots still receive groups. The new
    plan's version is the loop's business (it keeps ``plan``'s).
    """
    if target < 1:
        raise ValueError(f"target: needs >= 1 engines, got {target}")
    if target == plan.parallelism:
        return plan, {"reason": "N unchanged"}
    if plan.groups == 0:  # the replay's model has engines but no key groups
        return Plan(np.zeros(0, dtype=np.int64), target, plan.version), {}
    weights = expected_loads(loads)
    w = float(plan.engine_loads(weights).sum())
    elb = make_policy("elb", band=(0.0, 2.0 * w / target), min_engines=1, max_engines=None)
    new = elb.decide(plan, Window(loads=weights)).plan
    if new.parallelism != target:
        raise RuntimeError(f"ELB realized {new.parallelism} engines instead of {target}")
    return Plan(new.assignment, new.slots, plan.version, new.live), {}


def expected_loads(loads: np.ndarray) -> np.ndarray:
    """Each group's expected load next window from one window's counts: shrunk toward the
    mean by the share of their spread that Poisson noise explains (an empirical-Bayes moment
    estimate: observed variance = the groups' true variance + the mean). One window of a
    few events per group is mostly noise; a plan that moves its "heaviest" groups balances
    the window just past and not the next one (the elastic cluster bench's scale-out moved
    18 % of 1,024 groups of a uniform topic and ran at 62/38 for the rest of the ramp). A
    skewed window (variance far above the mean) keeps its shape. No load: equal weights."""
    x = np.asarray(loads, dtype=np.float64)
    m = float(x.mean()) if x.size else 0.0
    if m <= 0:
        return np.ones_like(x)
    v = float(x.var())
    keep = max(0.0, 1.0 - m / v) if v > 0 else 0.0
    return m + keep * (x - m)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class ScalerStep:
    """A scaler inside the loop: decides N once per window and never stops the loop when
    ``keep_on_error`` (the job's choice: an error keeps N and becomes the reason); the
    offline replay lets errors out, so a bad experiment fails loudly."""

    def __init__(self, scaler: Scaler, forecaster: Forecaster | None, window_s: float,
                 sel: float = 1.0, clock: Callable[[], float] = time.time,
                 keep_on_error: bool = True) -> None:
        self.scaler = scaler
        self.forecaster = forecaster
        self.window_s = float(window_s)
        self.sel = sel
        self.clock = clock
        self.keep_on_error = keep_on_error
        self.history: list[WindowSample] = []
        self.plan_source = ""
        self.scaler.reset()

    @property
    def name(self) -> str:
        return self.scaler.name

    def _k(self) -> int:
        return self.scaler.bounds()[1]

    # -- history ------------------------------------------------------------------------------
    def remember(self, sample: WindowSample) -> None:
        """A finished window for the history and the forecaster; an idle one tells them
        nothing."""
        if sample.lat_s is None and sample.in_tuples <= 0:
            return
        self.history.append(sample)
        if self.forecaster is not None:
            self.forecaster.observe(sample)

    def restart(self, samples: Sequence[WindowSample], last: ScalerState | None) -> None:
        """Rebuild after a restart: the finished windows (history, forecaster, burst
        reserve), then the path and cooldown of the last recorded decision."""
        self.scaler.reset()
        self.history = []
        forget = getattr(self.forecaster, "reset", None)
        if forget is not None:
            forget()
        for s in samples:
            self.remember(s)
        if samples and getattr(self.scaler, "reserve_quantile", 0) \
                and hasattr(self.scaler, "fit_reserve"):
            seen = [s.in_tuples for s in self.history if s.lat_s is not None]
            self.scaler.fit_reserve(np.asarray(seen, dtype=np.float64))
            self.scaler.reset()
        if last is not None:
            self._resume(last)

    def _resume(self, state: ScalerState) -> None:
        if not isinstance(self.scaler, PathScaler) or not state.path \
                or state.position >= len(state.path):
            self.scaler.resume(state.since_change)  # a used-up path: the next window plans
            return
        k, pos, path = self._k(), state.position, state.path
        # The forecast the path was planned on is not stored: the θ2 check of the next
        # window needs only the entry of the window just entered (stored); later windows
        # are forecast again from the current source.
        rest = len(path) - pos
        source = "a forecast made before a restart"
        try:
            later, label = self.forecaster.forecast(0, self.clock() + self.window_s, rest, k)
            source += f", later windows from {label}"  # the decisions name their models
            in_mean = np.concatenate([np.full(pos, state.fc_in), later.in_mean])
            in_std = np.concatenate([np.zeros(pos), later.in_std])
            lat_mean = np.vstack([np.full((pos, k), state.fc_lat), later.lat_mean])
            lat_std = np.vstack([np.zeros((pos, k)), later.lat_std])
        except Exception:  # noqa: BLE001 -- any source failure: the stored entry everywhere
            in_mean, in_std = np.full(len(path), state.fc_in), np.zeros(len(path))
            lat_mean = np.full((len(path), k), state.fc_lat)
            lat_std = np.zeros((len(path), k))
        self.scaler.resume(state.since_change, np.asarray(path, dtype=np.int64), pos,
                           Forecast(in_mean, in_std, lat_mean, lat_std))
        self.plan_source = source

    # -- the decision -----------------------------------------------------------------------
    def expected(self) -> tuple[float, float] | None:
        """The forecast (In, Lat) of the window that just ran, if the path planned one."""
        entered = getattr(self.scaler, "entered", None)
        return entered() if entered is not None else None

    def decide(self, index: int, engines_now: int, sample: WindowSample,
               engine_loads: np.ndarray | None = None) -> ScalingDecision:
        """N for window ``index`` after the window of ``sample``; the reason names the
        forecast's source. ``engine_loads`` (the window's tuples per live engine) reach the
        scalers that look at single engines, e.g. the 80/40 rule's busiest engine."""
        self.remember(sample)
        observed = None
        if sample.lat_s is not None:
            observed = EngineObservation(
                sample.in_tuples, sample.lat_s, engines_now, self.window_s, self.sel,
                engine_loads=(engine_loads if engine_loads is not None
                              and len(engine_loads) == engines_now else None))
        now = self.clock()
        used: list[str] = []
        forecast = None
        note = ""
        follow = getattr(self.forecaster, "follow", None)
        change = follow(index) if follow is not None else None
        if change is not None:
            note = f"{change.text}; "
            if change.replan and getattr(self.scaler, "path_", None) is not None:
                self.scaler.path_ = None  # planned from the old source: plan again
        if self.forecaster is not None:
            forecaster = self.forecaster

            def forecast(first: int, horizon: int) -> Forecast:
                fc, source = forecaster.forecast(first, now, horizon, self._k())
                used.append(source)
                return fc

        try:
            d = self.scaler.decide(index, engines_now, observed, forecast)
        except NoForecast as exc:
            return self.keep(index, engines_now, f"{note}kept {engines_now} engines: {exc}")
        except Exception as exc:
            if not self.keep_on_error:
                raise
            return self.keep(index, engines_now, f"{note}kept {engines_now} engines: "
                                                 f"planner failed: {one_line(exc)}")
        if self.forecaster is None:
            return d
        if used:
            self.plan_source = used[-1]
        source = (f"forecast: {used[-1]}" if used else
                  f"following the path planned from {self.plan_source or 'an earlier forecast'}")
        return replace(d, reason=f"{note}{source}; {d.reason}")

    def held(self, since_change: int | None) -> None:
        """The loop's guardrails kept N against the decision just made: the scaler's
        windows since its last change go on from ``since_change`` (its value before that
        decision), so its cooldown does not start from a change that never happened."""
        s = self.scaler
        cooldown = int(s.cooldown_windows or 0)
        since = cooldown if since_change is None else since_change
        s.since_change_ = min(since + 1, cooldown)

    def keep(self, index: int, engines_now: int, reason: str) -> ScalingDecision:
        return ScalingDecision(window=index, policy=self.name, engines_before=engines_now,
                               proposed=engines_now, engines_after=engines_now, reason=reason)

    def replay(self, index: int, engines_now: int, sample: WindowSample,
               state: ScalerState) -> ScalingDecision:
        """The decision an earlier attempt of this window's batch recorded, taken as
        decided: its sample (timings of a re-run differ) enters the history, its path
        becomes the scaler's."""
        self.remember(sample)
        reserve = getattr(self.scaler, "reserve_", None)
        if reserve is not None and sample.lat_s is not None:  # decide() would have seen it
            reserve.update(sample.in_tuples)
        self._resume(state)
        return ScalingDecision(window=index, policy=self.name, engines_before=engines_now,
                               proposed=state.proposed, engines_after=state.engines_after,
                               reason=state.reason, dry_run=bool(self.scaler.dry_run))

    def state(self, d: ScalingDecision, reason: str) -> ScalerState:
        """The typed state after decision ``d`` (``reason``: as recorded)."""
        s = self.scaler
        path = getattr(s, "path_", None)
        pos = int(getattr(s, "position_", 0) or 0)
        fc_in, fc_lat = 0.0, 0.0
        expected = self.expected()
        if expected is not None:
            fc_in, fc_lat = expected
        return ScalerState(tuple(int(e) for e in path) if path is not None else (), pos,
                           getattr(s, "since_change_", None), fc_in, fc_lat, d.proposed,
                           d.engines_after, reason)
