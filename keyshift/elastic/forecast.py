"""Forecasters of the planner's inputs, behind one small protocol (:class:`SeriesModel`) so
that the GPs of ``models/`` and the pure-numpy baseline here are interchangeable.

Protocol (scikit-learn manners): ``fit(t, y) -> self`` on timestamps in seconds,
``predict(t) -> (mean, std)``, and optionally ``update(t, y)`` to add observations online
between refits (the paper adds points online and retrains nightly). A forecaster whose std
is a predictive distribution (the GP's posterior) says so with ``predictive_std = True``;
only then does the forecast reserve (``reserve_source = "forecast"``) size capacity on it.
The seasonal profile's std is the slot's spread with an AR(1) of the deviations: it prices
the expected cost, but calibrated as a reserve it missed 0.27 % of the tweets (the first
1,500 evaluation windows), where the rise reserve misses none.

:class:`SeasonalProfile` is the input-rate baseline: the mean and spread of each slot of a
weekly (or daily, if history is short) cycle, and an AR(1) model of the deviation from it,
so the recent surprise carries into the next windows and fades with the distance.
:class:`EngineLatency` is the latency baseline: per-tuple latency as an affine function of
the engine count, fitted by least squares, with the residual spread as σ.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

import numpy as np

from keyshift.elastic.errors import ElasticInputError

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
_SMOOTH_SLOTS = 2  # a slot's spread is pooled with this many neighbours on each side


@runtime_checkable
class SeriesModel(Protocol):
    """A model of one series over time (``fit`` on timestamps, ``predict`` mean and σ): what
    the planner's forecasts are made of. Not :class:`keyshift.control.Forecaster`, the loop's
    source of a planning horizon, which may be built on one."""

    def fit(self, t: np.ndarray, y: np.ndarray) -> SeriesModel: ...

    def predict(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


def _pair(t: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if t.ndim != 1 or t.shape != y.shape:
        raise ElasticInputError("t", f"t and y must be flat arrays of one length, got {t.shape}, {y.shape}")
    if t.size == 0:
        raise ElasticInputError("t", "needs at least one observation")
    if not (np.isfinite(t).all() and np.isfinite(y).all()):
        raise ElasticInputError("y", "must be finite")
    return t, y


class SeasonalProfile:
    """Slot profile of a weekly (else daily) cycle with an AR(1) model of the deviations.

    Each slot of the cycle has a mean m_s and spread s_s. The standardised deviation
    z_t = (y_t − m_s) / s_s follows z_t = φ·z_{t−1} + e_t, so h slots ahead

        mean = m_s + s_s · φ^h · z_now,   std = s_s · σ_e · sqrt((1 − φ^{2h}) / (1 − φ²)).

    φ is the lag-1 autocorrelation of z in the history (or ``phi`` if given); σ_e, the
    innovation spread, is the larger of its historical value and an exponentially weighted
    average of recent squared innovations (weight ``alpha``), so a surprise — a holiday, a
    storm — widens the next forecasts at once instead of after the next refit.
    ``slot_s`` defaults to the median spacing of the training timestamps.

    A cycle's rows weigh 2^(−age / ``half_life``) (in cycles). With every cycle alike the
    profile erred 2.45x as much as last week's value on an hourly timetable (issue 44 item
    4): a daylight-saving shift and a slow growth of the timetable, months back, stayed in
    the slot means; with a half-life of two cycles it errs 1.22x. A slot's spread is pooled
    with ``_SMOOTH_SLOTS`` neighbours on each side and floored at 5 % of the series' std: a
    slot that was always 0 (a night) had a spread of 0.001·std, so one stray event there
    made z ≈ 1,000, carried into the busy slots that follow.
    """

    def __init__(self, slot_s: float | None = None, phi: float | None = None, alpha: float = 0.3,
                 period_s: float | None = None, half_life: float | None = 2.0) -> None:
        self.slot_s = slot_s
        self.half_life = half_life
        self.period_s = period_s
        self.phi = phi
        self.alpha = alpha

    def fit(self, t: np.ndarray, y: np.ndarray) -> SeasonalProfile:
        t, y = _pair(t, y)
        if self.phi is not None and not 0 <= self.phi < 1:
            raise ElasticInputError("phi", f"must be in [0, 1), got {self.phi}")
        if not 0 < self.alpha <= 1:
            raise ElasticInputError("alpha", f"must be in (0, 1], got {self.alpha}")
        slot = self.slot_s or (float(np.median(np.diff(t))) if t.size > 1 else 3600.0)
        if not slot > 0:
            raise ElasticInputError("slot_s", f"must be > 0, got {slot}")
        self.slot_ = slot
        if self.period_s is not None and not self.period_s >= slot:
            raise ElasticInputError("period_s", f"must be >= slot_s {slot}, got {self.period_s}")
        self.period_ = self.period_s or (WEEK_S if t[-1] - t[0] >= 2 * WEEK_S else DAY_S)
        n = max(int(round(self.period_ / slot)), 1)
        self.n_slots_ = n
        if self.half_life is not None and not self.half_life > 0:
            raise ElasticInputError("half_life", f"must be > 0 cycles, got {self.half_life}")
        idx = self._slot(t)
        w = (np.power(0.5, np.floor((t[-1] - t) / self.period_) / self.half_life)
             if self.half_life is not None else np.ones(t.size))
        weight = np.bincount(idx, weights=w, minlength=n)
        total = np.bincount(idx, weights=w * y, minlength=n)
        mean = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), y.mean())
        sq = np.bincount(idx, weights=w * (y - mean[idx]) ** 2, minlength=n)
        seen = np.bincount(idx, minlength=n).astype(np.float64)
        if n > 1:
            pad = lambda a: np.concatenate([a[-_SMOOTH_SLOTS:], a, a[:_SMOOTH_SLOTS]])  # noqa: E731
            pool = np.ones(2 * _SMOOTH_SLOTS + 1)
            sq, weight, seen = (np.convolve(pad(a), pool, "valid") for a in (sq, weight, seen))
        var = np.where(seen > 1, sq / np.where(weight > 0, weight, 1.0), y.var())
        floor = max(float(y.std()) * 0.05, 1e-9)
        self.mean_ = mean
        self.std_ = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor)
        z = (y - mean[idx]) / self.std_[idx]
        if self.phi is None:
            phi = float(np.corrcoef(z[:-1], z[1:])[0, 1]) if z.size > 2 and z.std() > 0 else 0.0
            phi = min(max(phi if np.isfinite(phi) else 0.0, 0.0), 0.99)
        else:
            phi = float(self.phi)
        self.phi_ = phi
        innov = z[1:] - phi * z[:-1]
        self.sigma_e_ = float(innov.std()) if innov.size > 1 else 1.0
        self.recent_var_ = self.sigma_e_**2
        self.z_now_ = float(z[-1])
        self.t_last_ = float(t[-1])
        return self

    def _slot(self, t: np.ndarray) -> np.ndarray:
        return np.floor(np.mod(t, self.period_) / self.slot_).astype(np.int64) % self.n_slots_

    def update(self, t: np.ndarray, y: np.ndarray) -> SeasonalProfile:
        """New observations move z_now and the recent innovation spread (no refit)."""
        t, y = _pair(t, y)
        idx = self._slot(t)
        for z in (y - self.mean_[idx]) / self.std_[idx]:
            e = z - self.phi_ * self.z_now_
            self.recent_var_ = (1 - self.alpha) * self.recent_var_ + self.alpha * e * e
            self.z_now_ = float(z)
        self.t_last_ = max(self.t_last_, float(t.max()))
        return self

    def predict(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not hasattr(self, "mean_"):
            raise ElasticInputError("forecaster", "predict() before fit()")
        t = np.asarray(t, dtype=np.float64)
        idx = self._slot(t)
        ahead = np.maximum(np.round((t - self.t_last_) / self.slot_), 1.0)
        decay = self.phi_**ahead
        sigma_e = np.sqrt(max(self.sigma_e_**2, self.recent_var_))
        phi2 = self.phi_**2
        spread = np.sqrt((1 - decay**2) / (1 - phi2)) if phi2 < 1 else np.sqrt(ahead)
        s = self.std_[idx]
        mean = np.maximum(self.mean_[idx] + s * decay * self.z_now_, 0.0)
        return mean, s * sigma_e * spread


class EngineLatency:
    """Per-tuple latency vs engine count: Lat(i) = a + b·i by least squares, σ = residual std
    (per engine count where it has been seen at least twice, else pooled)."""

    def __init__(self, floor_s: float = 1e-6) -> None:
        self.floor_s = floor_s

    def fit(self, engines: np.ndarray, lat: np.ndarray) -> EngineLatency:
        engines, lat = _pair(engines, lat)
        if (lat <= 0).any():
            raise ElasticInputError("lat", "latencies must be > 0 seconds")
        if np.unique(engines).size >= 2:
            b, a = np.polyfit(engines, lat, 1)
        else:
            a, b = float(lat.mean()), 0.0
        self.coef_ = (float(a), float(b))
        resid = lat - (a + b * engines)
        self.pooled_std_ = float(resid.std())
        idx = engines.astype(np.int64)
        top = int(idx.max()) + 1
        count = np.bincount(idx, minlength=top)
        sq = np.bincount(idx, weights=resid**2, minlength=top)
        self.std_by_engines_ = np.where(count > 1, np.sqrt(sq / np.maximum(count, 1)), np.nan)
        return self

    def predict(self, engines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        engines = np.asarray(engines, dtype=np.float64)
        a, b = self.coef_
        mean = np.maximum(a + b * engines, self.floor_s)
        idx = engines.astype(np.int64)
        known = np.where(idx < self.std_by_engines_.size, idx, 0)
        std = np.where(
            (idx < self.std_by_engines_.size) & np.isfinite(self.std_by_engines_[known]),
            self.std_by_engines_[known],
            self.pooled_std_,
        )
        return mean, std


def one_step_forecasts(forecaster: SeriesModel, t: np.ndarray, y: np.ndarray,
                       start: int) -> tuple[np.ndarray, np.ndarray]:
    """A backtest from one origin: ``forecaster`` (unfitted) is fitted on the first
    ``start`` windows, then each later window is forecast one step ahead before it is added
    (``update``). Returns (mean, σ) per window, NaN for the first ``start``: what the
    forecast reserve calibrates σ on before a run has seen windows of its own."""
    t, y = _pair(t, y)
    if not 2 <= start < t.size:
        raise ElasticInputError("start", f"needs 2 <= start < {t.size} windows, got {start}")
    mean = np.full(t.size, np.nan)
    std = np.full(t.size, np.nan)
    forecaster.fit(t[:start], y[:start])
    for j in range(start, t.size):
        m, s = forecaster.predict(t[j:j + 1])
        mean[j], std[j] = float(m[0]), float(s[0])
        forecaster.update(t[j:j + 1], y[j:j + 1])
    return mean, std


SERIES_MODEL_PLUGINS = "keyshift.forecasters"


def series_model_names() -> list[str]:
    """Built-in forecasters plus the plugins of the ``keyshift.forecasters`` entry points
    (the GP of ``models/`` registers itself there, so the pure core never imports it)."""
    return ["seasonal", "seasonal-daily"] + sorted(
        ep.name for ep in entry_points(group=SERIES_MODEL_PLUGINS)
    )


def make_series_model(kind: str) -> SeriesModel:
    """A fresh, unfitted forecaster by name; a plugin whose layer is not installed is a clear
    ``ElasticInputError`` on ``forecaster``."""
    if kind == "seasonal":
        return SeasonalProfile()
    if kind == "seasonal-daily":
        return SeasonalProfile(period_s=DAY_S)
    plugins = {ep.name: ep for ep in entry_points(group=SERIES_MODEL_PLUGINS)}
    if kind not in plugins:
        raise ElasticInputError(
            "forecaster", f"unknown {kind!r}; known: {', '.join(series_model_names())}"
        )
    try:
        return plugins[kind].load()()
    except ImportError as exc:
        raise ElasticInputError(
            "forecaster",
            f"{kind} needs an optional layer that is not installed ({exc.name}); "
            "use --forecaster seasonal",
        ) from None
