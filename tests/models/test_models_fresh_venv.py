"""A registered version is self-contained (issue 15 item 5): in a new virtualenv holding only
what the version's requirements.txt pins (mlflow, numpy, pandas), with neither keyshift's
``models`` package nor torch importable, ``mlflow.pyfunc.load_model`` of its registry URI
predicts what keyshift predicts in-process.

The venv is made and filled by uv (a dev dependency): the same pins in about 1 s with its
cache warm, 7 s cold, where pip took a minute of CPU resolving, unpacking and compiling
(measured on this 2-core machine). Nothing of the checkout's environment is reused, so the
venv really is new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

_SERVE = r"""
import importlib.util, json, sys
unwanted = [m for m in ("models", "torch", "gpytorch", "keyshift")
            if importlib.util.find_spec(m) is not None]
import mlflow, pandas as pd
requests = json.load(open(sys.argv[1]))
out = {"importable": unwanted}
for uri, frame in requests.items():
    served = mlflow.pyfunc.load_model(uri).predict(pd.DataFrame(frame))
    out[uri] = {c: served[c].tolist() for c in served.columns}
out["loaded_after"] = sorted({m.split(".")[0] for m in sys.modules} & {"models", "torch"})
print("SERVED " + json.dumps(out))
"""


def test_a_registered_version_serves_in_a_fresh_venv_with_its_pins_only(tmp_path) -> None:
    import mlflow
    from test_models_registry import _metrics

    from keyshift.config import load_config
    from keyshift.models.features import (
        LATENCY_FEATURES,
        RATE_FEATURES,
        latency_features,
        rate_features,
    )
    from keyshift.models.registry import load_version, tracking
    from keyshift.models.training import train_and_register

    cfg = load_config(env={}, home=str(tmp_path / "ks"),
                      mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                              "artifact_root": str(tmp_path / "artifacts")})
    out = train_and_register(_metrics(), cfg, kernel="ard+daily", iters=5)
    ts = pd.date_range("2026-11-22", periods=6, freq="30min", tz="UTC")
    features = {"input_rate": (rate_features(ts), RATE_FEATURES),
                "latency": (latency_features(ts, 4, 300_000), LATENCY_FEATURES)}
    requests, expected = {}, {}
    for which, (X, names) in features.items():
        model = out["models"][which]
        uri = f"models:/{model['name']}/{model['version']}"
        requests[uri] = pd.DataFrame(X, columns=list(names)).to_dict("list")
        expected[uri] = load_version(cfg, which, model["version"]).predict(X)
    with tracking(cfg):
        reqs = Path(mlflow.pyfunc.get_model_dependencies(next(iter(requests))))
    pins = [ln.strip() for ln in reqs.read_text().splitlines() if ln.strip()]
    assert sorted(p.split("==")[0] for p in pins) == ["mlflow", "numpy", "pandas"], pins
    assert all(p.count("==") == 1 for p in pins), pins

    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   env=env)
    python = str(venv / "bin" / "python")
    install = subprocess.run([*uv, "pip", "install", "--quiet", "--python", python,
                              "-r", str(reqs)],
                             env=env, capture_output=True, text=True, timeout=900, check=False)
    assert install.returncode == 0, install.stderr[-3000:]

    (tmp_path / "requests.json").write_text(json.dumps(requests))
    workdir = tmp_path / "elsewhere"  # not the checkout: its models/ must not be on sys.path
    workdir.mkdir()
    served = subprocess.run(
        [python, "-c", _SERVE, str(tmp_path / "requests.json")], cwd=workdir, timeout=300,
        env={**env, "MLFLOW_TRACKING_URI": cfg.mlflow_tracking_uri,
             "MLFLOW_REGISTRY_URI": cfg.mlflow_tracking_uri},
        capture_output=True, text=True, check=False)
    assert served.returncode == 0, served.stderr[-3000:]
    line = next(ln for ln in served.stdout.splitlines() if ln.startswith("SERVED "))
    result = json.loads(line[len("SERVED "):])
    assert result["importable"] == [] and result["loaded_after"] == []
    for uri, (mean, std) in expected.items():
        np.testing.assert_allclose(result[uri]["mean"], mean, rtol=1e-9)
        np.testing.assert_allclose(result[uri]["std"], std, rtol=1e-9)
