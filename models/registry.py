"""MLflow side of the forecasters: the pyfunc wrapper, logging, the registry and the champion.

A GP is logged as an ``mlflow.pyfunc`` model whose artifact ``gp`` is the forecaster's stored
form (:meth:`keyshift.models.gp.GPForecaster.save`: a JSON description, .npz arrays and a tensors-only
state dict; an exact GP needs its training rows to predict) and whose artifact ``predictor``
is the posterior for numpy (:meth:`keyshift.models.gp.GPForecaster.predictor_parts`). Nothing in a
version is pickled and nothing is unpickled from one (issue 16 item 3): the pyfunc is logged
as code (:mod:`keyshift.models.pyfunc_gp`, with :mod:`keyshift.models.gp_predictor` packaged beside it), and
keyshift reads a version by downloading its files and reading the ``gp`` artifact with
``GPForecaster.load``, never through ``mlflow.pyfunc.load_model``. The pyfunc takes a
DataFrame of the feature columns of ``keyshift.models.features`` and returns ``mean`` and ``std``
columns, so any MLflow client can serve it with mlflow, numpy and pandas alone (issue 15
item 5; the version's requirements pin them).

Every failure to reach the store, find a model or alias, or read a model becomes one
:class:`RegistryError` with a message fit for a log line: the caller (controller, planner)
falls back to its reactive rule instead of crashing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import infer_signature

from keyshift.config import Config, config_workload
from keyshift.models.gp import GPForecaster, ModelInputError
from keyshift.workload_names import registered_name, workload_from_name

EXPERIMENT = "keyshift-forecasters"
Which = Literal["input_rate", "latency"]
WHICH: tuple[str, ...] = ("input_rate", "latency")
PYFUNC_CODE = Path(__file__).with_name("pyfunc_gp.py")
PREDICTOR_CODE = Path(__file__).with_name("gp_predictor.py")


class RegistryError(RuntimeError):
    """The tracking store, a registered model, its alias or its artifact is not usable."""


class LoadedModel:
    """A loaded registry version: ``predict(X) -> (mean, std)`` plus ``add_observations``
    for the online updates between retrains (paper step 2)."""

    def __init__(self, gp: GPForecaster, name: str, version: str) -> None:
        self.gp = gp
        self.name = name
        self.version = version

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.gp.feature_names

    def predict(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.gp.predict(X)

    def add_observations(self, X: Any, y: Any) -> LoadedModel:
        self.gp.add_observations(X, y)
        return self

    def __repr__(self) -> str:
        return f"LoadedModel({self.name!r}, version={self.version})"


WORKLOAD_TAG = "workload"
"""The tag each version carries: the workload its history was, checked again at each load."""


def base_name(cfg: Config, which: str) -> str:
    if which not in WHICH:
        raise RegistryError(f"which: {which!r} is not one of {WHICH}")
    return cfg.mlflow.input_rate_model if which == "input_rate" else cfg.mlflow.latency_model


def model_name(cfg: Config, which: str, workload: str | None = None) -> str:
    """The registered model of ``which`` for ``workload`` (default: ``cfg``'s, see
    :func:`keyshift.config.config_workload`): one per workload, so a job never finds another
    workload's champion under its own name."""
    return registered_name(base_name(cfg, which), workload or config_workload(cfg))


