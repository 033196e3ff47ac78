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


def test_standalone_says_dags_start_paused_and_how_to_unpause_each() -> None:
    """Airflow creates DAGs paused; a triggered run then sits queued with no hint. The
    ready message says so, with an unpause command for every DAG the dags/ folder holds."""
    import re
    from pathlib import Path

    from keyshift.jobs.commands.airflow import DAG_IDS, dags_folder, paused_hint

    declared = {m for path in Path(dags_folder()).glob("*.py")
                for m in re.findall(r'dag_id="(\w+)"', path.read_text())}
    assert set(DAG_IDS) == declared
    hint = paused_hint()
    assert "paused" in hint and "queued" in hint
    for dag_id in declared:
        assert f"airflow dags unpause {dag_id}" in hint
