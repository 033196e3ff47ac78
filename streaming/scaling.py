"""The job's forecasts for the scaler: the champion GPs of the model registry, with the pure
core's fallback. Everything else about scaling is the loop's (:mod:`keyshift.control`).

The window's sample (:class:`~keyshift.control.WindowSample`) is measured by the job:

* ``in_tuples`` (In of Eq. 9) = the tuples that arrived in the window, per Δ: the valid
  events routed to the engines (the sum of the per-group loads, ``key_loads``, buffered
  events of arriving groups included) plus the growth of the Kafka lag, over the seconds
  the window spanned (:meth:`keyshift.control.WindowStats.input_rate`);
* ``lat_s`` (Lat of Eq. 9, seconds one engine spends per tuple) = the seconds the engine
  tasks of the window's batches worked (``keyshift.streaming.engines.work_seconds``: every engine
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
``keyshift.models.features`` (the feature builder the nightly training uses), conditioned online on
every finished window (``add_observations``, no hyper-parameter refit). When the registry,
the alias or a model is missing or unreadable, or a GP fails, the forecast comes from the
pure core instead (:class:`~keyshift.control.FallbackForecaster` fitted on this run's
windows); with fewer than ``MIN_FALLBACK_WINDOWS`` measured windows N is kept. The label it
returns (the decision's reason) names the source and the error, and the versions of the
models that made the forecast ("champion GPs keyshift-input-rate v3, keyshift-latency v2").

The job follows the registry (:meth:`JobForecaster.follow`): every
``planner.registry_check_windows`` windows a background thread reads the alias (no
download when it has not moved), loads the champions that moved and conditions them on the
run's windows, as a restart would; the next window swaps them in and plans afresh. A batch
never waits for the registry. A failed check keeps the models in use (or the fallback) and
the next decision's reason says why; a store that was down at start is retried the same way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from keyshift.config import Config
from keyshift.control import FallbackForecaster, NoForecast, SourceChange, WindowSample
from keyshift.control.scaling import one_line
from keyshift.elastic.cost import Forecast


class ChampionForecast:
    """The champion GPs of the registry as the planner's forecast (In and Lat(1..K))."""

    def __init__(self, rate: Any, latency: Any, alias: str = "champion") -> None:
        self.rate = rate
        self.latency = latency
        self.alias = alias

    @property
    def versions(self) -> tuple[str, str]:
        """(input-rate version, latency version): what a registry check compares."""
        return str(self.rate.version), str(self.latency.version)

    @property
    def label(self) -> str:
        """The versions that forecast, and which forecaster the input-rate version is when
        its training chose one without a GP (seasonal naive, the profile alone): a decision
        planned on last week's value says so (issue 44)."""
        gp = getattr(self.rate, "gp", None)
        kind = ("" if gp is None or getattr(gp, "signal_", True)
                else f" ({getattr(gp, 'choice_', '')})")
        return (f"{self.alias} GPs {self.rate.name} v{self.rate.version}{kind}, "
                f"{self.latency.name} v{self.latency.version}")

    def observe(self, s: WindowSample, window_s: float) -> None:
        """Condition both GPs on one finished window (no hyper-parameter refit)."""
        self.observe_many([s], window_s)

    def observe_many(self, samples: Sequence[WindowSample], window_s: float) -> None:
        """Condition both GPs on finished windows at once (a newly loaded champion catches
        up on the run's windows in one step, not one GP update per window)."""
        from keyshift.models.features import latency_features, rate_features

        if not samples:
            return
        t = np.array([s.t for s in samples], dtype=np.float64)
        tuples = np.array([s.in_tuples for s in samples], dtype=np.float64)
        self.rate.add_observations(rate_features(t), tuples / window_s)
        timed = [i for i, s in enumerate(samples) if s.lat_s is not None]
        if timed:
            self.latency.add_observations(
                latency_features(t[timed], [samples[i].engines for i in timed], tuples[timed]),
                [samples[i].lat_s for i in timed])

    def forecast(self, t0: float, horizon: int, k: int, window_s: float) -> Forecast:
        from keyshift.models.features import latency_features, rate_features

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


