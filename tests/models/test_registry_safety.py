"""Issue 16 item 3: nothing is unpickled from the model registry.

A crafted pickle — an object whose ``__reduce__`` creates a marker file when unpickled — is
put where a stored GP's parts live (the weights, the arrays, an old-format blob, a registered
version's artifact). Each time the model is refused with a one-line error and the marker
file does not appear. The payload itself is checked to work (plain ``pickle.loads`` creates
its marker), so the tests would fail if the loader unpickled it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from keyshift.models.features import rate_features
from keyshift.models.gp import STORED_FORMAT, GPForecaster, InputRateGP, ModelInputError


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the file's existence proves code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save({"covar_module.raw_outputscale": Payload(marker)}, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def gp() -> InputRateGP:
    t = 1_700_000_000.0 + np.arange(60) * 600.0
    y = 100 + 10 * np.sin(2 * np.pi * t / 86_400)
    return InputRateGP(kernel="ard", iters=3).fit(rate_features(t), y)


def test_the_payload_runs_code_when_unpickled(tmp_path):
    marker = tmp_path / "proof"
    torch.load(io.BytesIO(crafted(marker)), weights_only=False)
    assert marker.exists()


def test_crafted_weights_are_refused_not_run(gp, tmp_path):
    marker = tmp_path / "ran"
    parts = gp.to_parts()
    for payload in (crafted(marker), pickle.dumps(Payload(marker))):
        parts["weights.pt"] = payload
        with pytest.raises(ModelInputError, match="^weights.pt: refused"):
            GPForecaster.from_parts(parts)
    assert not marker.exists()


def test_pickled_arrays_are_refused_not_run(gp, tmp_path):
    marker = tmp_path / "ran"
    parts = gp.to_parts()
    buf = io.BytesIO()
    arrays = dict(np.load(io.BytesIO(parts["arrays.npz"])))
    arrays["X"] = np.array([Payload(marker)], dtype=object)  # np.savez pickles object arrays
    np.savez(buf, **arrays)
    parts["arrays.npz"] = buf.getvalue()
    with pytest.raises(ModelInputError, match="^arrays.npz: unreadable"):
        GPForecaster.from_parts(parts)
    assert not marker.exists()


def test_old_pickled_blob_is_refused_unread_with_retrain_it(gp, tmp_path):
    """Format 2 was one ``torch.save`` blob read with weights_only=False."""
    marker = tmp_path / "ran"
    buf = io.BytesIO()
    torch.save({"format": 2, "class": "InputRateGP", "state_dict": Payload(marker)}, buf)
    with pytest.raises(ModelInputError, match=r"^model: .*format 2 or older.*: retrain it$"):
        GPForecaster.from_bytes(buf.getvalue())
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "gp.pt").write_bytes(buf.getvalue())
    with pytest.raises(ModelInputError, match="retrain it$"):
        GPForecaster.load(tmp_path / "old" / "gp")
    assert not marker.exists()


def test_stored_form_round_trips_and_names_a_bad_field(gp, tmp_path):
    clone = GPForecaster.load(gp.save(tmp_path / "gp"))
    X = rate_features(1_700_100_000.0 + np.arange(3) * 600.0)
    np.testing.assert_allclose(clone.predict(X)[0], gp.predict(X)[0])
    assert sorted(p.name for p in (tmp_path / "gp").iterdir()) == [
        "arrays.npz", "model.json", "weights.pt"]
    parts = gp.to_parts()
    parts["model.json"] = parts["model.json"].replace(
        f'"format": {STORED_FORMAT}'.encode(), b'"format": 7')
    with pytest.raises(ModelInputError, match="^model: .*format 7.*retrain it"):
        GPForecaster.from_parts(parts)
    parts = gp.to_parts()
    parts["model.json"] = parts["model.json"].replace(b'"kernel_": "ard"', b'"kernel_": "x"')
    with pytest.raises(ModelInputError, match="^model.json.kernel_:"):
        GPForecaster.from_parts(parts)


@pytest.mark.integration
def test_registry_refuses_a_crafted_artifact_without_running_it(tmp_path):
    import pandas as pd

    from keyshift.config import load_config
    from keyshift.models.registry import RegistryError, load_champion
    from keyshift.models.training import train_and_register

    cfg = load_config(env={}, home=str(tmp_path / "ks"),
                      mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                              "artifact_root": str(tmp_path / "artifacts")})
    n = 60
    ts = pd.date_range("2026-11-20", periods=n, freq="30min", tz="UTC")
    rate = 200 + 60 * np.sin(2 * np.pi * np.arange(n) / 48)
    metrics = pd.DataFrame({"window_start": ts, "input_rate": rate, "latency_s": 0.01 + rate / 1e4,
                            "engines": 3, "events_in": rate * 1800, "run_id": "r1"})
    train_and_register(metrics, cfg, kernel="ard", iters=3)
    assert load_champion(cfg, "input_rate").version == "1"
    artifacts = tmp_path / "artifacts"
    assert not list(artifacts.rglob("*.pkl"))  # the pyfunc is logged as code, not pickled
    marker = tmp_path / "ran"
    weights = list(artifacts.rglob("gp/weights.pt"))
    assert weights
    for path in weights:
        path.write_bytes(crafted(marker))
        (path.parent.parent.parent / "python_model.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(RegistryError, match="cannot load .*weights.pt: refused") as err:
        load_champion(cfg, "input_rate")
    assert "\n" not in str(err.value)
    assert not marker.exists()
