"""The job's forecasts for the scaler: the champion GPs of the model registry, with the pure
core's fallback. Everything else about scaling is the loop's (:mod:`keyshift.control`).

The window's sample (:class:`~keyshift.control.WindowSample`) is measured by the job:

* ``in_tuples`` (In of Eq. 9) = the valid events routed to the engines in the window, the
  sum of the per-group loads (``key_loads``), buffered events of arriving groups included;
* ``lat_s`` (Lat of Eq. 9, seconds one engine spends per tuple) = the seconds the engine
  tasks of the window's batches worked (``streaming.engines.work_seconds``: every engine
  and restore task's ``duration_s`` without its wait for the first input row; state
  load/save and hand-over included, because they are part of what an engine does per
  batch) divided by the tuples those batches took. Then Δt · N / Lat is the window's
  capacity with N engines running side by side (Eq. 1). Delta commits and the driver are
  not engine work and are left out. On a host with fewer cores than engines the engines
  share cores, so the capacity of large N is optimistic there;
* ``engines`` = the live engines of the plan that ran the window (π).

:class:`JobForecaster` forecasts In from the champion ``keyshift-input-rate`` GP (events/s ×
Δt) and Lat for 1..K engines from the champion ``keyshift-latency`` GP (which sees the
forecast In spread over each candidate engine count, so a small window is not read as slow
engines), both through
``models.features`` (the feature builder the nightly training uses), conditioned online on
every finished window (``add_observations``, no hyper-parameter refit). When the registry,
the alias or a model is missing or unreadable, or a GP fails, the forecast comes from the
pure core instead (:class:`~keyshift.control.FallbackForecaster` fitted on this run's
windows); with fewer than ``MIN_FALLBACK_WINDOWS`` measured windows N is kept. The label it
returns (the decision's reason) names the source and the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from keyshift.config import Config
from keyshift.control import FallbackForecaster, NoForecast, WindowSample
from keyshift.control.scaling import one_line
from keyshift.elastic.cost import Forecast


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
            self.latency.add_observations(
                latency_features(np.array([s.t]), s.engines, s.in_tuples), [s.lat_s])

    def forecast(self, t0: float, horizon: int, k: int, window_s: float) -> Forecast:
        from models.features import latency_features, rate_features

        ts = t0 + window_s * np.arange(horizon, dtype=np.float64)
        mean, std = self.rate.predict(rate_features(ts))
        in_mean = np.maximum(np.asarray(mean, dtype=np.float64), 0.0) * window_s
        in_std = np.abs(np.asarray(std, dtype=np.float64)) * window_s
        engines = np.tile(np.arange(1, k + 1, dtype=np.float64), horizon)
        # each candidate N sees the forecast In spread over N engines (the window's size)
        lm, ls = self.latency.predict(latency_features(np.repeat(ts, k), engines,
                                                       np.repeat(in_mean, k)))
        lat_mean = np.asarray(lm, dtype=np.float64).reshape(horizon, k)
        lat_std = np.abs(np.asarray(ls, dtype=np.float64)).reshape(horizon, k)
        if not (np.isfinite(in_mean).all() and np.isfinite(lat_mean).all()):
            raise ValueError("GP forecast is not finite")
        if (lat_mean <= 0).any():
            raise ValueError(f"latency GP forecasts {float(lat_mean.min()):.3g} s per tuple (<= 0)")
        return Forecast(in_mean, in_std, lat_mean, lat_std)


def load_champions(cfg: Config) -> ChampionForecast:
    """Both champion GPs, or :class:`models.registry.RegistryError` (any failure to import
    the model layer is reported the same way)."""
    try:
        from models.registry import load_champion
    except ImportError as exc:  # the model layer is optional at run time
        raise RuntimeError(f"the model layer cannot be imported ({exc})") from exc
    return ChampionForecast(load_champion(cfg, "input_rate"), load_champion(cfg, "latency"))


class JobForecaster:
    """The loop's forecaster in the job: the champions, else the pure-core fallback."""

    def __init__(self, cfg: Config,
                 loader: Callable[[Config], ChampionForecast] | None = None) -> None:
        self.cfg = cfg
        self.window_s = float(cfg.controller.window_s)
        self.loader = loader or load_champions
        self.models: ChampionForecast | None = None
        self.model_error: str | None = None
        self.fallback = FallbackForecaster(self.window_s)
        self._loaded = False

    def load_models(self) -> None:
        """Load the champions once per process (the registry is slow to reach); a failure
        is kept as the fallback's reason."""
        if self._loaded:
            return
        self._loaded = True
        try:
            self.models = self.loader(self.cfg)
            self.model_error = None
        except Exception as exc:  # noqa: BLE001 -- registry, import, unpickling: fall back
            self.models = None
            self.model_error = one_line(exc)

    def reset(self) -> None:
        """Forget the windows observed (a restart observes them again). The champions'
        online conditioning is kept only within one process: reload to forget it."""
        self.fallback = FallbackForecaster(self.window_s)

    @property
    def history(self) -> list[WindowSample]:
        return self.fallback.history

    def observe(self, sample: WindowSample) -> None:
        self.fallback.observe(sample)
        if self.models is not None:
            try:
                self.models.observe(sample, self.window_s)
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                self.model_error = f"GP update failed: {one_line(exc)}"
                self.models = None

    def forecast(self, window: int, t0: float, horizon: int, k: int) -> tuple[Forecast, str]:
        if self.models is not None:
            try:
                return self.models.forecast(t0, horizon, k, self.window_s), self.models.label
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                gp_error = f"GP forecast failed: {one_line(exc)}"
        else:
            gp_error = f"no champion: {self.model_error}"
        try:
            fc, label = self.fallback.forecast(window, t0, horizon, k)
        except NoForecast as exc:
            raise NoForecast(f"{gp_error}; {exc}") from None
        return fc, f"{label} ({gp_error})"


__all__ = ["ChampionForecast", "JobForecaster", "load_champions"]
