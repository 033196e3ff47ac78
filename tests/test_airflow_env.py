"""``keyshift airflow``'s environment: the log-server ports come from [airflow] (pure)."""

from __future__ import annotations

from keyshift.config import load_config


def test_log_server_ports_go_to_airflow_from_the_config(tmp_path) -> None:
    from keyshift.jobs.commands.airflow import airflow_env

    env = airflow_env(load_config(env={"KEYSHIFT_HOME": str(tmp_path)}))
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "8793"  # Airflow's own defaults
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "8794"
    cfg = load_config(env={"KEYSHIFT_HOME": str(tmp_path),
                           "KEYSHIFT_AIRFLOW__WORKER_LOG_SERVER_PORT": "18793",
                           "KEYSHIFT_AIRFLOW__TRIGGER_LOG_SERVER_PORT": "18794"})
    env = airflow_env(cfg, port=18080)
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "18793"
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "18794"
    assert env["AIRFLOW__API__PORT"] == "18080"
