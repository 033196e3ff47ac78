"""The compose files parse, name the services the deployment needs, and configure every
keyshift process with keys the config loader accepts (the same keys as local defaults)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from keyshift.config import ConfigError, load_config

DOCKER = Path(__file__).resolve().parents[1] / "docker"
_VAR = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


def _compose(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${NAME:-default} substitution, enough to feed the config loader."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(2) or ""), str(value))


def _keyshift_env(service: dict, env: dict[str, str] | None = None) -> dict[str, str]:
    raw = service.get("environment") or {}
    return {k: _interpolate(v, env or {}) for k, v in raw.items() if k.startswith("KEYSHIFT_")}


@pytest.fixture(scope="module")
def compose() -> dict:
    return _compose("docker-compose.yml")


def test_services_of_the_deployment_are_present(compose: dict) -> None:
    services = set(compose["services"])
    for needed in ("kafka", "spark-master", "spark-worker-1", "spark-worker-2", "mlflow",
                   "postgres", "airflow-apiserver", "airflow-scheduler",
                   "airflow-dag-processor", "keyshift-stream"):
        assert needed in services


def test_every_keyshift_variable_is_a_valid_config_key(compose: dict) -> None:
    for name, service in compose["services"].items():
        env = _keyshift_env(service, {"SPARK_MASTER_HOST": "spark-master"})
        if not env:
            continue
        cfg = load_config(env=env)  # unknown or out-of-range keys raise ConfigError
        assert cfg.kafka.host == "kafka", name
        assert cfg.spark.master == "spark://spark-master:7077", name
        assert cfg.mlflow_tracking_uri == "http://mlflow:5000", name
        assert str(cfg.warehouse_path) == "/data/keyshift/warehouse", name


def test_code_running_services_get_the_keys_the_code_reads(compose: dict) -> None:
    needed = {"KEYSHIFT_KAFKA__HOST", "KEYSHIFT_SPARK__MASTER", "KEYSHIFT_MLFLOW__TRACKING_URI",
              "KEYSHIFT_WAREHOUSE__ROOT", "KEYSHIFT_HOME"}
    for name in ("keyshift-stream", "airflow-scheduler", "airflow-apiserver", "spark-worker-1",
                 "spark-worker-2", "spark-master"):
        assert needed <= set(compose["services"][name]["environment"]), name


def test_airflow_services_use_the_repo_dags_and_postgres(compose: dict) -> None:
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-init"):
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/keyshift/dags"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"


def test_mlflow_has_a_database_backend(compose: dict) -> None:
    cmd = compose["services"]["mlflow"]["command"]
    uri = cmd[cmd.index("--backend-store-uri") + 1]
    assert uri.startswith("postgresql")
    assert "postgres" in compose["services"]["mlflow"]["depends_on"]


def test_worker_file_joins_the_master_with_valid_keys() -> None:
    worker = _compose("docker-compose.worker.yml")["services"]["spark-worker"]
    env = _keyshift_env(worker, {"SPARK_MASTER_HOST": "10.0.0.5"})
    assert load_config(env=env).spark.master == "spark://10.0.0.5:7077"


def test_a_misspelt_key_would_be_caught() -> None:
    """The check above can fail: the loader rejects a key that does not exist."""
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(env={"KEYSHIFT_SPARK__MASTERS": "spark://x:7077"})


def test_dockerfile_copies_every_package_the_services_import() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    for pkg in ("keyshift", "models", "streaming", "jobs", "dags"):
        assert f"COPY {pkg} ./{pkg}" in text


def test_keyshift_commands_in_the_compose_file_parse_with_the_real_cli(compose: dict) -> None:
    from keyshift.cli import build_parser

    found = 0
    for name, service in compose["services"].items():
        cmd = service.get("command")
        if isinstance(cmd, list) and cmd and cmd[0] == "keyshift":
            args = build_parser(cmd[1]).parse_args(cmd[1:])
            assert callable(args.func), name
            found += 1
    assert found >= 1


def test_the_stream_service_runs_the_balancer_with_valid_arguments(compose: dict) -> None:
    """The deployed speed layer is ``keyshift run`` (the balancer), not ingestion only, and
    its arguments are ones the command accepts."""
    import argparse
    import re

    from streaming.commands.run import add_arguments, options_from

    cmd = compose["services"]["keyshift-stream"]["command"]
    assert cmd[:2] == ["keyshift", "run"]
    args = [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", a) for a in cmd[2:]]  # compose defaults
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(args)
    env = _keyshift_env(compose["services"]["keyshift-stream"], {"SPARK_MASTER_HOST": "x"})
    opts = options_from(ns, load_config(env=env))
    assert opts.run_id == "prod" and opts.policy == "dlb-h" and opts.app == "wordcount"