@contextlib.contextmanager
def tracking(cfg: Config) -> Iterator[MlflowClient]:
    """Point MLflow at ``cfg``'s store for the block and probe it; restore the previous URIs.

    The probe turns "the store is down" into a RegistryError at once, instead of an HTTP
    retry loop or an SQLAlchemy stack trace halfway through a training run.
    """
    uri = cfg.mlflow_tracking_uri
    if uri.startswith("sqlite:///") and not cfg.mlflow.tracking_uri:
        cfg.home_path.mkdir(parents=True, exist_ok=True)  # the default store lives in home
    previous = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    saved_env = {k: os.environ.get(k) for k in
                 ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    try:
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = saved_env[
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES"] or "0"
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = saved_env["MLFLOW_HTTP_REQUEST_TIMEOUT"] or "10"
        try:
            mlflow.set_tracking_uri(uri)
            mlflow.set_registry_uri(uri)
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            client.search_experiments(max_results=1)
        except Exception as exc:  # any driver/HTTP error means the same thing to the caller
            raise RegistryError(f"MLflow tracking store {uri} is unreachable: "
                                f"{_first_line(exc)}") from exc
        yield client
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        mlflow.set_tracking_uri(previous[0])
        mlflow.set_registry_uri(previous[1])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def ensure_experiment(client: MlflowClient, cfg: Config, name: str = EXPERIMENT) -> str:
    """The experiment's id; a new experiment's artifacts go where every reader reaches them.

    With a tracking *server* (http/https) and no ``mlflow.artifact_root``, the server
    chooses (with ``--serve-artifacts``: ``mlflow-artifacts:/``, uploads and downloads
    proxied by the server): a local folder would exist only on the host that trained, and
    the stream job or a task on another host could not load the champion. A local store
    keeps them under ``cfg.mlflow_artifact_root``; a configured root with a scheme
    (``s3://``, ``mlflow-artifacts:/``) is passed as it is."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    configured = cfg.mlflow.artifact_root
    if len(urlparse(configured).scheme) > 1:  # a URI, not a path (nor C:)
        return client.create_experiment(name, artifact_location=configured)
    if not configured and urlparse(cfg.mlflow_tracking_uri).scheme in ("http", "https"):
        return client.create_experiment(name)
    root = cfg.mlflow_artifact_root
    root.mkdir(parents=True, exist_ok=True)
    return client.create_experiment(name, artifact_location=root.as_uri())


def feature_frame(gp: GPForecaster, X: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(np.asarray(X, dtype=np.float64), columns=list(gp.feature_names))


def serving_requirements() -> list[str]:
    """What the pyfunc needs, pinned to the versions that logged it: the predictor is numpy
    (:mod:`keyshift.models.gp_predictor`), the pyfunc's frames pandas; no torch, no keyshift."""
    return [f"mlflow=={mlflow.__version__}", f"numpy=={np.__version__}",
            f"pandas=={pd.__version__}"]


def log_forecaster(gp: GPForecaster, artifact_name: str, registered_name: str,
                   X_example: np.ndarray) -> str:
    """Log ``gp`` in the active run with a signature, register it; return the new version.

    The version carries two stored forms: ``gp`` (keyshift reloads it and keeps
    conditioning online) and ``predictor`` (what the pyfunc serves with, numpy only), plus
    the predictor's module as code, so that it loads where only its pinned requirements are
    installed."""
    example = feature_frame(gp, X_example[:5])
    mean, std = gp.predict(example.to_numpy())
    signature = infer_signature(example, pd.DataFrame({"mean": mean, "std": std}))
    with tempfile.TemporaryDirectory() as tmp:
        info = mlflow.pyfunc.log_model(
            name=artifact_name,
            python_model=str(PYFUNC_CODE),
            artifacts={"gp": str(gp.save(Path(tmp) / "gp")),
                       "predictor": str(gp.save_predictor(Path(tmp) / "predictor"))},
            code_paths=[str(PREDICTOR_CODE)],
            signature=signature,
            input_example=example,
            registered_model_name=registered_name,
            pip_requirements=serving_requirements(),
        )
    if info.registered_model_version is None:
        raise RegistryError(f"{registered_name}: registration returned no version")
    return str(info.registered_model_version)


def alias_version(client: MlflowClient, name: str, alias: str) -> str | None:
    """The version behind ``name@alias``, or None when the model or the alias is missing."""
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def _load(uri: str, name: str, version: str) -> LoadedModel:
    """Download the version's files and read its ``gp`` artifact: no pickle of the version
    is ever loaded (not the pyfunc's, not the model's), so a crafted one is refused, unrun."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp))
        except Exception as exc:
            raise RegistryError(f"cannot load {uri}: {_first_line(exc)}") from exc
        try:
            gp = GPForecaster.load(local / "artifacts" / "gp")
        except ModelInputError as exc:
            raise RegistryError(f"cannot load {uri}: {exc}") from exc
    return LoadedModel(gp, name, version)


def load_version(cfg: Config, which: Which, version: str,
                 workload: str | None = None) -> LoadedModel:
    name = model_name(cfg, which, workload)
    with tracking(cfg):
        return _load(f"models:/{name}/{version}", name, str(version))


def registered_workloads(client: MlflowClient, cfg: Config, which: str) -> list[str]:
    """The workloads the registry holds a model of ``which`` for, sorted."""
    base = base_name(cfg, which)
    try:
        found = client.search_registered_models(filter_string=f"name LIKE '{base}.%'")
    except MlflowException:
        return []
    return sorted(w for m in found if (w := workload_from_name(base, m.name)) is not None)


def _champion_version(client: MlflowClient, cfg: Config, which: str) -> tuple[str, str]:
    """The champion's (registered name, version) of ``cfg``'s workload. Another workload's
    champion is never taken in its place: the error names the ones there are and how to
    follow one of them on purpose (``mlflow.workload``)."""
    alias, workload = cfg.mlflow.alias, config_workload(cfg)
    name = model_name(cfg, which)
    try:
        client.get_registered_model(name)
    except MlflowException:
        others = registered_workloads(client, cfg, which)
        hint = (f"; the registry holds champions of {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''}, not followed: another workload's "
                "forecast is not this one's (set mlflow.workload to follow one on purpose)"
                if others else "")
        raise RegistryError(f"no {which} forecaster of workload {workload!r} (registered model "
                            f"{name!r}) at {cfg.mlflow_tracking_uri}: run `keyshift job "
                            f"retrain` on its history first{hint}") from None
    version = alias_version(client, name, alias)
    if version is None:
        raise RegistryError(f"registered model {name!r} has no alias {alias!r}")
    try:
        trained_on = client.get_model_version(name, version).tags.get(WORKLOAD_TAG)
    except MlflowException as exc:
        raise RegistryError(f"{name} v{version}: {_first_line(exc)}") from None
    if trained_on is not None and trained_on != workload:
        # the alias was moved by hand onto a version of another workload's history
        raise RegistryError(f"{name}@{alias} is v{version}, trained on workload "
                            f"{trained_on!r}, not {workload!r}: not followed")
    return name, version


def load_champion(cfg: Config, which: Which) -> LoadedModel:
    """The version of ``which`` behind ``cfg.mlflow.alias`` (default ``champion``).

    Raises RegistryError when the store is unreachable, the model is not registered, the
    alias is not set, or the artifact cannot be read — the caller falls back.
    """
    with tracking(cfg) as client:
        name, version = _champion_version(client, cfg, which)
        # the version just read, not the alias again: the alias may move in between, and
        # the label of every decision must name the version that made it
        return _load(f"models:/{name}/{version}", name, version)


def champion_versions(cfg: Config) -> tuple[str, ...]:
    """The versions behind the alias, in :data:`WHICH` order, without downloading a model:
    the running job's cheap look at whether the champions moved (the same RegistryError as
    :func:`load_champion` when it cannot tell)."""
    with tracking(cfg) as client:
        return tuple(_champion_version(client, cfg, w)[1] for w in WHICH)
