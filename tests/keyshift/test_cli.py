import subprocess
import sys

import pytest

from keyshift.cli import main


def test_help_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in ("rebalance", "simulate", "demo", "kafka", "forecast", "airflow"):
        assert name in out


def test_unknown_command_exits_2(capsys):
    assert _run(["no-such-command"]).returncode == 2


def test_config_command_reports_bad_value_in_one_line():
    r = _run(["config"], env_extra={"KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "-3"})
    assert r.returncode == 2
    assert "spark.shuffle_partitions" in r.stderr
    assert "Traceback" not in r.stderr


def _run(args, env_extra=None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "keyshift.cli", *args], capture_output=True, text=True, env=env
    )


def test_version_names_the_release_and_the_operator_api(capsys):
    import tomllib
    from pathlib import Path

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    release = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                            .read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"keyshift {release} (Operator API 1)"
