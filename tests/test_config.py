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
