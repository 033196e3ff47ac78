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
additive rise is bounded by the largest burst in tuples. docs/elasticity.md has the
comparison on the three series.
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
        if isinstance(self.max_history, bool) or not isinstance(self.max_history, (int, np.integer)) \
                or self.max_history < 0:
            raise ElasticInputError("reserve_history", f"must be a whole number >= 0, got {self.max_history!r}")

    def fit(self, history: np.ndarray) -> RiseQuantile:
        self._check()
        y = np.asarray(history, dtype=np.float64)
        if y.ndim != 1 or not np.isfinite(y).all():
            raise ElasticInputError("history", "must be a flat array of finite input counts")
        self.rises_ = np.diff(y)
        self.last_ = float(y[-1]) if y.size else None
        self._trim()
        return self

    def update(self, in_tuples: float) -> RiseQuantile:
        """One more observed window (its input count)."""
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

    def floor(self, in_now: float | None, in_mean: np.ndarray) -> np.ndarray:
        """Tuples the capacity must cover per planned window: max(In_now, În_0) + R_q for the
        first, În_h + R_q after it (``in_now`` None: forecast only)."""
        mean = np.asarray(in_mean, dtype=np.float64)
        out = mean + self.rise()
        if in_now is not None and out.size:
            out[0] = max(float(in_now), float(mean[0])) + self.rise()
        return out


__all__ = ["RiseQuantile", "check_quantile"]
