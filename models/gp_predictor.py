"""A fitted GP's forecast with numpy alone: what a registered model ships to serve itself.

A registry version must be usable by an MLflow client that has neither keyshift nor torch
(issue 15 item 5): this module is packaged with each version (pyfunc ``code_paths``) and
imports nothing but numpy and the standard library. It evaluates the posterior of a fitted
:class:`keyshift.models.gp.GPForecaster` from what the forecaster exported at training time
(:meth:`keyshift.models.gp.GPForecaster.predictor_parts`) — the kernel's hyper-parameters, the
standardised rows the posterior conditions on and its precomputed weights — instead of
re-running GPyTorch. Nothing in the export is pickled: ``predictor.json`` plus
``predictor.npz`` read with ``allow_pickle=False``.

The equations are those of :mod:`keyshift.models.gp`, in the model's standardised space:

- covariance: ``Σ_k outputscale_k · base_k`` with the ARD squared exponential
  ``exp(−½ Σ_d ((a_d − b_d)/ℓ_d)²)`` (elastic-cep Eq. 8) and the periodic terms
  ``exp(−2 sin²(π|a_t − b_t|/p) / ℓ)`` on the timestamp column (GPyTorch's definitions);
- exact posterior: mean ``c + k*ᵀα`` with α = (K + σ²I)⁻¹(y − c) exported, variance
  ``k** − |L⁻¹k*|²`` with L the Cholesky factor of K + σ²I, rebuilt here once at load (the
  factor itself is n² numbers, 32 MB at two weeks of 10-minute windows; the rows are kB);
- sparse (SGPR) posterior: mean ``c + K*u w`` with w = Σ⁻¹b exported, variance
  ``k** − |L_uu⁻¹k_u*|² + |L_Σ⁻¹k_u*|²`` from the exported factors of K_uu and Σ;

then back to the target's units: the frozen target scaling, the seasonal slot profile
(mean m + s·μ_z, std s·σ_z) and, for a log target, the log-normal's mean and std.
:func:`slot_index` and :func:`to_target_units` are the only implementation of those steps;
:mod:`keyshift.models.gp` and :mod:`keyshift.models.seasonal` call them too.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

PREDICTOR_FORMAT = 1
PREDICTOR_PARTS = ("predictor.json", "predictor.npz")
_JITTER_TRIES = 6
_SOLVE_BLOCK = 256


class PredictorError(ValueError):
    """An exported predictor, or the input given to it, is unusable; the message names the
    field first (``predictor.json.kernels:``, ``X:``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def slot_index(t: np.ndarray, period_s: float, slot_s: float, n_slots: int) -> np.ndarray:
    """The slot of the cycle each epoch second ``t`` falls in (all 0 without a cycle)."""
    if period_s <= 0:
        return np.zeros(np.shape(t), dtype=np.int64)
    return np.floor(np.mod(t, period_s) / slot_s).astype(np.int64) % n_slots


def to_target_units(t: np.ndarray, mean: np.ndarray, std: np.ndarray,
                    profile: tuple[float, float, np.ndarray, np.ndarray] | None,
                    log_target: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the model's (deseasoned, possibly log) target back in the target's
    units: through the slot profile ``(period_s, slot_s, slot means, slot spreads)``, then,
    for a log target, the log-normal's mean exp(μ + σ²/2) and std."""
    if profile is not None:
        period_s, slot_s, slot_mean, spread = profile
        i = slot_index(t, period_s, slot_s, slot_mean.size)
        mean, std = slot_mean[i] + spread[i] * mean, spread[i] * std
    if not log_target:
        return mean, std
    var = np.square(std)
    out_mean = np.exp(mean + var / 2.0)
    return out_mean, out_mean * np.sqrt(np.expm1(var))  # expm1: exact for tiny var


def cholesky(k: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``k``, with the growing diagonal jitter :mod:`keyshift.models.gp`
    uses when rounding makes a kernel matrix indefinite."""
    jitter = 0.0
    for _ in range(_JITTER_TRIES):
        try:
            return np.linalg.cholesky(k + jitter * np.eye(k.shape[0]) if jitter else k)
        except np.linalg.LinAlgError:
            jitter = 1e-8 if jitter == 0 else jitter * 10
    raise PredictorError("predictor", "the kernel matrix is not positive definite, even with "
                                      "jitter")


class LowerSolve:
    """``factor⁻¹ b`` for a lower-triangular ``factor``, block by block. numpy has no
    triangular solver, and inverting a 4,000-row factor at load costs six times its
    Cholesky; here only the diagonal blocks are inverted (at load, n·256 numbers) and a
    solve is matrix products, O(n²) per column of ``b`` like a triangular solve."""

    def __init__(self, factor: np.ndarray) -> None:
        self.factor = factor
        self.starts = range(0, factor.shape[0], _SOLVE_BLOCK)
        self.diagonal = [np.linalg.inv(factor[lo:lo + _SOLVE_BLOCK, lo:lo + _SOLVE_BLOCK])
                         for lo in self.starts]

    def __call__(self, b: np.ndarray) -> np.ndarray:
        out = np.empty_like(b)
        for lo, inverse in zip(self.starts, self.diagonal):
            hi = lo + _SOLVE_BLOCK
            out[lo:hi] = inverse @ (b[lo:hi] - self.factor[lo:hi, :lo] @ out[:lo])
        return out


class GPPredictor:
    """The posterior of one exported GP; ``predict(X) -> (mean, std)`` of a new observation
    in the target's units, as :meth:`keyshift.models.gp.GPForecaster.predict` returns them."""

    def __init__(self, description: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.description = description
        self.feature_names: tuple[str, ...] = tuple(description["feature_names"])
        self.log_target = bool(description["log_target"])
        self.posterior = description["posterior"]
        self.constant = float(description["mean_constant"])
        self.noise = float(description["noise"])
        self.kernels = list(description["kernels"])
        self.y_mean, self.y_std = float(description["y_mean"]), float(description["y_std"])
        self.time_column = int(description["timestamp_column"])
        self.x_mean, self.x_std = arrays["x_mean"], arrays["x_std"]
        profile = description["profile"]
        self.profile = None if profile is None else (
            float(profile["period_s"]), float(profile["slot_s"]), arrays["profile_mean"],
            arrays["profile_spread"])
        if self.posterior == "exact":
            self.rows, self.weights = arrays["train_x"], arrays["alpha"]
            k = self.covariance(self.rows, self.rows)
            k[np.diag_indices_from(k)] += self.noise
            self._solves = [(-1.0, LowerSolve(cholesky(k)))]
        else:
            self.rows, self.weights = arrays["inducing_z"], arrays["weights"]
            self._solves = [(-1.0, LowerSolve(arrays["chol_uu"])),
                            (1.0, LowerSolve(arrays["chol_sigma"]))]

    def covariance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """K(a, b) of the fitted kernel, for standardised rows ``a`` and ``b``."""
        out = np.zeros((a.shape[0], b.shape[0]))
        for k in self.kernels:
            if k["type"] == "rbf":
                scale = np.asarray(k["lengthscale"], dtype=np.float64)
                cols = k.get("columns")  # a term over some columns only (the load term)
                a_, b_ = (a, b) if cols is None else (a[:, cols], b[:, cols])
                a_, b_ = a_ / scale, b_ / scale
                centre = a_.mean(axis=0) if a_.shape[0] else 0.0  # as GPyTorch: less rounding
                a_, b_ = a_ - centre, b_ - centre
                sq = (np.square(a_).sum(1)[:, None] + np.square(b_).sum(1)[None, :]
                      - 2.0 * a_ @ b_.T)
                base = np.exp(-0.5 * np.maximum(sq, 0.0))
            else:
                col = int(k["column"])
                diff = np.abs(a[:, col][:, None] - b[:, col][None, :]) * (np.pi / k["period"])
                base = np.exp(-2.0 * np.square(np.sin(diff)) / k["lengthscale"])
            out += float(k["outputscale"]) * base
        return out

    def _prior_variance(self) -> float:
        """k(x, x): every kernel here is stationary with value ``outputscale`` at distance 0."""
        return float(sum(float(k["outputscale"]) for k in self.kernels))

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        X = np.asarray(X, dtype=np.float64)
        d = len(self.feature_names)
        if X.ndim != 2 or X.shape[1] != d:
            raise PredictorError("X", f"expected shape (n, {d}), got {X.shape}")
        if not np.isfinite(X).all():
            raise PredictorError("X", "contains NaN or infinite values")
        x = (X - self.x_mean) / self.x_std
        ks = self.covariance(self.rows, x)
        mean = self.constant + ks.T @ self.weights
        var = np.full(x.shape[0], self._prior_variance() + self.noise)
        for sign, solve in self._solves:
            var += sign * np.square(solve(ks)).sum(0)
        std = np.sqrt(np.maximum(var, 0.0)) * self.y_std
        return to_target_units(X[:, self.time_column], mean * self.y_std + self.y_mean, std, self.profile,
                               self.log_target)

    # -- the stored form ---------------------------------------------------------------
    @staticmethod
    def from_parts(parts: dict[str, bytes]) -> GPPredictor:
        """Read ``predictor.json`` and ``predictor.npz``; nothing in them can run code."""
        try:
            desc = json.loads(parts["predictor.json"])
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise PredictorError("predictor.json", f"missing or not JSON ({exc})") from None
        if not isinstance(desc, dict) or desc.get("format") != PREDICTOR_FORMAT:
            got = desc.get("format") if isinstance(desc, dict) else desc
            raise PredictorError("predictor.json.format", f"{got!r}; this code reads format "
                                                          f"{PREDICTOR_FORMAT}")
        try:
            with np.load(io.BytesIO(parts["predictor.npz"]), allow_pickle=False) as npz:
                arrays = {k: np.asarray(npz[k], dtype=np.float64) for k in npz.files}
        except Exception as exc:  # noqa: BLE001 - every reader error is the same refusal
            raise PredictorError("predictor.npz", f"unreadable ({type(exc).__name__}: "
                                                  f"{str(exc)[:200]})") from None
        for k in desc.get("kernels") or [None]:
            if not isinstance(k, dict) or k.get("type") not in ("rbf", "periodic"):
                raise PredictorError("predictor.json.kernels", f"{k!r} is not an rbf or "
                                                               "periodic kernel")
        if desc.get("posterior") not in ("exact", "sparse"):
            raise PredictorError("predictor.json.posterior", f"{desc.get('posterior')!r} is "
                                                             "not exact or sparse")
        try:
            return GPPredictor(desc, arrays)
        except KeyError as exc:
            raise PredictorError("predictor", f"lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise PredictorError("predictor", f"inconsistent ({str(exc)[:200]})") from None

    @staticmethod
    def load(path: str | os.PathLike) -> GPPredictor:
        """Read the directory :meth:`keyshift.models.gp.GPForecaster.save_predictor` wrote."""
        path = Path(path)
        return GPPredictor.from_parts({name: (path / name).read_bytes()
                                       for name in PREDICTOR_PARTS if (path / name).is_file()})
