"""The scaler of the streaming controller: choose the engine count N ahead of the load.

At the end of every statistic window, when ``[planner] enabled`` is set, the scaler

1. builds the window's :class:`~keyshift.elastic.decision.Observation` from what the job
   measured in the window's batches:

   * ``in_tuples`` (In of Eq. 9) = the valid events routed to the engines in the window, the
     sum of the per-group loads (``key_loads``), buffered events of arriving groups included;
   * ``lat_s`` (Lat of Eq. 9, seconds one engine spends per tuple) = the seconds the engine
     tasks of the window's batches worked (``streaming.engines.work_seconds``: every engine
     and restore task's ``duration_s`` without its wait for the first input row; state
     load/save and hand-over included, because they are part of what an engine does per
     batch) divided by the tuples those batches took. Then Δt · N / Lat is the
     window's capacity with N engines running side by side (Eq. 1). Delta commits and the
     driver are not engine work and are left out. On a host with fewer cores than engines
     the engines share cores, so the capacity of large N is optimistic there;
   * ``engines`` = the live engines of the plan that ran the window (π);
   * Δt = ``controller.window_s``; selectivity is left at 1 (Miss counts input tuples);

2. builds a :class:`~keyshift.elastic.cost.Forecast` over the planner's H windows:
   In from the champion ``keyshift-input-rate`` GP (events/s × Δt) and Lat for 1..K engines
   from the champion ``keyshift-latency`` GP, both through ``models.features`` (the feature
   builder the nightly training uses), conditioned online on every finished window
   (``add_observations``, no hyper-parameter refit). The GP targets are taken in the units
   above: events per second of window (In / Δt) and engine-seconds per tuple. When the
   registry, the alias or a model is missing or unreadable, or a GP fails, the forecast
   comes from the pure core instead (:class:`SeasonalProfile` of In over time,
   :class:`EngineLatency` of Lat over N) fitted on this run's windows; with fewer than
   ``MIN_FALLBACK_WINDOWS`` measured windows N is kept. The decision's reason names the
   source and the error;
3. runs ``controller_from_config(cfg)`` (Algorithm 1: θ1/θ2 path rejection, limits, dry run);
4. realizes a new N as a new plan version through ELB's scale mechanics
   (:class:`~keyshift.policies.elb.EagerLoadBalancing` with a band centred on w / N, so
   π = N): a scale-out revives dead slots or appends slots and fills them from the engines
   above the new mean; a scale-in empties the least loaded engines. The job migrates it like
   any plan change;
5. returns the ``decisions`` row (component ``scaler``).

Durable state: every scaler row ends with a machine-readable tail (``| obs ...`` with the
window's observation, ``| state ...`` with the path, the step, the windows since the last
change, and the forecast of the window entered). :meth:`EngineScaler.recover` rebuilds the
window history, the GP conditioning and the planner's path from these rows of ``decisions``
plus the open window's loads from ``key_loads``; a batch re-executed after a crash gets the
decision its first attempt recorded (timings of a re-run differ, the decision must not).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from keyshift.config import Config
from keyshift.elastic.controller import PathController, controller_from_config
from keyshift.elastic.cost import Forecast
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.forecast import DAY_S, EngineLatency, SeasonalProfile
from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan
from keyshift.policies import Window, make_policy

COMPONENT = "scaler"
MIN_FALLBACK_WINDOWS = 3
"""Measured windows the pure-core fallback needs before it forecasts (else N is kept)."""

_OBS = re.compile(r"\| obs in=(\S+) lat_s=(\S+) engines=(\d+) t=(\S+)")
_STATE = re.compile(r"\| state path=([\d,]*) pos=(\d+) since=(\S+) fc_in=(\S+) fc_lat=(\S+)")


class NoForecast(RuntimeError):
    """Neither the champion GPs nor the fallback can forecast; the scaler keeps N."""


@dataclass
class WindowSample:
    """One finished window as the scaler measured it (lat_s None: no tuple was processed)."""

    t: float
    in_tuples: float
    lat_s: float | None
    engines: int


@dataclass
class ScaleOutcome:
    """What the scaler decided at a window's end: the ``decisions`` row and, when N changes
    (not in dry run), the new plan (its version is the controller's business)."""

    row: dict[str, Any]
    plan: Plan | None
    decision: ScalingDecision | None = None
    info: dict[str, Any] = field(default_factory=dict)


# -- forecast sources -------------------------------------------------------------------------
class ChampionForecast:
    """The champion GPs of the registry as the planner's forecast (In and Lat(1..K))."""

    def __init__(self, rate: Any, latency: Any) -> None:
        self.rate = rate
        self.latency = latency

    @property
    def label(self) -> str:
        return (f"champion GPs {self.rate.name} v{self.rate.version}, "
                f"{self.latency.name} v{self.latency.version}")

    def observe(self, s: WindowSample, window_s: float) -> None:
        """Condition both GPs on one finished window (no hyper-parameter refit)."""
        from models.features import latency_features, rate_features

        self.rate.add_observations(rate_features(np.array([s.t])), [s.in_tuples / window_s])
        if s.lat_s is not None:
            self.latency.add_observations(latency_features(np.array([s.t]), s.engines),
                                          [s.lat_s])

    def forecast(self, t0: float, horizon: int, k: int, window_s: float) -> Forecast:
        from models.features import latency_features, rate_features

        ts = t0 + window_s * np.arange(horizon, dtype=np.float64)
        mean, std = self.rate.predict(rate_features(ts))
        in_mean = np.maximum(np.asarray(mean, dtype=np.float64), 0.0) * window_s
        in_std = np.abs(np.asarray(std, dtype=np.float64)) * window_s
        engines = np.tile(np.arange(1, k + 1, dtype=np.float64), horizon)
        lm, ls = self.latency.predict(latency_features(np.repeat(ts, k), engines))
        lat_mean = np.asarray(lm, dtype=np.float64).reshape(horizon, k)
        lat_std = np.abs(np.asarray(ls, dtype=np.float64)).reshape(horizon, k)
        if not (np.isfinite(in_mean).all() and np.isfinite(lat_mean).all()):
            raise ValueError("GP forecast is not finite")
        if (lat_mean <= 0).any():
            raise ValueError(f"latency GP forecasts {float(lat_mean.min()):.3g} s per tuple (<= 0)")
        return Forecast(in_mean, in_std, lat_mean, lat_std)


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
    return Forecast(in_mean, in_std, np.tile(lm, (horizon, 1)),
                    np.tile(np.nan_to_num(ls), (horizon, 1)))


def load_champions(cfg: Config) -> ChampionForecast:
    """Both champion GPs, or :class:`models.registry.RegistryError` (any failure to import
    the model layer is reported the same way)."""
    try:
        from models.registry import load_champion
    except ImportError as exc:  # the model layer is optional at run time
        raise RuntimeError(f"the model layer cannot be imported ({exc})") from exc
    return ChampionForecast(load_champion(cfg, "input_rate"), load_champion(cfg, "latency"))


# -- plan realization ---------------------------------------------------------------------------
def realize(plan: Plan, target: int, loads: np.ndarray) -> tuple[Plan, dict[str, Any]]:
    """The plan with ``target`` live engines that moves the fewest groups, via ELB.

    ELB's band [0, 2w/N] is centred on the new mean w/N, so its π is exactly N; its
    preparation revives dead slots (lowest first) or appends slots on a scale-out and drops
    the least loaded engines on a scale-in; its shedding moves, from each engine above
    w/N, the heaviest groups that fit under the excess (at most w/N each), onto the
    emptiest engines. Groups of removed engines all move; nothing else does. A window with
    no load weighs every group equally, so the new slots still receive groups.
    """
    if target < 1:
        raise ValueError(f"target: needs >= 1 engines, got {target}")
    loads = np.asarray(loads, dtype=np.float64)
    if target == plan.parallelism:
        return plan, {"reason": "N unchanged"}
    weights = loads if loads.sum() > 0 else np.ones_like(loads)
    w = float(plan.engine_loads(weights).sum())
    elb = make_policy("elb", band=(0.0, 2.0 * w / target), min_engines=1, max_engines=None)
    decision = elb.decide(plan, Window(loads=weights))
    new = decision.plan
    if new.parallelism != target:
        raise RuntimeError(f"ELB realized {new.parallelism} engines instead of {target}")
    return new, dict(decision.info)


# -- the scaler -----------------------------------------------------------------------------------
class EngineScaler:
    """Per-run scaler state: the open window's measurements, the finished windows, the
    forecast source and the planner (PathController). Pure Python: Delta I/O stays in
    :class:`streaming.controller.ControlLog`, the model registry behind ``loader``."""

    def __init__(self, cfg: Config, loader: Callable[[Config], ChampionForecast] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.window_s = float(cfg.controller.window_s)
        self.loader = loader or load_champions
        self.clock = clock
        self.ctl: PathController = controller_from_config(cfg)
        self.ctl.reset()
        self.history: list[WindowSample] = []
        self.models: ChampionForecast | None = None
        self.model_error: str | None = None
        self.recorded: dict[int, dict[str, Any]] = {}
        self.plan_source = ""
        self._open()

    def _open(self) -> None:
        self._in = 0.0
        self._engine_s = 0.0
        self._timed = 0.0
        self._t0: float | None = None

    # -- state ----------------------------------------------------------------------------------
    def load_models(self) -> None:
        """Load the champions once per process; a failure is kept as the fallback's reason."""
        try:
            self.models = self.loader(self.cfg)
            self.model_error = None
        except Exception as exc:  # noqa: BLE001 -- registry, import, unpickling: fall back
            self.models = None
            self.model_error = _one_line(exc)

    def recover(self, rows: Sequence[Any], batch_id: int, open_in: float = 0.0) -> None:
        """Rebuild from this run's scaler rows of ``decisions``: finished windows (and the GPs'
        conditioning on them), the path, and the rows recorded at batches >= ``batch_id`` by
        an attempt that crashed (they are replayed, not decided again). ``open_in`` is the
        open window's tuples so far (from ``key_loads``)."""
        self.ctl.reset()
        self.history, self.recorded = [], {}
        last = None
        for r in sorted(rows, key=lambda r: int(_get(r, "batch_id"))):
            b = int(_get(r, "batch_id"))
            if b >= batch_id:
                self.recorded[b] = _as_dict(r)
                continue
            sample = _parse_obs(_get(r, "reason") or "")
            if sample is not None:
                self._remember(sample)
            last = r
        self._refit_reserve()
        if last is not None:
            self._restore_path(_get(last, "reason") or "")
        self._open()
        self._in = float(open_in)

    def _refit_reserve(self) -> None:
        """The planner's burst reserve (if configured) learns the rises of In from the windows
        it observed; after a restart it relearns them from the recovered windows."""
        if getattr(self.ctl, "reserve_quantile", 0) and hasattr(self.ctl, "fit_reserve"):
            seen = [s.in_tuples for s in self.history if s.lat_s is not None]
            self.ctl.fit_reserve(np.asarray(seen, dtype=np.float64))
            self.ctl.reset()

    def _restore_path(self, reason: str) -> None:
        m = _STATE.search(reason)
        if not m:
            return
        since = None if m.group(3) == "none" else int(m.group(3))
        self.ctl.since_change_ = since
        if not m.group(1):
            return
        path = [int(x) for x in m.group(1).split(",")]
        pos = int(m.group(2))
        if pos >= len(path):
            return  # used up: the next window plans anyway
        k = self._k()
        # The forecast the path was planned on is not stored; the θ2 check of the next window
        # needs only the entry of the window just entered (stored), later ones are forecast
        # again from the current source.
        fc_in, fc_lat = float(m.group(4)), float(m.group(5))
        rest = len(path) - pos
        try:
            later = self._forecast(self.clock() + self.window_s, rest)[0]
            in_mean = np.concatenate([np.full(pos, fc_in), later.in_mean])
            in_std = np.concatenate([np.zeros(pos), later.in_std])
            lat_mean = np.vstack([np.full((pos, k), fc_lat), later.lat_mean])
            lat_std = np.vstack([np.zeros((pos, k)), later.lat_std])
        except Exception:  # noqa: BLE001
            in_mean, in_std = np.full(len(path), fc_in), np.zeros(len(path))
            lat_mean, lat_std = np.full((len(path), k), fc_lat), np.zeros((len(path), k))
        self.ctl.path_ = np.asarray(path, dtype=np.int64)
        self.ctl.position_ = pos
        self.ctl.forecast_ = Forecast(in_mean, in_std, lat_mean, lat_std)
        self.plan_source = "a forecast made before a restart"

    def _k(self) -> int:
        return self.ctl.bounds()[1]

    # -- per batch ------------------------------------------------------------------------------
    def collect(self, tuples: float, engine_s: float | None, started: datetime | float | None
                ) -> None:
        """One batch's contribution: its tuples, engine work seconds and start time."""
        self._in += float(tuples)
        if engine_s is not None and engine_s > 0 and tuples > 0:
            self._engine_s += float(engine_s)
            self._timed += float(tuples)
        if self._t0 is None and started is not None:
            self._t0 = started.timestamp() if isinstance(started, datetime) else float(started)

    def observation(self, engines: int) -> WindowSample:
        lat = self._engine_s / self._timed if self._timed > 0 and self._engine_s > 0 else None
        return WindowSample(self._t0 if self._t0 is not None else self.clock(), self._in, lat,
                            engines)

    # -- the decision ---------------------------------------------------------------------------
    def _forecast(self, t0: float, horizon: int) -> tuple[Forecast, str]:
        k = self._k()
        if self.models is not None:
            try:
                return self.models.forecast(t0, horizon, k, self.window_s), self.models.label
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                gp_error = f"GP forecast failed: {_one_line(exc)}"
        else:
            gp_error = f"no champion: {self.model_error}"
        try:
            fc = fallback_forecast(self.history, t0, horizon, k, self.window_s)
        except NoForecast as exc:
            raise NoForecast(f"{gp_error}; {exc}") from None
        return fc, f"fallback SeasonalProfile+EngineLatency on {len(self.history)} windows ({gp_error})"

    def end_of_window(self, batch_id: int, window: int, plan: Plan, loads: np.ndarray,
                      run_id: str) -> ScaleOutcome:
        """Decide N for the next window; ``plan`` is the plan in force, ``loads`` the window's
        per-group loads (for the realization). Never raises: an error keeps N and is the reason."""
        sample = self.observation(plan.parallelism)
        self._open()
        if batch_id in self.recorded:
            return self._replay(batch_id, sample)
        self._remember(sample)
        observed = None
        if sample.lat_s is not None:
            observed = Observation(sample.in_tuples, sample.lat_s, plan.parallelism, self.window_s)
        now = self.clock()
        used: list[str] = []

        def forecast(_first: int, horizon: int) -> Forecast:
            fc, source = self._forecast(now, horizon)
            used.append(source)
            return fc

        n = plan.parallelism
        try:
            d = self.ctl.decide(window, n, observed, forecast)
        except NoForecast as exc:
            return self._keep(batch_id, plan, sample, run_id, f"kept {n} engines: {exc}")
        except Exception as exc:  # noqa: BLE001 -- a planner error must not stop the job
            return self._keep(batch_id, plan, sample, run_id,
                              f"kept {n} engines: planner failed: {_one_line(exc)}")
        if used:
            self.plan_source = used[-1]
        source = (f"forecast: {used[-1]}" if used else
                  f"following the path planned from {self.plan_source or 'an earlier forecast'}")
        reason = f"{source}; {d.reason}"
        new, info = None, {}
        if d.engines_after != n:
            try:
                new, info = realize(plan, d.engines_after, loads)
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                return self._keep(batch_id, plan, sample, run_id,
                                  f"{reason}; not realized: {_one_line(exc)}")
        row = _record(d, run_id, batch_id)
        balance = Balance.of(live_loads(plan.assignment, loads, plan.live))
        row["rstd_before"] = balance.rstd
        if new is not None:
            moved = np.flatnonzero(plan.assignment != new.assignment)
            after = Balance.of(live_loads(new.assignment, loads, new.live))
            row.update(rstd_after=after.rstd, moved_groups=int(moved.size),
                       moved_state=0.0)
            reason += f"; realized {n} -> {new.parallelism} engines, {moved.size} groups moved"
        row["reason"] = _prefix_dry(d, reason) + self._tail(sample, d)
        return ScaleOutcome(row, new, d, info)

    def _keep(self, batch_id: int, plan: Plan, sample: WindowSample, run_id: str,
              reason: str) -> ScaleOutcome:
        n = plan.parallelism
        d = ScalingDecision(window=0, policy=self.ctl.name, engines_before=n, proposed=n,
                            engines_after=n, reason=reason)
        row = _record(d, run_id, batch_id)
        row["reason"] = reason + self._tail(sample, None)
        return ScaleOutcome(row, None, d)

    def _remember(self, sample: WindowSample) -> None:
        if sample.lat_s is None and sample.in_tuples <= 0:
            return  # an idle window tells the forecasters nothing
        self.history.append(sample)
        if self.models is not None:
            try:
                self.models.observe(sample, self.window_s)
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                self.model_error = f"GP update failed: {_one_line(exc)}"
                self.models = None

    def _replay(self, batch_id: int, measured: WindowSample) -> ScaleOutcome:
        """The row an earlier attempt of this batch recorded, taken as decided: its
        observation replaces this attempt's timings (they differ on a re-run), its path
        state becomes the planner's (the controller takes its plan version)."""
        row = dict(self.recorded.pop(batch_id))
        reason = row.get("reason") or ""
        sample = _parse_obs(reason) or measured
        self._remember(sample)
        reserve = getattr(self.ctl, "reserve_", None)
        if reserve is not None and sample.lat_s is not None:  # decide() would have seen it
            reserve.update(sample.in_tuples)
        self._restore_path(reason)
        return ScaleOutcome(row, None, None, {"replayed": True})

    def _tail(self, s: WindowSample, d: ScalingDecision | None) -> str:
        lat = "none" if s.lat_s is None else f"{s.lat_s:.9g}"
        obs = f" | obs in={s.in_tuples:.9g} lat_s={lat} engines={s.engines} t={s.t:.3f}"
        c = self.ctl
        path = getattr(c, "path_", None)
        since = getattr(c, "since_change_", None)
        pos = int(getattr(c, "position_", 0) or 0)
        fc_in = fc_lat = 0.0
        fc = getattr(c, "forecast_", None)
        if path is not None and fc is not None and 0 < pos <= fc.horizon:
            col = min(max(int(path[pos - 1]), 1), fc.max_engines) - 1
            fc_in, fc_lat = float(fc.in_mean[pos - 1]), float(fc.lat_mean[pos - 1, col])
        path_s = ",".join(str(int(e)) for e in path) if path is not None else ""
        state = (f" | state path={path_s} pos={pos} since={'none' if since is None else since}"
                 f" fc_in={fc_in:.9g} fc_lat={fc_lat:.9g}")
        return obs + state


def _parse_obs(reason: str) -> WindowSample | None:
    m = _OBS.search(reason)
    if not m:
        return None
    lat = None if m.group(2) == "none" else float(m.group(2))
    return WindowSample(float(m.group(4)), float(m.group(1)), lat, int(m.group(3)))


def _record(d: ScalingDecision, run_id: str, batch_id: int) -> dict[str, Any]:
    """The decision as a ``decisions`` row of the scaler (the schema version is the
    controller's, which writes the window's rows together)."""
    row = d.to_record(run_id, batch_id)
    row.pop("schema_version", None)
    row["component"] = COMPONENT
    return row


def _prefix_dry(d: ScalingDecision, reason: str) -> str:
    # ScalingDecision.to_record prefixes the dry-run note; keep it on our longer reason
    return f"dry run, not applied: {reason}" if d.dry_run else reason


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:300] if text else type(exc).__name__)


def _get(r: Any, key: str) -> Any:
    return r[key] if isinstance(r, dict) else getattr(r, key)


def _as_dict(r: Any) -> dict[str, Any]:
    return dict(r) if isinstance(r, dict) else r.asDict()


__all__ = ["COMPONENT", "ChampionForecast", "EngineScaler", "NoForecast", "ScaleOutcome",
           "WindowSample", "fallback_forecast", "load_champions", "realize"]
