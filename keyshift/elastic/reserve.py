"""The burst reserve: capacity kept above what the forecast expects, sized by the rises of
the input seen so far.

Why. The planner provisions from forecasts, and a forecast learnt from a daily or weekly
cycle cannot foresee a burst (a news spike in the tweet volume, a storm in the bike
rentals). Every online policy then loses the first window of the burst: the scaler only
hears of it when that window is over. A cost-optimal plan will not buy insurance against
a rare burst unless MC says so; a user who wants "no tuple lost to a burst as large as any
we have seen" needs a service-level rule instead, stated in the load's own units.

The rule. Let ΔIn_t = In_t − In_{t−1} be the one-window rise of the input, recorded over the
history and updated with every observed window, and R_q its q-quantile (q = 1: the largest
rise seen so far). For the next window the capacity must cover

    floor = max(In_now, În) + max(R_q, 0)

tuples, with In_now the last observed window and În the forecast mean for the window: a
rise as large as R_q from either the current level or the forecast one is absorbed in the
window it happens. Further out in a plan, only the forecast part applies (În_h + R_q); the
controller checks the floor again before every window with the newest observation, and
plans again if the path falls below it.

Why an additive rise and not a growth ratio In_{t+1}/In_t or a quantile of standardised
forecast errors: on the tweet series the ratio is unbounded (a burst from a near-empty
window is ×100 and more) and the standardised errors are heavy-tailed (the 0.999 quantile
is 48σ), so both either miss bursts or buy far too much capacity at busy hours; the
additive rise is bounded by the largest burst in tuples. bench/results/elastic_evaluation.md
has the comparison on the three series.

The forecast's own quantile (:class:`ForecastQuantile`, ``reserve_source = "forecast"``).
A forecaster with a predictive σ (the GP) says how sure it is window by window: at night a
bike count is small and certain, at the commuter peak large and uncertain, and a reserve of
the largest rise ever seen, kept every hour, pays at night for the peak's uncertainty. The
rule is then

    floor_0 = max(In_now, În_0) + c_q · σ_0,   floor_h = În_h + c_q · σ_h

with c_q the q-quantile of the scaled surprises (In_t − max(In_{t−1}, În_t)) / σ_t, the
part of a window the last level and the forecast both missed, in units of the σ the
forecaster gave for it: a conformal (scaled-residual) calibration of σ. It is learnt from
one-step forecasts of the history (a backtest) and then online from every window the
controller observes against the forecast it planned with. σ alone, read as Gaussian
(z_q = 3.7 at q = 0.9999), does not cover the bursts: the GP's surprises reach 50–230 σ on
the tweet series, from near-empty windows where σ is small; the calibration learns that.
Where the forecast has no σ (0, or a forecaster whose σ is not predictive:
``Forecast.in_predictive`` False), or too few surprises have been seen to calibrate
(:data:`MIN_CALIBRATION`), the floor is the rise reserve's.
"""

from __future__ import annotations

import numpy as np

from keyshift.elastic.errors import ElasticInputError


def check_quantile(name: str, value: object) -> float:
    """A quantile level in [0, 1]; 0 is the "off" value of the reserve."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ElasticInputError(name, f"must be a number in [0, 1], got {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ElasticInputError(name, f"must be in [0, 1], got {value}")
    return value


class RiseQuantile:
    """Online q-quantile of the one-window rise ΔIn of the input (in tuples).

    ``fit(history)`` learns from a series of per-window input counts, ``update(in_tuples)``
    adds one observed window. ``rise()`` is the q-quantile over every rise seen (exact,
    on all of them; ``max_history`` > 0 keeps only the most recent rises, so an old
    regime can be forgotten). Negative quantiles (a falling series) count as 0: the
    reserve never takes capacity away.
    """

    def __init__(self, quantile: float = 1.0, max_history: int = 0) -> None:
        self.quantile = quantile
        self.max_history = max_history

    def _check(self) -> None:
        check_quantile("reserve_quantile", self.quantile)
        _check_history(self.max_history)

    def fit(self, history: np.ndarray) -> RiseQuantile:
        self._check()
        y = np.asarray(history, dtype=np.float64)
        if y.ndim != 1 or not np.isfinite(y).all():
            raise ElasticInputError("history", "must be a flat array of finite input counts")
        self.rises_ = np.diff(y)
        self.last_ = float(y[-1]) if y.size else None
        self._trim()
        return self

    def update(self, in_tuples: float, mean: float | None = None,
               std: float | None = None) -> RiseQuantile:
        """One more observed window (its input count); the forecast it was planned with is
        not used (the signature of :meth:`ForecastQuantile.update`)."""
        if not hasattr(self, "rises_"):
            self.fit(np.empty(0))
        value = float(in_tuples)
        if not np.isfinite(value):
            raise ElasticInputError("in_tuples", f"must be finite, got {value}")
        if self.last_ is not None:
            self.rises_ = np.append(self.rises_, value - self.last_)
            self._trim()
        self.last_ = value
        return self

    def _trim(self) -> None:
        if self.max_history and self.rises_.size > self.max_history:
            self.rises_ = self.rises_[-self.max_history:]

    def rise(self) -> float:
        """R_q in tuples (0 before any rise has been seen)."""
        if not hasattr(self, "rises_") or self.rises_.size == 0:
            return 0.0
        return max(float(np.quantile(self.rises_, self.quantile)), 0.0)

    def floor(self, in_now: float | None, in_mean: np.ndarray,
              in_std: np.ndarray | None = None) -> np.ndarray:
        """Tuples the capacity must cover per planned window: max(In_now, În_0) + R_q for the
        first, În_h + R_q after it (``in_now`` None: forecast only; σ is not used)."""
        mean = np.asarray(in_mean, dtype=np.float64)
        out = mean + self.rise()
        if in_now is not None and out.size:
            out[0] = max(float(in_now), float(mean[0])) + self.rise()
        return out

    def describe(self) -> str:
        """What the reserve rests on, for a decision's reason."""
        return f"burst reserve {self.rise():.4g} tuples (q {self.quantile:g})"


