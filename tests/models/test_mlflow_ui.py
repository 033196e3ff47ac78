"""Issue 46 item 11: the model half of a user's day: MLflow's UI on the project's store, no
red ERROR lines from a green retrain under Airflow, no MLflow telemetry."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from keyshift.cli import main


def test_mlflow_ui_serves_the_configured_store_on_localhost(ks_home, capsys):
    assert main(["mlflow", "ui", "--print", "--port", "5123"]) == 0
    line = capsys.readouterr().out.strip()
    assert f"--backend-store-uri sqlite:///{ks_home}/mlflow.db" in line
    assert f"--default-artifact-root file://{ks_home}/mlartifacts" in line
    assert line.endswith("--host 127.0.0.1 --port 5123")


def test_mlflow_ui_refuses_a_port_in_use_or_out_of_range(ks_home, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["mlflow", "ui", "--port", str(port)]) == 2
    assert f"--port: {port} is in use" in capsys.readouterr().err
    assert main(["mlflow", "ui", "--port", "80"]) == 2


_LOG_LINE = ("import logging, mlflow; logging.getLogger('mlflow.store.model_registry')"
             ".info('Successfully registered model x.')")


@pytest.mark.parametrize("configured", [True, False])
def test_mlflow_info_lines_reach_airflow_logging_not_stderr(tmp_path, configured):
    """Airflow logs a task's stderr as ERROR. MLflow configured its own stderr handler, so a
    green retrain showed red 'Successfully registered model' lines; the Airflow environment
    keyshift sets leaves MLflow's loggers to the task's logging."""
    from keyshift.config import load_config
    from keyshift.jobs.commands.airflow import airflow_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    if configured:
        cfg = load_config(env={}, home=str(tmp_path / "ks"))
        env.update({k: v for k, v in airflow_env(cfg).items() if k.startswith("MLFLOW_")})
    out = subprocess.run([sys.executable, "-c", _LOG_LINE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("Successfully registered" in out.stderr) is (not configured)


def test_mlflow_telemetry_is_off_once_the_model_layer_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    code = ("import keyshift.models, os; from mlflow.telemetry.utils import is_telemetry_disabled;"
            " print(os.environ['MLFLOW_DISABLE_TELEMETRY'], is_telemetry_disabled())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["true", "True"], out.stderr
