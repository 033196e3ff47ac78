"""Issue 43 item 2: each config key is declared once, in keyshift/config.py's models;
keyshift/defaults.toml and docs/config.md are rendered from them and must not drift."""

import tomllib
from pathlib import Path

import pytest
from pydantic import Field

from keyshift.commands import config_reference
from keyshift.config import Config, KafkaConfig, load_config
from keyshift.commands.config_reference import (
    REGENERATE,
    bounds,
    env_var,
    render_config_md,
    render_defaults_toml,
    targets,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["keyshift/defaults.toml", "docs/config.md"])
def test_committed_files_are_what_the_models_render(name):
    path = REPO / name
    want = targets(REPO)[path]
    have = path.read_text() if path.is_file() else ""
    assert have == want, f"{name} differs from keyshift/config.py's models: run `{REGENERATE}`"


def test_generated_defaults_load_to_the_models_own_defaults(tmp_path):
    """The rendered file, as a config's data, gives the very Config the models default to
    (types too: a float key's default is a float), and so does load_config with nothing set."""
    home = {"home": str(tmp_path)}  # "" would be found from the current directory
    from_file = Config.model_validate(tomllib.loads(render_defaults_toml()) | home)
    from_models = Config.model_validate(home)
    assert from_file == from_models
    assert from_file.model_dump_json() == from_models.model_dump_json()
    loaded = load_config(env={"KEYSHIFT_HOME": str(tmp_path)})
    assert loaded.model_dump_json() == from_models.model_dump_json()


def test_every_key_is_in_both_listings_with_its_variable():
    toml = tomllib.loads(render_defaults_toml())
    md = render_config_md()
    for section, field in Config.model_fields.items():
        keys = getattr(field.annotation, "model_fields", None)
        if keys is None:
            assert section in toml and f"`{env_var('', section)}`" in md
            continue
        assert set(toml[section]) == set(keys), section
        assert f"## [{section}]" in md
        for key in keys:
            assert f"`{env_var(section, key)}`" in md
    assert env_var("kafka", "sasl_password") == "KEYSHIFT_KAFKA__SASL_PASSWORD"
    assert env_var("", "home") == "KEYSHIFT_HOME"


def test_bounds_come_from_the_declaration():
    fields = KafkaConfig.model_fields
    assert bounds(fields["port"]) == "≥ 1, ≤ 65535"
    assert bounds(fields["security_protocol"]) == \
        "one of `PLAINTEXT`, `SASL_PLAINTEXT`, `SASL_SSL`, `SSL`"
    assert bounds(fields["topic"]) == "length ≥ 1, matches `^[A-Za-z0-9._-]+$`"
    assert bounds(fields["host"]) == ""


def test_a_key_without_a_description_is_refused():
    with pytest.raises(ValueError, match="kafka.nope has no description"):
        config_reference._description("kafka", "nope", Field(1))


def test_the_command_names_stale_files_and_rewrites_them(tmp_path, monkeypatch, capsys):
    (tmp_path / "keyshift").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "keyshift" / "defaults.toml").write_text("stale\n")
    monkeypatch.setattr(config_reference, "targets", lambda: targets(tmp_path))
    assert config_reference.main([]) == 1
    err = capsys.readouterr().err
    assert "defaults.toml differs" in err and "config.md differs" in err and REGENERATE in err
    assert config_reference.main(["--write"]) == 0
    assert config_reference.main([]) == 0
    assert (tmp_path / "docs" / "config.md").read_text() == render_config_md()
