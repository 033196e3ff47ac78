import pytest

from keyshift.config import ConfigError, load_config


def test_defaults_load_and_resolve(tmp_path):
    cfg = load_config(env={"KEYSHIFT_HOME": str(tmp_path)})
    assert cfg.groups.count == 4096
    assert cfg.warehouse_path == tmp_path / "warehouse"
    assert cfg.mlflow_tracking_uri.startswith("sqlite:///")
    assert cfg.kafka.bootstrap == "127.0.0.1:9092"


def test_env_override_is_typed():
    cfg = load_config(env={"KEYSHIFT_KAFKA__PORT": "19092", "KEYSHIFT_CONTROLLER__THETA": "7.5"})
    assert cfg.kafka.port == 19092 and cfg.controller.theta == 7.5


def test_file_then_env(tmp_path):
    f = tmp_path / "k.toml"
    f.write_text('[engines]\ninitial = 8\nmax = 32\n[kafka]\ntopic = "t1"\n')
    cfg = load_config(f, env={"KEYSHIFT_KAFKA__TOPIC": "t2"})
    assert cfg.engines.initial == 8 and cfg.kafka.topic == "t2"


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"KEYSHIFT_KAFKA__PORT": "70000"}, "kafka.port"),
        ({"KEYSHIFT_KAFKA__PORT": "abc"}, "kafka.port"),
        ({"KEYSHIFT_GROUPS__COUNT": "0"}, "groups.count"),
        ({"KEYSHIFT_CONTROLLER__POLICY": "magic"}, "controller.policy"),
        ({"KEYSHIFT_ENGINES__INITIAL": "40", "KEYSHIFT_ENGINES__MAX": "8"}, "engines"),
        ({"KEYSHIFT_KAFKA__NOPE": "1"}, "kafka.nope: unknown key"),
    ],
)
def test_bad_values_name_the_key(env, needle):
    with pytest.raises(ConfigError) as exc:
        load_config(env=env)
    assert needle in str(exc.value)


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\nport=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})


def test_an_unknown_or_secret_key_never_echoes_its_value():
    """Issue 26 item 5: a misspelled KEYSHIFT_KAFKA__SASL_PASSWD is as secret as the password."""
    for env in ({"KEYSHIFT_KAFKA__SASL_PASSWD": "hunter2-secret"},
                {"KEYSHIFT_KAFKA__API_TOKEN": "hunter2-secret"},
                {"KEYSHIFT_NOPE": "hunter2-secret"},
                {"KEYSHIFT_KAFKA__SSL_KEYFILE": "hunter2-secret", "KEYSHIFT_KAFKA__NOPE": "x"}):
        with pytest.raises(ConfigError) as exc:
            load_config(env=env)
        assert "hunter2" not in str(exc.value) and "(got" not in str(exc.value)
    with pytest.raises(ConfigError, match="kafka.sasl_passwd: unknown key$"):
        load_config(env={"KEYSHIFT_KAFKA__SASL_PASSWD": "secret"})
    # a known key whose name is not secret still shows what it got
    with pytest.raises(ConfigError, match=r"kafka.port: .*\(got 'abc'\)"):
        load_config(env={"KEYSHIFT_KAFKA__PORT": "abc"})


def test_keyshift_config_does_not_print_a_misspelled_password(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSHIFT_")}
    env |= {"KEYSHIFT_KAFKA__SASL_PASSWD": "secret", "KEYSHIFT_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "keyshift.cli", "config"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "kafka.sasl_passwd: unknown key" in out.stderr
    assert "secret" not in out.stderr + out.stdout


def test_airflow_log_server_ports_are_config_and_must_differ():
    cfg = load_config(env={"KEYSHIFT_AIRFLOW__WORKER_LOG_SERVER_PORT": "18793"})
    assert (cfg.airflow.worker_log_server_port, cfg.airflow.trigger_log_server_port) == \
        (18793, 8794)
    with pytest.raises(ConfigError, match="airflow.trigger_log_server_port"):
        load_config(env={"KEYSHIFT_AIRFLOW__TRIGGER_LOG_SERVER_PORT": "0"})
    with pytest.raises(ConfigError, match="must differ"):
        load_config(env={"KEYSHIFT_AIRFLOW__TRIGGER_LOG_SERVER_PORT": "8793"})


def test_the_models_cycle_is_named_or_refused_with_the_syntax() -> None:
    assert load_config(env={}, models={"cycle": "5m|none"}).models.cycle == "5m|none"
    assert load_config(env={}).models.cycle == "auto"
    with pytest.raises(ConfigError, match=r"models.cycle.*'hourly'.*a period"):
        load_config(env={}, models={"cycle": "hourly"})
