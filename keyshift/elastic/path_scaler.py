"""The shortest-path scaler, :class:`PathScaler`: Algorithm 1 of elastic-cep. Follow the
planned path window by window and plan again when it is used up, when an arc's cost σ
exceeds θ1, or when the observed prediction error of the window just finished exceeds θ2.

Prediction error (the paper leaves ``Error(Stream_j, In_j, Out_j)`` open) is the larger
relative error of the two forecasts the arc cost rests on, for the window just observed:
``max(|In − Î| / Î, |Lat − L̂| / L̂)`` with L̂ the latency forecast at the engines that ran.
"""

from __future__ import annotations

import copy

import numpy as np

from keyshift.elastic.cost import OBJECTIVES, Forecast
from keyshift.elastic.decision import Observation
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.planner import (
    GraphPlanner,
    check_count,
    check_nonneg,
    floor_capacity,
)
from keyshift.elastic.reserve import ForecastQuantile, RiseQuantile, check_quantile

RESERVE_SOURCES = ("rise", "forecast")
"""Where the burst reserve comes from: the input's rises (:class:`RiseQuantile`) or the
forecast's calibrated σ (:class:`ForecastQuantile`, the rises as its fallback)."""
from keyshift.elastic.scaler import ForecastFn, Scaler


def relative_error(in_obs: float, in_hat: float, lat_obs: float, lat_hat: float) -> float:
    """The larger relative error of the two forecasts an arc cost rests on (In and Lat);
    an In forecast below one tuple counts as one (no division by ~0)."""
    in_hat = max(float(in_hat), 1.0)
    return max(abs(in_obs - in_hat) / in_hat, abs(lat_obs - lat_hat) / lat_hat)


def prediction_error(forecast: Forecast, index: int, observed: Observation) -> float:
    """Relative error of In and of Lat (at the engines that ran) for one forecast window."""
    col = min(observed.engines, forecast.max_engines) - 1
    return relative_error(observed.in_tuples, float(forecast.in_mean[index]), observed.lat_s,
                          float(forecast.lat_mean[index, col]))


