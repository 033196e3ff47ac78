"""The forecasters the GP is compared with (elastic-cep Table II): an RBF support-vector
regressor, a neural network whose hidden layers are picked on a validation tail, a
seasonal-naive forecast (the value one season earlier — the bar any periodic model must clear)
and the planner's own seasonal profile (:class:`keyshift.elastic.forecast.SeasonalProfile`:
slot means with an AR(1) deviation), which the GP must beat to earn its cost.

All share the GP's interface: ``fit(X, y)`` and ``predict(X) -> (mean, std)`` on the same
feature vectors (``keyshift.models.features``), so the comparison runs every model on the same split.
The std of the non-probabilistic models is their training-residual std: a constant band,
reported for a uniform interface, not a calibrated uncertainty. Fits run with one BLAS thread,
like the GPs, so that the comparison of training times is like for like.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from keyshift.models.features import TIMESTAMP_COLUMN
from keyshift.models.gp import ModelInputError, _check_xy

_SEASONS_S = (7 * 86_400.0, 86_400.0)


class _Baseline:
    n_features: int | None = None  # None: any width

    def _xy(self, X: Any, y: Any | None) -> tuple[np.ndarray, np.ndarray | None]:
        X = np.asarray(X, dtype=np.float64)
        width = self.n_features if self.n_features is not None else (
            X.shape[1] if X.ndim == 2 else -1)
        return _check_xy(X, y, width)

    def _require_fitted(self) -> None:
        if not hasattr(self, "resid_std_"):
            raise ModelInputError("model", f"{type(self).__name__} is not fitted; call fit first")


class SVMForecaster(_Baseline):
    """RBF-kernel support-vector regression on standardised features and target."""

    def __init__(self, C: float = 10.0, epsilon: float = 0.05, gamma: str | float = "scale"):
        self.C = C
        self.epsilon = epsilon
        self.gamma = gamma

    def fit(self, X: Any, y: Any) -> SVMForecaster:
        X, y = self._xy(X, y)
        started = time.perf_counter()
        with threadpool_limits(1):
            self.model_ = self._build().fit(X, y)
        self.resid_std_ = float(np.std(y - self.model_.predict(X)))
        self.train_seconds_ = time.perf_counter() - started
        return self

    def _build(self):
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVR

        return TransformedTargetRegressor(
            regressor=make_pipeline(StandardScaler(),
                                    SVR(kernel="rbf", C=self.C, epsilon=self.epsilon,
                                        gamma=self.gamma)),
            transformer=StandardScaler(),
        )

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        self._require_fitted()
        X, _ = self._xy(X, None)
        mean = self.model_.predict(X)
        return mean, np.full(mean.shape, self.resid_std_)


class NNForecaster(_Baseline):
    """A multi-layer perceptron; the hidden-layer layout is chosen on the last
    ``validation_fraction`` of the training rows (the paper's "automatically selected number
    of hidden layers"), then refitted on all training rows."""

    def __init__(
        self,
        layouts: tuple[tuple[int, ...], ...] = ((32,), (64, 32), (64, 64, 32)),
        validation_fraction: float = 0.2,
        max_iter: int = 400,
        seed: int = 0,
    ) -> None:
        self.layouts = layouts
        self.validation_fraction = validation_fraction
        self.max_iter = max_iter
        self.seed = seed

    def _make(self, layout: tuple[int, ...]):
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.neural_network import MLPRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return TransformedTargetRegressor(
            regressor=make_pipeline(StandardScaler(), MLPRegressor(
                hidden_layer_sizes=layout, max_iter=self.max_iter, random_state=self.seed,
                early_stopping=False)),
            transformer=StandardScaler(),
        )

    def fit(self, X: Any, y: Any) -> NNForecaster:
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        if not 0 < self.validation_fraction < 1:
            raise ModelInputError("validation_fraction",
                                  f"must be in (0, 1), got {self.validation_fraction!r}")
        if not self.layouts:
            raise ModelInputError("layouts", "need at least one hidden-layer layout")
        X, y = self._xy(X, y)
        started = time.perf_counter()
        cut = int(round(X.shape[0] * (1 - self.validation_fraction)))
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore", ConvergenceWarning)
            if len(self.layouts) > 1 and 2 <= cut < X.shape[0]:
                errors = []
                for layout in self.layouts:
                    pred = self._make(layout).fit(X[:cut], y[:cut]).predict(X[cut:])
                    errors.append(float(np.sqrt(np.mean((pred - y[cut:]) ** 2))))
                self.layout_ = tuple(self.layouts[int(np.argmin(errors))])
            else:
                self.layout_ = tuple(self.layouts[0])
            self.model_ = self._make(self.layout_).fit(X, y)
        self.resid_std_ = float(np.std(y - self.model_.predict(X)))
        self.train_seconds_ = time.perf_counter() - started
        return self

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        self._require_fitted()
        X, _ = self._xy(X, None)
        mean = self.model_.predict(X)
        return mean, np.full(mean.shape, self.resid_std_)


class SeasonalNaive(_Baseline):
    """Forecast = the last training value observed a whole number of seasons earlier.

    The season is a week when the training span covers two weeks, else a day when it covers
    two days, else there is no season and the forecast is the last value. Only the timestamp
    column of X is used. Vectorised: one ``searchsorted`` per forecast horizon.
    """

    def __init__(self, season_s: float | None = None) -> None:
        self.season_s = season_s

    def fit(self, X: Any, y: Any) -> SeasonalNaive:
        X, y = self._xy(X, y)
        if X.shape[0] == 0:
            raise ModelInputError("X", "need at least one row to fit")
        if self.season_s is not None and not self.season_s > 0:
            raise ModelInputError("season_s", f"must be > 0, got {self.season_s!r}")
        started = time.perf_counter()
        order = np.argsort(X[:, TIMESTAMP_COLUMN], kind="stable")
        self.t_ = X[order, TIMESTAMP_COLUMN]
        self.y_ = y[order]
        span = self.t_[-1] - self.t_[0]
        if self.season_s is not None:
            self.season_ = float(self.season_s)
        else:
            self.season_ = next((s for s in _SEASONS_S if span >= 2 * s), 0.0)
        in_sample = self._lookup(self.t_, exclusive=True)
        ok = ~np.isnan(in_sample)
        self.resid_std_ = float(np.std(self.y_[ok] - in_sample[ok])) if ok.any() else 0.0
        self.train_seconds_ = time.perf_counter() - started
        return self

    def _lookup(self, t: np.ndarray, exclusive: bool = False) -> np.ndarray:
        """Value at the most recent time t - k·season (k >= 1) covered by the training rows."""
        if self.season_ == 0.0:
            if exclusive:
                out = np.full(t.shape, np.nan)
                out[1:] = self.y_[:-1]
                return out
            return np.full(t.shape, self.y_[-1])
        last = self.t_[-1]
        k = np.maximum(1.0, np.ceil((t - last) / self.season_))
        target = t - k * self.season_
        # The latest training row at or before the target time.
        idx = np.searchsorted(self.t_, target, side="right") - 1
        return np.where(idx >= 0, self.y_[np.clip(idx, 0, None)], np.nan)

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        self._require_fitted()
        X, _ = self._xy(X, None)
        mean = self._lookup(X[:, TIMESTAMP_COLUMN])
        # Before the first full season there is nothing to copy: use the first value.
        mean = np.where(np.isnan(mean), self.y_[0], mean)
        return mean, np.full(mean.shape, self.resid_std_)


class SeasonalProfileForecaster(_Baseline):
    """The pure core's :class:`~keyshift.elastic.forecast.SeasonalProfile` on feature rows
    (only the timestamp column is used); its std is the profile's own (slot spread and the
    AR(1) innovation, growing with the horizon), so its interval is a real forecast band."""

    def fit(self, X: Any, y: Any) -> SeasonalProfileForecaster:
        from keyshift.elastic.forecast import SeasonalProfile

        X, y = self._xy(X, y)
        started = time.perf_counter()
        order = np.argsort(X[:, TIMESTAMP_COLUMN], kind="stable")
        self.model_ = SeasonalProfile().fit(X[order, TIMESTAMP_COLUMN], y[order])
        self.resid_std_ = float(np.std(y))
        self.train_seconds_ = time.perf_counter() - started
        return self

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        self._require_fitted()
        X, _ = self._xy(X, None)
        return self.model_.predict(X[:, TIMESTAMP_COLUMN])


class RecentRows:
    """Fit ``model`` on the most recent ``rows`` training rows only: what SVM and NN can
    afford (an RBF SVR costs O(n²) memory and O(n²..n³) time), stated rather than hidden."""

    def __init__(self, model: Any, rows: int = 2000) -> None:
        if not isinstance(rows, int) or rows < 2:
            raise ModelInputError("rows", f"must be an integer >= 2, got {rows!r}")
        self.model = model
        self.rows = rows

    def fit(self, X: Any, y: Any) -> RecentRows:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        self.model.fit(X[-self.rows:], y[-self.rows:])
        return self

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.model.predict(X)
