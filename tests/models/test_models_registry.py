"""MLflow round trip on a local SQLite store: train → log → register → champion → load."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pytest

from keyshift.config import load_config
from keyshift.models.features import latency_features, rate_features
from keyshift.models.gp import KERNELS
from keyshift.models.seasonal import CYCLES
from keyshift.models.registry import (
    RegistryError,
    load_champion,
    load_version,
    model_name,
    tracking,
)
from keyshift.models.training import train_and_register

pytestmark = pytest.mark.integration


def _metrics(n: int = 96, seed: int = 0, scramble: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2026-11-20", periods=n, freq="30min", tz="UTC")
    hours = np.arange(n) / 2.0
    rate = 200 + 60 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 3, n)
    engines = rng.integers(2, 7, n)
    latency = 0.02 * rate / engines + rng.normal(0, 0.02, n)
    if scramble:  # a history whose targets have nothing to do with the features
        rate, latency = rng.permutation(rate), rng.permutation(latency)
    return pd.DataFrame({"window_start": ts, "input_rate": rate, "latency_s": latency,
                         "engines": engines, "events_in": rate * 1800, "run_id": "r1"})


@pytest.fixture()
def cfg(tmp_path: Path):
    return load_config(env={}, home=str(tmp_path / "ks"),
                       mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                               "artifact_root": str(tmp_path / "artifacts")})


def test_train_register_champion_and_load(cfg, tmp_path):
    first = train_and_register(_metrics(scramble=True), cfg, kernel="ard", iters=8)
    for which in ("input_rate", "latency"):
        m = first["models"][which]
        assert m["version"] == "1" and m["champion_moved"] and m["previous_champion"] is None
        assert set(m["metrics"]) == {"cc", "mae", "rmse", "train_s"}
    assert any((tmp_path / "artifacts").rglob("gp/weights.pt"))

    # a model of the real pattern beats a champion fitted on scrambled targets
    second = train_and_register(_metrics(), cfg, kernel="ard", iters=8)
    rate = second["models"]["input_rate"]
    assert rate["version"] == "2" and rate["champion_moved"]
    assert rate["champion_rmse"] > rate["metrics"]["rmse"]

    # the same data again ties with the champion: no new version (a copy under a new
    # number would look like a night that produced something), the alias stays
    third = train_and_register(_metrics(), cfg, kernel="ard", iters=8)
    for which in ("input_rate", "latency"):
        m = third["models"][which]
        assert m["version"] is None and not m["registered"] and not m["champion_moved"], m
        assert m["previous_champion"] == "2" and "ties v2" in m["reason"]
        assert m["champion_rmse"] == pytest.approx(m["metrics"]["rmse"], rel=1e-9)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=cfg.mlflow_tracking_uri,
                          registry_uri=cfg.mlflow_tracking_uri)
    for name in (model_name(cfg, "input_rate"), model_name(cfg, "latency")):
        assert sorted(int(v.version) for v in
                      client.search_model_versions(f"name='{name}'")) == [1, 2], name
    run = client.get_run(third["run_id"])  # the night is still on record, with the decision
    assert "ties v2" in run.data.tags["input_rate.champion"]

    champion = load_champion(cfg, "input_rate")
    assert champion.version == "2"
    ts = pd.date_range("2026-11-22", periods=4, freq="30min", tz="UTC")
    mean, std = champion.predict(rate_features(ts))
    assert mean.shape == std.shape == (4,) and (std > 0).all()
    expected = load_version(cfg, "input_rate", "2").predict(rate_features(ts))[0]
    np.testing.assert_allclose(mean, expected)
    champion.add_observations(rate_features(ts), mean)  # online path on a loaded model
    lat = load_champion(cfg, "latency")
    assert lat.predict(latency_features(ts, 3, 360_000))[0].shape == (4,)

    # the pyfunc face serves any MLflow client with mean and std columns
    import mlflow

    with tracking(cfg):
        pyfunc = mlflow.pyfunc.load_model(f"models:/{model_name(cfg, 'input_rate')}@champion")
        out = pyfunc.predict(pd.DataFrame(rate_features(ts),
                                          columns=["timestamp", "time_of_day", "day_of_week"]))
    assert list(out.columns) == ["mean", "std"]
    np.testing.assert_allclose(out["mean"].to_numpy(), expected)


def test_too_little_history_is_a_skip(cfg):
    out = train_and_register(_metrics(n=20), cfg, min_rows=48)
    assert "skipped" in out and "20" in out["skipped"]


def test_missing_model_and_alias_are_clear_errors(cfg):
    with pytest.raises(RegistryError, match="no latency forecaster of workload"):
        load_champion(cfg, "latency")
    with pytest.raises(RegistryError, match="which"):
        load_champion(cfg, "throughput")
    from mlflow import MlflowClient

    with tracking(cfg):
        MlflowClient().create_registered_model(model_name(cfg, "latency"))
    with pytest.raises(RegistryError, match="no alias 'champion'"):
        load_champion(cfg, "latency")


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/blocker/m.db", "http://127.0.0.1:9"])
def test_unreachable_store_is_a_registry_error(tmp_path, uri):
    (tmp_path / "blocker").write_text("a file where the store's folder should be")
    bad = load_config(env={}, home=str(tmp_path),
                      mlflow={"tracking_uri": uri.format(tmp=tmp_path)})
    with pytest.raises(RegistryError, match="unreachable"):
        train_and_register(_metrics(), bad, kernel="ard", iters=2)
    with pytest.raises(RegistryError, match="unreachable"):
        load_champion(bad, "input_rate")


def test_unreadable_champion_is_a_registry_error(cfg, tmp_path):
    train_and_register(_metrics(), cfg, kernel="ard", iters=3)
    for blob in (tmp_path / "artifacts").rglob("gp/weights.pt"):
        blob.write_bytes(b"not a model")
    with pytest.raises(RegistryError, match="cannot load"):
        load_champion(cfg, "input_rate")


def test_auto_kernel_logs_requested_and_chosen_kernels(cfg):
    """Regression: the nightly default kernel="auto" logged `<model>.kernel` twice (the
    request, then the choice), which MLflow refuses, so every default retrain failed."""
    import mlflow

    out = train_and_register(_metrics(), cfg, kernel="auto", iters=3)
    run = mlflow.MlflowClient(cfg.mlflow_tracking_uri).get_run(out["run_id"])
    params = run.data.params
    assert params["input_rate.kernel"] == "auto"
    assert params["input_rate.kernel_chosen"] in KERNELS
    assert params["input_rate.profile_stat_chosen"] in ("mean", "median")
    assert params["latency.profile_stat_chosen"] == "none"
    assert params["input_rate.cycle_chosen"] in CYCLES and params["latency.cycle_chosen"] == "none"
    assert params["input_rate.half_life_chosen"] == "2.0"  # the default, not a choice
    assert params["latency.half_life_chosen"] == "none"
    # the candidates the choice compared are an artifact a reviewer can open; read from the
    # local store (MLflow's download helpers leave a default store in the working directory)
    artifacts = Path(urlparse(run.info.artifact_uri).path)
    candidates = json.loads((artifacts / "input_rate" / "candidates.json").read_text())
    assert candidates["chosen"]["kernel"] == params["input_rate.kernel_chosen"]
    assert candidates["chosen"]["cycle"] == params["input_rate.cycle_chosen"]
    assert isinstance(candidates["profile_held_out_mae"], dict)
    assert set(candidates["marginal_log_likelihood"]) >= {
        k for k in candidates["held_out_mae"]}
    assert len(candidates["marginal_log_likelihood"]) > 1
    assert candidates["interval_scale"] > 0
    assert out["models"]["input_rate"]["profile_stat"] == params["input_rate.profile_stat_chosen"]