MIN_CALIBRATION = 50
"""Scaled surprises needed before c_q is trusted: fewer say little about a tail, and the
floor is the rise reserve's until then (a streaming job starts there and moves over as it
observes windows)."""


def _check_history(max_history: object) -> int:
    if isinstance(max_history, bool) or not isinstance(max_history, (int, np.integer)) \
            or max_history < 0:
        raise ElasticInputError("reserve_history", f"must be a whole number >= 0, got {max_history!r}")
    return int(max_history)


class ForecastQuantile:
    """The reserve from the forecast's predictive σ, calibrated on the surprises seen
    (module docstring): floor = level + c_q·σ, with :class:`RiseQuantile` as the fallback
    for a forecast without σ and before :data:`MIN_CALIBRATION` surprises.

    ``fit(history_in, mean, std)`` takes the history's input counts and, per window, the
    one-step forecast made before it (NaN where there was none); ``update(in_tuples, mean,
    std)`` adds one observed window and, if given, the forecast it was planned with.
    ``max_history`` > 0 keeps only that many recent surprises (and rises).
    """

    def __init__(self, quantile: float = 0.9999, max_history: int = 0) -> None:
        self.quantile = quantile
        self.max_history = max_history

    def fit(self, history: np.ndarray, mean: np.ndarray | None = None,
            std: np.ndarray | None = None) -> ForecastQuantile:
        q = check_quantile("reserve_quantile", self.quantile)
        self.rises_ = RiseQuantile(q, _check_history(self.max_history)).fit(history)
        y = np.asarray(history, dtype=np.float64)
        if mean is None or std is None:
            self.scores_ = np.empty(0)
        else:
            mean = np.asarray(mean, dtype=np.float64)
            std = np.asarray(std, dtype=np.float64)
            if mean.shape != y.shape or std.shape != y.shape:
                raise ElasticInputError(
                    "history", f"forecasts must have one value per window ({y.size}), got "
                               f"{mean.shape} and {std.shape}")
            ok = np.isfinite(mean[1:]) & np.isfinite(std[1:]) & (std[1:] > 0)
            level = np.maximum(y[:-1], mean[1:])
            self.scores_ = ((y[1:] - level) / np.where(ok, std[1:], 1.0))[ok]
            self._trim()
        return self

    def update(self, in_tuples: float, mean: float | None = None,
               std: float | None = None) -> ForecastQuantile:
        """One more observed window, with the forecast (mean, σ) it was planned with."""
        if not hasattr(self, "rises_"):
            self.fit(np.empty(0))
        last = self.rises_.last_
        self.rises_.update(in_tuples)
        if last is not None and mean is not None and std is not None and std > 0 \
                and np.isfinite(mean) and np.isfinite(std):
            score = (float(in_tuples) - max(last, float(mean))) / float(std)
            self.scores_ = np.append(self.scores_, score)
            self._trim()
        return self

    def _trim(self) -> None:
        if self.max_history and self.scores_.size > self.max_history:
            self.scores_ = self.scores_[-self.max_history:]

    def scale(self) -> float | None:
        """c_q in units of σ (never below 0), None until :data:`MIN_CALIBRATION` surprises."""
        if not hasattr(self, "scores_") or self.scores_.size < MIN_CALIBRATION:
            return None
        # numpy's default (linear) quantile, as RiseQuantile's: one definition of q for both
        # sources. With the GP whose σ is calibrated at fit (9f2ea8e) it measured 0.83× the
        # static engine-hours on tweets against 0.92× for "higher" (the largest surprise
        # below 1/(1 − q) of them); bench/results/elastic_evaluation.md.
        return max(float(np.quantile(self.scores_, self.quantile)), 0.0)

    def rise(self) -> float:
        """R_q of the fallback, in tuples."""
        return self.rises_.rise() if hasattr(self, "rises_") else 0.0

    def floor(self, in_now: float | None, in_mean: np.ndarray,
              in_std: np.ndarray | None = None) -> np.ndarray:
        """Tuples the capacity must cover per planned window: level + c_q·σ where the window
        has a σ and c_q is calibrated, else the rise reserve's floor."""
        mean = np.asarray(in_mean, dtype=np.float64)
        if not hasattr(self, "rises_"):
            self.fit(np.empty(0))
        out = self.rises_.floor(in_now, mean)
        c = self.scale()
        if c is None or in_std is None:
            return out
        std = np.asarray(in_std, dtype=np.float64)
        level = mean.copy()
        if in_now is not None and level.size:
            level[0] = max(float(in_now), float(mean[0]))
        return np.where(std > 0, level + c * std, out)

    def describe(self) -> str:
        """What the reserve rests on, for a decision's reason."""
        c = self.scale()
        if c is None:
            return (f"burst reserve {self.rise():.4g} tuples (q {self.quantile:g}; forecast σ "
                    f"not calibrated yet, {self.scores_.size}/{MIN_CALIBRATION} surprises)")
        return f"forecast reserve {c:.3g} σ (q {self.quantile:g}, {self.scores_.size} surprises)"


__all__ = ["MIN_CALIBRATION", "ForecastQuantile", "RiseQuantile", "check_quantile"]
