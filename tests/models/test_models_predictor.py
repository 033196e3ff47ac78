"""The numpy predictor a registry version serves with (keyshift.models.gp_predictor): the same
forecast as the GPyTorch forecaster it was exported from, for every kind of GP keyshift
fits, with nothing but numpy — and a refusal, naming the field, of anything else."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keyshift.models.features import latency_features, rate_features
from keyshift.models.gp import InputRateGP, LatencyGP
from keyshift.models.gp_predictor import GPPredictor, PredictorError

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def _rate_history(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(n) * 1800.0
    return t, 100 + 30 * np.sin(2 * np.pi * t / 86_400) + rng.normal(0, 3, n)


@pytest.mark.parametrize("params", [
    {"kernel": "ard"},                                   # profile mean, exact
    {"kernel": "ard+daily+weekly"},                      # periodic terms on the timestamp
    {"kernel": "ard+local", "mean": "profile+offset"},   # two RBF terms, a learnt offset
    {"kernel": "ard", "mean": "constant"},               # the paper's Eq. 8 GP
    {"kernel": "ard+daily", "method": "sgpr", "inducing": 64},  # sparse posterior
])
def test_predictor_forecasts_what_the_input_rate_gp_forecasts(params) -> None:
    t, y = _rate_history()
    gp = InputRateGP(iters=10, **params).fit(rate_features(t), y)
    predictor = GPPredictor.from_parts(gp.predictor_parts())
    X = rate_features(t[-1] + np.arange(1, 97) * 1800.0)  # two days ahead: near and far
    mean, std = gp.predict(X)
    p_mean, p_std = predictor.predict(X)
    np.testing.assert_allclose(p_mean, mean, rtol=1e-9)
    np.testing.assert_allclose(p_std, std, rtol=1e-9)
    assert predictor.posterior == ("sparse" if params.get("method") == "sgpr" else "exact")


@pytest.mark.parametrize("kernel", ["ard", "ard+load", "ard+load+local"])  # a term over 2 columns
def test_predictor_of_the_log_latency_gp_gives_the_log_normal_moments(kernel: str) -> None:
    rng = np.random.default_rng(1)
    t, rate = _rate_history(300, seed=1)
    engines = rng.integers(2, 7, t.size)
    latency = 0.01 * (1 + rate / engines / 20) * rng.lognormal(0, 0.05, t.size)
    gp = LatencyGP(kernel=kernel, iters=10).fit(latency_features(t, engines, rate * 1800),
                                                latency)
    X = latency_features(t[-24:] + 86_400, np.arange(1, 25) % 6 + 1, 360_000)
    predictor = GPPredictor.from_parts(gp.predictor_parts())
    for got, want in zip(predictor.predict(X), gp.predict(X)):
        np.testing.assert_allclose(got, want, rtol=1e-9)
    assert (predictor.predict(X)[0] > 0).all()


def test_the_predictor_module_needs_numpy_only(tmp_path) -> None:
    """Loaded by path, as MLflow loads a version's code: no keyshift, torch or pandas."""
    t, y = _rate_history(60)
    InputRateGP(kernel="ard", iters=3).fit(rate_features(t), y).save_predictor(tmp_path / "p")
    code = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("gp_predictor", {str(ROOT / "models" / "gp_predictor.py")!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
mean, std = mod.GPPredictor.load({str(tmp_path / "p")!r}).predict([[{T0}, 0.5, 3.0]])
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {{"models", "torch", "gpytorch", "pandas", "mlflow", "keyshift"}})))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.fixture(scope="module")
def parts() -> dict[str, bytes]:
    t, y = _rate_history(60)
    return InputRateGP(kernel="ard", iters=3).fit(rate_features(t), y).predictor_parts()


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickled_array_is_refused_not_run(parts, tmp_path) -> None:
    marker = tmp_path / "ran"
    arrays = dict(np.load(io.BytesIO(parts["predictor.npz"])))
    arrays["alpha"] = np.array([Payload(marker)], dtype=object)  # np.savez pickles these
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with pytest.raises(PredictorError, match="^predictor.npz: unreadable"):
        GPPredictor.from_parts({**parts, "predictor.npz": buf.getvalue()})
    assert not marker.exists()


def _with(parts: dict[str, bytes], **changes) -> dict[str, bytes]:
    desc = json.loads(parts["predictor.json"])
    desc.update(changes)
    return {**parts, "predictor.json": json.dumps(desc).encode()}


@pytest.mark.parametrize("change, message", [
    ({"format": 9}, r"^predictor.json.format: 9; this code reads format 1"),
    ({"kernels": [{"type": "matern"}]}, r"^predictor.json.kernels: .*matern"),
    ({"kernels": []}, r"^predictor.json.kernels: None"),
    ({"posterior": "approximate"}, r"^predictor.json.posterior: 'approximate'"),
    ({"noise": None}, r"^predictor: inconsistent"),
])
def test_a_bad_description_is_refused_naming_the_field(parts, change, message) -> None:
    with pytest.raises(PredictorError, match=message):
        GPPredictor.from_parts(_with(parts, **change))


def test_missing_parts_and_bad_input_are_named(parts, tmp_path) -> None:
    with pytest.raises(PredictorError, match="^predictor.json: missing"):
        GPPredictor.load(tmp_path)
    arrays = dict(np.load(io.BytesIO(parts["predictor.npz"])))
    del arrays["alpha"]
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with pytest.raises(PredictorError, match="^predictor: lacks 'alpha'"):
        GPPredictor.from_parts({**parts, "predictor.npz": buf.getvalue()})
    predictor = GPPredictor.from_parts(parts)
    with pytest.raises(PredictorError, match=r"^X: expected shape \(n, 3\)"):
        predictor.predict(np.zeros((2, 5)))
    with pytest.raises(PredictorError, match="^X: contains NaN"):
        predictor.predict([[T0, np.nan, 1.0]])