def _registry() -> Any:
    """The model layer's registry module; a failure to import it is reported like any
    other registry failure (the model layer is optional at run time)."""
    try:
        from keyshift.models import registry
    except ImportError as exc:
        raise RuntimeError(f"the model layer cannot be imported ({exc})") from exc
    return registry


def load_champions(cfg: Config) -> ChampionForecast:
    """Both champion GPs, or :class:`keyshift.models.registry.RegistryError`."""
    registry = _registry()
    return ChampionForecast(registry.load_champion(cfg, "input_rate"),
                            registry.load_champion(cfg, "latency"), cfg.mlflow.alias)


def champion_versions(cfg: Config) -> tuple[str, ...]:
    """The versions behind the alias (input rate, latency), without a download."""
    return _registry().champion_versions(cfg)


@dataclass(frozen=True)
class _Checked:
    """One registry check's outcome: new champions (conditioned on the first ``seen``
    windows of the run), nothing new (``models`` and ``error`` None), or why it failed."""

    generation: int
    window: int
    models: ChampionForecast | None = None
    seen: int = 0
    error: str | None = None


class JobForecaster:
    """The loop's forecaster in the job: the champions, else the pure-core fallback;
    it follows the registry's alias every ``planner.registry_check_windows`` windows.

    ``loader`` loads both champions; ``versions`` reads the alias's versions without a
    download (a loader given without it is simply called at every check, and a result of
    the versions in use is dropped). ``background`` False runs a check inside the window
    that starts it (deterministic tests); the job's checks run on their own thread.
    """

    def __init__(self, cfg: Config,
                 loader: Callable[[Config], ChampionForecast] | None = None,
                 versions: Callable[[Config], Sequence[str]] | None = None,
                 background: bool = True) -> None:
        self.cfg = cfg
        self.window_s = float(cfg.controller.window_s)
        self.check_every = int(cfg.planner.registry_check_windows)
        self.loader = loader or load_champions
        self.versions = versions if versions is not None or loader is not None \
            else champion_versions
        self.background = background
        self._models: ChampionForecast | None = None
        self._model_error: str | None = None
        self.fallback = FallbackForecaster(self.window_s)
        self._loaded = False
        self._loading: threading.Thread | None = None  # the start-up's load, on its thread
        self._generation = 0  # a reset() makes checks started before it stale
        self._thread: threading.Thread | None = None
        self._checked: queue.SimpleQueue[_Checked] = queue.SimpleQueue()

    def load_models(self) -> None:
        """Load the champions at start (once per process: a restart of the loop keeps
        them); a failure is kept as the fallback's reason until a check loads them. With
        ``background`` the load runs on its own thread beside the rest of the start-up (the
        model layer's import and the registry's answer took seconds of a cluster run's
        time to its first batch); the first use waits for it (:meth:`_ready`)."""
        if self._loaded:
            return
        self._loaded = True
        if not self.background:
            self._load()
            return
        self._loading = threading.Thread(target=self._load, daemon=True,
                                         name="keyshift-champions-load")
        self._loading.start()

    def _load(self) -> None:
        try:
            self._models = self.loader(self.cfg)
            self._model_error = None
        except Exception as exc:  # noqa: BLE001 -- registry, import, unreadable: fall back
            self._models = None
            self._model_error = one_line(exc)

    def _ready(self) -> None:
        """Wait for the start-up's load, if it is still running."""
        loading, self._loading = self._loading, None
        if loading is not None:
            loading.join()

    @property
    def loading(self) -> bool:
        """The start-up's load of the champions is still running."""
        return self._loading is not None and self._loading.is_alive()

    @property
    def models(self) -> ChampionForecast | None:
        """The champions in use (None: the fallback); waits for the start-up's load."""
        self._ready()
        return self._models

    @property
    def model_error(self) -> str | None:
        """Why no champion is in use; waits for the start-up's load."""
        self._ready()
        return self._model_error

    # -- following the registry --------------------------------------------------------------
    def follow(self, window: int) -> SourceChange | None:
        """Called by the scaler before it decides window ``window``: swap in champions a
        finished check loaded, and start a check every ``check_every`` windows (not while
        one is still running: a slow registry is looked at no more often than it answers).
        Returns what changed, for the decision's reason."""
        self._ready()
        changes = self._apply_checked()
        if window % self.check_every == 0 and not self.checking:
            args = (window, self._models.versions if self._models is not None else None,
                    self._generation)
            if self.background:
                thread = threading.Thread(target=self._check, args=args, daemon=True,
                                          name=f"keyshift-registry-check-{window}")
                try:
                    thread.start()
                    self._thread = thread
                except RuntimeError as exc:  # no thread to be had: try at the next due window
                    changes.append(SourceChange(
                        f"registry check at window {window} not started: {one_line(exc)}"))
            else:
                self._check(*args)
                changes += self._apply_checked()
        if not changes:
            return None
        return SourceChange("; ".join(c.text for c in changes),
                            replan=any(c.replan for c in changes))

    @property
    def checking(self) -> bool:
        """A registry check is under way on its thread."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for a check under way (tests; the job never waits)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _check(self, window: int, current: tuple[str, str] | None, generation: int) -> None:
        """Read the alias, load what moved and condition it on the run's windows seen so
        far; the outcome waits in a queue for the next window (never raises)."""
        try:
            if current is not None and self.versions is not None \
                    and tuple(str(v) for v in self.versions(self.cfg)) == current:
                self._checked.put(_Checked(generation, window))
                return
            new = self.loader(self.cfg)
            if new.versions == current:
                self._checked.put(_Checked(generation, window))
                return
            seen = list(self.fallback.history)
            new.observe_many(seen, self.window_s)
            self._checked.put(_Checked(generation, window, new, len(seen)))
        except Exception as exc:  # noqa: BLE001 -- any failure keeps what the job has
            self._checked.put(_Checked(generation, window, error=one_line(exc)))

    def _apply_checked(self) -> list[SourceChange]:
        changes = []
        while True:
            try:
                done = self._checked.get_nowait()
            except queue.Empty:
                return changes
            if done.generation != self._generation:
                continue
            change = self._apply(done)
            if change is not None:
                changes.append(change)

    def _apply(self, done: _Checked) -> SourceChange | None:
        at = f"registry check at window {done.window}"
        if done.error is None and done.models is not None:
            try:  # the windows observed while the check ran
                done.models.observe_many(self.fallback.history[done.seen:], self.window_s)
            except Exception as exc:  # noqa: BLE001 -- a new model that cannot learn is not used
                done = _Checked(done.generation, done.window,
                                error=f"GP update of {done.models.label} failed: "
                                      f"{one_line(exc)}")
        if done.error is not None:
            if self._models is None:  # the fallback's reason says it: "no champion: ..."
                self._model_error = f"{done.error} ({at})"
                return None
            return SourceChange(f"{at} failed, kept {self._models.label}: {done.error}")
        if done.models is None:
            return None
        was = self._models.label if self._models is not None else "the fallback"
        self._models, self._model_error = done.models, None
        return SourceChange(f"{at}: loaded {done.models.label} (was {was})", replan=True)

    # -- the loop's forecaster ------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the windows observed (a restart observes them again). The champions'
        online conditioning is kept only within one process: reload to forget it."""
        self.fallback = FallbackForecaster(self.window_s)
        self._generation += 1

    @property
    def history(self) -> list[WindowSample]:
        return self.fallback.history

    def observe(self, sample: WindowSample) -> None:
        self._ready()
        self.fallback.observe(sample)
        if self._models is not None:
            try:
                self._models.observe(sample, self.window_s)
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                self._model_error = f"GP update failed: {one_line(exc)}"
                self._models = None

    def forecast(self, window: int, t0: float, horizon: int, k: int) -> tuple[Forecast, str]:
        self._ready()
        if self._models is not None:
            try:
                return self._models.forecast(t0, horizon, k, self.window_s), self._models.label
            except Exception as exc:  # noqa: BLE001 -- the scaler never stops the job
                gp_error = f"GP forecast failed: {one_line(exc)}"
        else:
            gp_error = f"no champion: {self._model_error}"
        try:
            fc, label = self.fallback.forecast(window, t0, horizon, k)
        except NoForecast as exc:
            raise NoForecast(f"{gp_error}; {exc}") from None
        return fc, f"{label} ({gp_error})"


__all__ = ["ChampionForecast", "JobForecaster", "champion_versions", "load_champions"]
