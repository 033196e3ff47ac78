"""The GP input-rate forecaster behind the planner's forecaster protocol
(:mod:`keyshift.elastic.forecast`): ``fit(t, y)``, ``update(t, y)``, ``predict(t)`` on
timestamps in seconds. Registered as the ``gp`` plugin of the entry-point group
``keyshift.forecasters`` so that the pure core can offer it by name without importing this
layer.
"""

from __future__ import annotations

import numpy as np

from keyshift.models.features import rate_features
from keyshift.models.gp import InputRateGP


class GPRateForecaster:
    """InputRateGP on (timestamp, time of day, day of week): Eq. 8 on the residual of the
    seasonal profile, every row of the history (exact, then sparse beyond 4,000 rows)."""

    predictive_std = True
    """The std is the GP's posterior predictive σ (noise included): the forecast reserve
    (keyshift.elastic.reserve.ForecastQuantile) sizes capacity on it."""

    def __init__(self, iters: int = 40, max_train: int | None = None, kernel: str = "ard") -> None:
        self.iters = iters
        self.max_train = max_train
        self.kernel = kernel

    def fit(self, t: np.ndarray, y: np.ndarray) -> GPRateForecaster:
        self.model_ = InputRateGP(kernel=self.kernel, iters=self.iters, max_train=self.max_train)
        self.model_.fit(rate_features(t), y)
        return self

    def update(self, t: np.ndarray, y: np.ndarray) -> GPRateForecaster:
        """New observations between refits, without touching the hyper-parameters."""
        self.model_.add_observations(rate_features(t), y)
        return self

    def predict(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std = self.model_.predict(rate_features(t))
        return np.maximum(mean, 0.0), std