class PathScaler(Scaler):
    """The GP planner of elastic-cep §III-C as a scaler: shortest path over ``horizon``
    windows with the costs of Eq. 9–12, path rejection by θ1 (arc cost σ) and θ2 (relative
    prediction error); 0 turns either off. Limits are built into the graph.

    ``reserve_quantile`` q > 0 adds the burst reserve of :mod:`keyshift.elastic.reserve`:
    every window's capacity covers max(In_now, În) + R_q, R_q the q-quantile of the
    one-window rises of the input (q = 1: the largest rise seen). The rises are learnt
    from :meth:`fit_reserve` (history) and from every observed window; ``reserve_history``
    > 0 keeps only that many recent rises. 0 (the default) is the paper's plain planner.
    ``reserve_source = "forecast"`` takes the reserve from the forecast's σ instead, scaled
    by the q-quantile of the surprises seen (:class:`~keyshift.elastic.reserve.ForecastQuantile`),
    with the rises as the fallback where the forecast has no σ.
    """

    name = "planner"

    def __init__(
        self,
        max_engines: int = 0,
        min_engines: int = 0,
        cooldown_windows: int = 0,
        max_step: int = 0,
        dry_run: bool = False,
        horizon: int = 10,
        window_s: float = 10.0,
        mc: float = 1.0,
        ec: float = 1.0,
        rc: float = 10.0,
        sel: float = 1.0,
        theta1: float = 0.0,
        theta2: float = 0.0,
        objective: str = "mean",
        reserve_quantile: float = 0.0,
        reserve_history: int = 0,
        reserve_source: str = "rise",
    ) -> None:
        super().__init__(max_engines, min_engines, cooldown_windows, max_step, dry_run)
        self.horizon = horizon
        self.window_s = window_s
        self.mc = mc
        self.ec = ec
        self.rc = rc
        self.sel = sel
        self.theta1 = theta1
        self.theta2 = theta2
        self.objective = objective
        self.reserve_quantile = reserve_quantile
        self.reserve_history = reserve_history
        self.reserve_source = reserve_source

    def _new_reserve(self) -> RiseQuantile | ForecastQuantile:
        if self.reserve_source not in RESERVE_SOURCES:
            raise ElasticInputError(
                "reserve_source", f"must be one of {', '.join(RESERVE_SOURCES)}, got {self.reserve_source!r}")
        q = check_quantile("reserve_quantile", self.reserve_quantile)
        kind = ForecastQuantile if self.reserve_source == "forecast" else RiseQuantile
        return kind(q, self.reserve_history)

    def fit_reserve(self, history_in: np.ndarray, history_mean: np.ndarray | None = None,
                    history_std: np.ndarray | None = None) -> PathScaler:
        """Learn the reserve from a history of per-window input counts and, for the
        forecast source, the one-step forecasts (mean, σ) made before each window (NaN
        where none); kept across :meth:`reset`, each run starts from it and adds what it
        observes."""
        reserve = self._new_reserve()
        if isinstance(reserve, ForecastQuantile):
            reserve.fit(history_in, history_mean, history_std)
        else:
            reserve.fit(history_in)
        self.reserve_fit_ = reserve
        return self

    def reset(self) -> PathScaler:
        super().reset()
        q = check_quantile("reserve_quantile", self.reserve_quantile)
        if q > 0:
            fresh = self._new_reserve()
            fitted = getattr(self, "reserve_fit_", None)
            self.reserve_ = (copy.deepcopy(fitted) if type(fitted) is type(fresh)
                             else fresh.fit(np.empty(0)))
            self.reserve_.quantile = q
            self.reserve_.max_history = self.reserve_history
            if isinstance(self.reserve_, RiseQuantile):
                self.reserve_._check()
        else:
            self.reserve_ = None
        self.path_ = None
        self.position_ = 0
        self.forecast_ = None
        self.plans_ = 0
        self.planner_ms_ = []
        return self

    def resume(self, since_change: int | None, path: np.ndarray | None = None,
               position: int = 0, forecast: Forecast | None = None) -> PathScaler:
        """Continue a path recorded before a restart (``path`` None: plan afresh)."""
        super().resume(since_change)
        if path is not None and forecast is not None:
            self.path_, self.position_, self.forecast_ = path, int(position), forecast
        return self

    def entered(self) -> tuple[float, float] | None:
        """The forecast (In, Lat at the path's N) of the window the path last entered."""
        path, fc, pos = self.path_, self.forecast_, self.position_
        if path is None or fc is None or not 0 < pos <= fc.horizon:
            return None
        col = min(max(int(path[pos - 1]), 1), fc.max_engines) - 1
        return float(fc.in_mean[pos - 1]), float(fc.lat_mean[pos - 1, col])

    def entered_forecast(self) -> tuple[float, float] | None:
        """The input forecast (mean, σ) of the window the path last entered: what the
        window now observed was planned with (None without a predictive σ)."""
        fc, pos = self.forecast_, self.position_
        if self.path_ is None or fc is None or not fc.in_predictive or not 0 < pos <= fc.horizon:
            return None
        return float(fc.in_mean[pos - 1]), float(fc.in_std[pos - 1])

    def planner(self) -> GraphPlanner:
        if self.objective not in OBJECTIVES:
            raise ElasticInputError("objective", f"must be one of {', '.join(OBJECTIVES)}")
        return GraphPlanner(
            window_s=self.window_s, mc=self.mc, ec=self.ec, rc=self.rc, sel=self.sel,
            theta1=self.theta1, min_engines=self.min_engines, max_engines=self.max_engines,
            cooldown_windows=self.cooldown_windows, max_step=self.max_step,
            objective=self.objective,
        )

    def _propose(
        self,
        window: int,
        engines_now: int,
        observed: Observation | None,
        forecast: ForecastFn | None,
    ) -> tuple[int, str, dict]:
        if forecast is None:
            raise ElasticInputError("forecast", "the planner needs a forecast function")
        horizon = check_count("horizon", self.horizon, low=1)
        theta2 = check_nonneg("theta2", self.theta2)
        notes = []
        reserve = self.reserve_
        in_now = None if observed is None else float(observed.in_tuples)
        if reserve is not None and in_now is not None:
            seen = self.entered_forecast()
            reserve.update(in_now, *(seen or (None, None)))
        if self.path_ is not None and observed is not None and self.position_ > 0:
            err = prediction_error(self.forecast_, self.position_ - 1, observed)
            if theta2 > 0 and err > theta2:
                notes.append(f"path rejected: prediction error {err:.2f} > θ2 {theta2:g}")
                self.path_ = None
        if self.path_ is not None and self.position_ >= len(self.path_):
            self.path_ = None
        if self.path_ is not None and reserve is not None:
            j = self.position_
            fc = self.forecast_
            need = reserve.floor(in_now, fc.in_mean[j:j + 1],
                                 fc.in_std[j:j + 1] if fc.in_predictive else None)[0]
            step = int(self.path_[j])
            have = float(floor_capacity(self.forecast_.lat_mean[j, step - 1],
                                        self.forecast_.lat_std[j, step - 1], step, self.window_s))
            if have < need:
                notes.append(
                    f"path below the burst reserve: {step} engines carry {have:.4g} tuples,"
                    f" reserve {need:.4g}"
                )
                self.path_ = None
        extra: dict = {}
        if self.path_ is None:
            fc = forecast(window, horizon)
            since = self.since_change_
            floor = None if reserve is None else reserve.floor(
                in_now, fc.in_mean, fc.in_std if fc.in_predictive else None)
            plan = self.planner().plan(fc, engines_now, since, in_floor=floor)
            self.path_ = plan.usable
            self.forecast_ = fc
            self.position_ = 0
            self.plans_ += 1
            self.planner_ms_.append(plan.elapsed_ms)
            what = f"planned {horizon} windows, cost {plan.cost:.4g} ± {plan.cost_std:.3g}"
            if plan.rejected_at is not None:
                j = plan.rejected_at
                what += (
                    f"; path rejected at window {j}: arc cost std {plan.arc_std[j]:.3g}"
                    f" > θ1 {self.theta1:g}, following {j + 1} window(s)"
                )
            if floor is not None:
                what += f"; {reserve.describe()}"
            notes.append(what)
            extra = {
                "expected_cost": plan.cost,
                "cost_std": plan.cost_std,
                "planner_ms": plan.elapsed_ms,
            }
        target = int(self.path_[self.position_])
        notes.append(f"path step {self.position_ + 1}/{len(self.path_)}: {target} engines")
        self.position_ += 1
        return target, "; ".join(notes), extra



def path_scaler_from_config(cfg) -> PathScaler:
    """The loop's path scaler from ``[planner]``, ``[engines]`` and the window
    length ``controller.window_s``; planner min/max 0 fall back to ``engines.min/max``.
    With ``reserve_quantile`` > 0 the reserve learns the rises online from the windows it
    observes; call :meth:`PathScaler.fit_reserve` with the metrics history to start
    from what the history saw."""
    p = cfg.planner
    return PathScaler(
        max_engines=p.max_engines or cfg.engines.max,
        min_engines=p.min_engines or cfg.engines.min,
        cooldown_windows=p.cooldown_windows,
        max_step=p.max_step,
        dry_run=p.dry_run,
        horizon=p.horizon,
        window_s=cfg.controller.window_s,
        mc=p.mc,
        ec=p.ec,
        rc=p.rc,
        theta1=p.theta1,
        theta2=p.theta2,
        objective=p.objective,
        reserve_quantile=p.reserve_quantile,
        reserve_history=p.reserve_history,
        reserve_source=p.reserve_source,
    )
