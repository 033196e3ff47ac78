"""Gaussian-process forecasters of input rate and latency (elastic-cep §III-B, Eq. 3–8).

The structure follows GPyTorch's ExactGP example: a constant mean, a scaled kernel, a Gaussian
likelihood, and hyper-parameters fitted by maximising the exact marginal likelihood with Adam.

Kernels (``kernel=``):
- ``"ard"``: the paper's automatic-relevance-determination squared exponential (Eq. 8), one
  length scale per feature, so an irrelevant feature is switched off by a long length scale.
- ``"ard+daily"`` / ``"ard+weekly"``: Eq. 8 plus a periodic kernel on the timestamp with the
  period pinned to one day / one week. The ARD kernel sees time of day as a number, so 23:30
  and 00:00 look far apart; the periodic term wraps the day around.
- ``"auto"``: fit every candidate above and keep the one with the highest marginal likelihood
  (the paper's own criterion for hyper-parameters, applied to the kernel choice too).

``method="sgpr"`` swaps the exact kernel for an inducing-point approximation (Titsias' SGPR via
``gpytorch.kernels.InducingPointKernel``): O(n·m²) instead of O(n³) per step, for histories
longer than an exact GP can afford. ``bench/bench_gp.py`` reports both side by side.

Inputs and targets are standardised inside the model with statistics frozen at ``fit``; the
online path (:meth:`GPForecaster.add_observations`) reuses them and the hyper-parameters, so
between nightly retrains new windows only extend the conditioning set (paper step 2).

The latency GP works on log seconds (``log_target``). Latency is positive and spans decades
(0.06 ms per tuple in a full window, 12 ms in a 40-tuple one, dominated by fixed task
costs); on raw seconds the GP's mean, conditioned online on such windows, went below zero for
engine counts it had no data for, and the planner cannot use a negative Lat. In log space
every forecast is positive, and ``predict`` returns the log-normal's mean and standard
deviation in seconds, the expectation Eq. 9 multiplies by the input.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from keyshift.errors import FieldError
from models.features import LATENCY_FEATURES, RATE_FEATURES, TIMESTAMP_COLUMN

KERNELS = ("ard", "ard+daily", "ard+weekly")
METHODS = ("exact", "sgpr")
_PERIOD_S = {"daily": 86_400.0, "weekly": 7 * 86_400.0}
# Above this size GPyTorch would switch from Cholesky to conjugate gradients; our fits are
# small enough that the exact factorisation is both faster and deterministic.
_MAX_CHOLESKY = 20_000


class ModelInputError(FieldError):
    """Bad arrays or parameters given to a forecaster; the message names the field."""


def _torch():
    import torch

    return torch


def _check_xy(X: Any, y: Any | None, n_features: int) -> tuple[np.ndarray, np.ndarray | None]:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1 and n_features == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ModelInputError("X", f"expected shape (n, {n_features}), got {X.shape}")
    if not np.isfinite(X).all():
        raise ModelInputError("X", "contains NaN or infinite values")
    if y is None:
        return X, None
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if y.shape[0] != X.shape[0]:
        raise ModelInputError("y", f"{y.shape[0]} targets for {X.shape[0]} rows of X")
    if not np.isfinite(y).all():
        raise ModelInputError("y", "contains NaN or infinite values")
    return X, y


@dataclass(frozen=True)
class _Scaling:
    """Frozen standardisation of features and target, fitted once per training run."""

    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray) -> _Scaling:
        x_std = X.std(axis=0)
        y_std = float(y.std())
        return cls(X.mean(axis=0), np.where(x_std > 0, x_std, 1.0), float(y.mean()),
                   y_std if y_std > 0 else 1.0)

    def x(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_mean) / self.x_std

    def y(self, y: np.ndarray) -> np.ndarray:
        return (y - self.y_mean) / self.y_std


def _build_model(kernel: str, method: str, x, y, scaling: _Scaling, inducing: int):
    """An ExactGP with the requested covariance over standardised tensors ``x``, ``y``."""
    import gpytorch

    class _GPModel(gpytorch.models.ExactGP):
        def __init__(self, train_x, train_y, likelihood, covar):
            super().__init__(train_x, train_y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = covar

        def forward(self, inputs):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(inputs), self.covar_module(inputs)
            )

    likelihood = gpytorch.likelihoods.GaussianLikelihood(
        noise_constraint=gpytorch.constraints.GreaterThan(1e-4)
    )
    d = x.shape[1]
    covar = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=d))  # Eq. 8
    if kernel != "ard":
        periodic = gpytorch.kernels.PeriodicKernel(active_dims=(TIMESTAMP_COLUMN,))
        period = _PERIOD_S[kernel.split("+")[1]] / float(scaling.x_std[TIMESTAMP_COLUMN])
        periodic.period_length = period
        periodic.raw_period_length.requires_grad_(False)  # the calendar is known, not learnt
        covar = covar + gpytorch.kernels.ScaleKernel(periodic)
    if method == "sgpr":
        m = min(inducing, x.shape[0])
        idx = np.linspace(0, x.shape[0] - 1, m).round().astype(int)
        covar = gpytorch.kernels.InducingPointKernel(
            covar, inducing_points=x[idx].clone(), likelihood=likelihood
        )
    return _GPModel(x, y, likelihood, covar), likelihood


_ONLINE_SLACK = 256
"""Rows the online conditioning set may grow past ``max_train`` before it is trimmed back
(one full factorisation per this many new windows instead of one per window)."""


def _cholesky(k):
    """Cholesky factor of K + σ²I, with growing diagonal jitter if rounding made it fail
    (what GPyTorch does too; σ² >= 1e-4 makes it rare)."""
    torch = _torch()
    jitter = 0.0
    for _ in range(6):
        factor, info = torch.linalg.cholesky_ex(k + jitter * torch.eye(k.shape[0], dtype=k.dtype))
        if int(info) == 0:
            return factor
        jitter = 1e-8 if jitter == 0 else jitter * 10
    raise ModelInputError("model", "the kernel matrix is not positive definite, even with jitter")


class _OnlinePosterior:
    """Exact GP posterior (Eq. 4–6) from a Cholesky factor that grows one row at a time.

    GPyTorch drops its prediction caches whenever the training data change, so each new
    window cost a full O(n³) factorisation at the next prediction (about 1 s per step at
    n = 2,000 on this machine). Adding a row to K + σ²I only appends one row to its
    Cholesky factor: l = L⁻¹k, d = sqrt(k_new + σ² − lᵀl), O(n²). The factor lives in a
    contiguous buffer with room for ``_ONLINE_SLACK`` more rows, padded as the block
    matrix [[L, 0], [0, I]]: triangular solves run on the whole buffer with zero-padded
    right-hand sides (the padding stays zero), so no step copies the factor.
    α = (K + σ²I)⁻¹(y − m) is solved again only when a prediction needs it. The kernel,
    mean and noise are the fitted model's own (hyper-parameters untouched, paper step 2).
    """

    def __init__(self, model, x, y) -> None:
        torch = _torch()
        self.model = model
        with torch.no_grad():
            self.noise = float(model.likelihood.noise.item())
            self.const = float(model.mean_module.constant.item())
            self.x, self.y = x, y
            k = self._k(x, x)
            k.diagonal().add_(self.noise)
            n = x.shape[0]
            self._buf = torch.eye(n + _ONLINE_SLACK, dtype=torch.float64)
            self._buf[:n, :n] = _cholesky(k)
            self.n = n
            self._alpha = None

    @property
    def L(self):
        return self._buf[:self.n, :self.n]

    def _k(self, a, b):
        return self.model.covar_module(a, b).to_dense()

    def _lsolve(self, b, transpose: bool = False):
        """L⁻¹b (or L⁻ᵀb) for b of n rows, on the padded buffer."""
        torch = _torch()
        cap = self._buf.shape[0]
        padded = torch.zeros((cap, b.shape[1]), dtype=torch.float64)
        padded[:self.n] = b
        a = self._buf.mT if transpose else self._buf
        return torch.linalg.solve_triangular(a, padded, upper=transpose)[:self.n]

    def alpha(self):
        if self._alpha is None:
            z = self._lsolve((self.y - self.const)[:, None])
            self._alpha = self._lsolve(z, transpose=True)[:, 0]
        return self._alpha

    def extend(self, x_new, y_new) -> None:
        torch = _torch()
        with torch.no_grad():
            for i in range(x_new.shape[0]):
                xi = x_new[i:i + 1]
                n = self.n
                if n == self._buf.shape[0]:
                    grown = torch.eye(2 * n, dtype=torch.float64)
                    grown[:n, :n] = self.L
                    self._buf = grown
                l = self._lsolve(self._k(self.x, xi))[:, 0]
                kii = self._k(xi, xi)[0, 0] + self.noise
                self._buf[n, :n] = l
                self._buf[n, n] = torch.sqrt(torch.clamp(kii - l @ l, min=1e-12))
                self.n = n + 1
                self.x = torch.cat([self.x, xi])
            self.y = torch.cat([self.y, y_new])
            self._alpha = None

    def predict(self, x_star, include_noise: bool) -> tuple[np.ndarray, np.ndarray]:
        torch = _torch()
        with torch.no_grad():
            ks = self._k(self.x, x_star)
            mean = self.const + ks.T @ self.alpha()
            v = self._lsolve(ks)
            var = self._k(x_star, x_star).diagonal() - (v * v).sum(0)
            if include_noise:
                var = var + self.noise
        return mean.numpy(), var.clamp_min(0).numpy()


class GPForecaster:
    """A GP regressor with ``fit`` / ``predict -> (mean, std)`` / ``add_observations``.

    Parameters are stored as given (scikit-learn manners); all work happens in ``fit``.
    ``max_train`` keeps the most recent rows only: an exact GP costs O(n³), and the recent past
    matters most to a forecast of the next windows. ``hyper_points`` bounds the rows the
    marginal likelihood is maximised on (evenly strided over the training span, so the daily
    and weekly shape survives); the fitted GP then conditions on ALL training rows, so the
    predictive equations (4–6) stay exact. Each Adam step costs O(hyper_points³) instead of
    O(n³) — the difference between seconds and minutes at n = 2,000 on two cores. Set
    ``hyper_points >= max_train`` for the textbook fit on every row. ``threads`` defaults to
    one: on a shared two-core host, two BLAS threads per fit were four times slower in CPU
    time than one (spinning threads contend with the other processes).
    """

    feature_names: tuple[str, ...] = ()
    # model log(y) instead of y: set by targets that are positive and span decades (latency)
    log_target: bool = False

    def __init__(
        self,
        kernel: str = "ard",
        method: str = "exact",
        iters: int = 60,
        lr: float = 0.1,
        inducing: int = 256,
        max_train: int = 4000,
        hyper_points: int = 500,
        seed: int = 0,
        threads: int = 1,
    ) -> None:
        self.kernel = kernel
        self.method = method
        self.iters = iters
        self.lr = lr
        self.inducing = inducing
        self.max_train = max_train
        self.hyper_points = hyper_points
        self.seed = seed
        self.threads = threads

    # -- parameters --------------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in
                ("kernel", "method", "iters", "lr", "inducing", "max_train", "hyper_points",
                 "seed", "threads")}

    def _validate_params(self) -> list[str]:
        if self.kernel not in KERNELS + ("auto",):
            raise ModelInputError("kernel", f"{self.kernel!r} not one of {KERNELS + ('auto',)}")
        if self.method not in METHODS:
            raise ModelInputError("method", f"{self.method!r} not one of {METHODS}")
        for name, low in (("iters", 1), ("inducing", 2), ("max_train", 2), ("hyper_points", 3),
                          ("threads", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < low:
                raise ModelInputError(name, f"must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr <= 10):
            raise ModelInputError("lr", f"must be in (0, 10], got {self.lr!r}")
        return list(KERNELS) if self.kernel == "auto" else [self.kernel]

    # -- training ----------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> GPForecaster:
        """Maximise the marginal likelihood on (X, y); with ``kernel="auto"`` pick the best."""
        candidates = self._validate_params()
        X, y = _check_xy(X, y, len(self.feature_names))
        if X.shape[0] < 3:
            raise ModelInputError("X", f"need at least 3 rows to fit, got {X.shape[0]}")
        X, y = X[-self.max_train:], self._to_model_space(y[-self.max_train:])
        torch = _torch()
        torch.set_num_threads(self.threads)
        started = time.perf_counter()
        self._scaling = _Scaling.of(X, y)
        self.kernel_scores_: dict[str, float] = {}
        best = None
        # SGPR is the alternative to subsampling: it keeps every row in the likelihood.
        keep = X.shape[0] if self.method == "sgpr" else min(self.hyper_points, X.shape[0])
        sub = np.unique(np.linspace(0, X.shape[0] - 1, keep).round().astype(int))
        for kernel in candidates:
            model, likelihood, mll = self._train(kernel, X[sub], y[sub])
            self.kernel_scores_[kernel] = mll
            if best is None or mll > best[2]:
                best = (model, likelihood, mll, kernel)
        self._model, self._likelihood, self.mll_, self.kernel_ = best
        self._posterior = None
        self._X, self._y = X, y
        if sub.size < X.shape[0]:
            self._condition_on(X, y)
        self.train_seconds_ = time.perf_counter() - started
        return self

    def _to_model_space(self, y: np.ndarray) -> np.ndarray:
        """The targets the GP itself sees: ``log(y)`` for a ``log_target`` model."""
        if not self.log_target:
            return y
        if (y <= 0).any():
            raise ModelInputError("y", f"{type(self).__name__} models log(y): every target must "
                                       f"be > 0, got {float(y.min()):.3g}")
        return np.log(y)

    def _from_model_space(self, mean: np.ndarray, std: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std in the target's units; for a log target those of the log-normal."""
        if not self.log_target:
            return mean, std
        var = np.square(std)
        # exp(var) - 1 loses all precision for tiny var; expm1 keeps it
        out_mean = np.exp(mean + var / 2.0)
        return out_mean, out_mean * np.sqrt(np.expm1(var))

    def _train(self, kernel: str, X: np.ndarray, y: np.ndarray):
        import gpytorch

        torch = _torch()
        torch.manual_seed(self.seed)
        x_t = torch.as_tensor(self._scaling.x(X), dtype=torch.float64)
        y_t = torch.as_tensor(self._scaling.y(y), dtype=torch.float64)
        model, likelihood = _build_model(kernel, self.method, x_t, y_t, self._scaling,
                                         self.inducing)
        model.double()
        model.train()
        likelihood.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimiser = torch.optim.Adam(params, lr=self.lr)
        objective = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        with gpytorch.settings.max_cholesky_size(_MAX_CHOLESKY):
            for _ in range(self.iters):
                optimiser.zero_grad()
                loss = -objective(model(x_t), y_t)
                loss.backward()
                optimiser.step()
            with torch.no_grad():
                mll = float(objective(model(x_t), y_t))
        model.eval()
        likelihood.eval()
        return model, likelihood, mll

    def _require_fitted(self) -> None:
        if not hasattr(self, "_model"):
            raise ModelInputError("model", f"{type(self).__name__} is not fitted; call fit first")

    # -- serving -----------------------------------------------------------------------
    def predict(self, X: Any, include_noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation (Eq. 4–6) in the target's units.

        With ``include_noise`` the std is that of a new observation (what the planner compares
        observed values against); without it, that of the latent function (Eq. 6 exactly).
        """
        import gpytorch

        self._require_fitted()
        X, _ = _check_xy(X, None, len(self.feature_names))
        if X.shape[0] == 0:
            return np.empty(0), np.empty(0)
        torch = _torch()
        torch.set_num_threads(self.threads)
        x_t = torch.as_tensor(self._scaling.x(X), dtype=torch.float64)
        if self.method == "exact":
            mean, var = self._online().predict(x_t, include_noise)
        else:
            with torch.no_grad(), gpytorch.settings.max_cholesky_size(_MAX_CHOLESKY):
                latent = self._model(x_t)
                dist = self._likelihood(latent) if include_noise else latent
                mean = dist.mean.numpy()
                var = dist.variance.clamp_min(0).numpy()
        s = self._scaling
        return self._from_model_space(mean * s.y_std + s.y_mean, np.sqrt(var) * s.y_std)

    def _online(self) -> _OnlinePosterior:
        """The exact posterior's Cholesky factor, built once and then extended row by row."""
        cache = getattr(self, "_posterior", None)
        if cache is None:
            torch = _torch()
            cache = _OnlinePosterior(
                self._model, torch.as_tensor(self._scaling.x(self._X), dtype=torch.float64),
                torch.as_tensor(self._scaling.y(self._y), dtype=torch.float64),
            )
            self._posterior = cache
        return cache

    def add_observations(self, X: Any, y: Any) -> GPForecaster:
        """Condition on new windows without touching the hyper-parameters (paper step 2).

        The kernel, its length scales and the standardisation stay as fitted; only the data the
        posterior conditions on grows (trimmed to the most recent ``max_train`` rows), so the
        cost is one new factorisation at the next ``predict``, not a marginal-likelihood fit.
        """
        self._require_fitted()
        X, y = _check_xy(X, y, len(self.feature_names))
        if X.shape[0] == 0:
            return self
        y = self._to_model_space(y)
        rows, targets = np.vstack([self._X, X]), np.concatenate([self._y, y])
        cache = getattr(self, "_posterior", None)
        if cache is not None and rows.shape[0] <= self.max_train + _ONLINE_SLACK:
            # Exact GP: extend the cached factor by the new rows (O(n²) each) and let the
            # conditioning set run up to _ONLINE_SLACK rows past max_train before trimming.
            torch = _torch()
            torch.set_num_threads(self.threads)
            cache.extend(torch.as_tensor(self._scaling.x(X), dtype=torch.float64),
                         torch.as_tensor(self._scaling.y(y), dtype=torch.float64))
            self._X, self._y = rows, targets
            self._model.set_train_data(inputs=cache.x, targets=cache.y, strict=False)
            return self
        self._condition_on(rows[-self.max_train:], targets[-self.max_train:])
        return self

    def _condition_on(self, X: np.ndarray, y: np.ndarray) -> None:
        """Replace the rows the posterior conditions on; hyper-parameters stay untouched."""
        torch = _torch()
        self._posterior = None
        self._X, self._y = X, y
        x_t = torch.as_tensor(self._scaling.x(X), dtype=torch.float64)
        y_t = torch.as_tensor(self._scaling.y(y), dtype=torch.float64)
        self._model.set_train_data(inputs=x_t, targets=y_t, strict=False)

    @property
    def n_train(self) -> int:
        self._require_fitted()
        return int(self._X.shape[0])

    def hyperparameters(self) -> dict[str, float]:
        """Fitted hyper-parameters in the features' own units (length scales in seconds, hours,
        days, engines): a long length scale means the feature hardly matters (ARD). For a
        ``log_target`` model the noise and output scale are in log units."""
        self._require_fitted()
        out: dict[str, float] = {"noise_std": float(np.sqrt(self._likelihood.noise.item()))
                                 * self._scaling.y_std}
        covar = self._model.covar_module
        if self.method == "sgpr":
            covar = covar.base_kernel
        ard = covar.kernels[0] if hasattr(covar, "kernels") else covar
        scales = ard.base_kernel.lengthscale.detach().numpy().reshape(-1) * self._scaling.x_std
        for name, value in zip(self.feature_names, scales):
            out[f"lengthscale_{name}"] = float(value)
        out["outputscale"] = float(ard.outputscale.item()) * self._scaling.y_std ** 2
        return out

    # -- persistence (used by the MLflow wrapper) ---------------------------------------
    def to_bytes(self) -> bytes:
        """Everything needed to predict again: params, chosen kernel, scaling, training rows
        (an exact GP conditions on them) and the fitted state dict."""
        self._require_fitted()
        torch = _torch()
        s = self._scaling
        blob = {
            "class": type(self).__name__,
            "params": self.get_params(),
            "kernel_": self.kernel_,
            "mll_": self.mll_,
            "train_seconds_": self.train_seconds_,
            "scaling": (s.x_mean, s.x_std, s.y_mean, s.y_std),
            "X": self._X,
            "y": self._y,  # in model space (log seconds for a log target)
            "log_target": self.log_target,
            "state_dict": self._model.state_dict(),
        }
        buf = io.BytesIO()
        torch.save(blob, buf)
        return buf.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> GPForecaster:
        torch = _torch()
        blob = torch.load(io.BytesIO(data), weights_only=False)
        cls = {"InputRateGP": InputRateGP, "LatencyGP": LatencyGP}.get(blob.get("class"))
        if cls is None:
            raise ModelInputError("model", f"unknown forecaster class {blob.get('class')!r}")
        gp = cls(**blob["params"])
        if bool(blob.get("log_target", False)) != cls.log_target:
            raise ModelInputError("model", f"stored {cls.__name__} was trained with log_target="
                                           f"{blob.get('log_target', False)}; this version "
                                           f"expects {cls.log_target}: retrain it")
        x_mean, x_std, y_mean, y_std = blob["scaling"]
        gp._scaling = _Scaling(np.asarray(x_mean), np.asarray(x_std), float(y_mean), float(y_std))
        gp._X, gp._y = np.asarray(blob["X"]), np.asarray(blob["y"])
        x_t = torch.as_tensor(gp._scaling.x(gp._X), dtype=torch.float64)
        y_t = torch.as_tensor(gp._scaling.y(gp._y), dtype=torch.float64)
        state = blob["state_dict"]
        m = next((v.shape[0] for k, v in state.items() if k.endswith("inducing_points")),
                 gp.inducing)
        model, likelihood = _build_model(blob["kernel_"], gp.method, x_t, y_t, gp._scaling, m)
        model.double()
        model.load_state_dict(state)
        model.eval()
        likelihood.eval()
        gp._model, gp._likelihood = model, model.likelihood
        gp.kernel_, gp.mll_, gp.train_seconds_ = blob["kernel_"], blob["mll_"], blob["train_seconds_"]
        gp.kernel_scores_ = {gp.kernel_: gp.mll_}
        return gp


class InputRateGP(GPForecaster):
    """Input rate (events/s) from (timestamp, time of day, day of week)."""

    feature_names = RATE_FEATURES


class LatencyGP(GPForecaster):
    """Latency per event (s) from (timestamp, time of day, day of week, engines), fitted on
    log seconds so that no forecast is negative."""

    feature_names = LATENCY_FEATURES
    log_target = True

