"""Options shared by every command: help text everywhere, ``--config`` before or after the
command, the one JSON-output convention (docs/platform.md, "Options every command shares")."""

from __future__ import annotations

import argparse
import json

import pytest

from keyshift.cli import CONFIG_HELP, _commands, _parsers, build_parser, main

COMMANDS = sorted(_commands())
NO_CONFIG = {"rebalance", "split", "plan-engines", "forecast"}


def _leaves(command: str) -> list[tuple[str, argparse.ArgumentParser]]:
    parser = build_parser(command)
    return [(p.prog, p) for p in _parsers(parser)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_every_command_has_help(command: str) -> None:
    missing = []
    for prog, parser in _leaves(command):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if action.help == argparse.SUPPRESS:  # a hidden alias, on purpose
                continue
            if not (action.help or "").strip():
                missing.append(f"{prog}: {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


@pytest.mark.parametrize("command", COMMANDS)
def test_config_is_on_every_parser_of_a_command_that_reads_it(command: str) -> None:
    for prog, parser in _leaves(command):
        action = parser._option_string_actions.get("--config")
        if command in NO_CONFIG and prog != "keyshift":
            assert action is None, prog
            continue
        assert action is not None, prog
        assert action.help.startswith(CONFIG_HELP), prog
        assert "$KEYSHIFT_CONFIG, else the project's keyshift.toml, else built-in" in action.help


@pytest.mark.parametrize("argv", [
    ["--config", "A.toml", "kafka", "topic", "create", "t"],
    ["kafka", "--config", "A.toml", "topic", "create", "t"],
    ["kafka", "topic", "create", "t", "--config", "A.toml"],
    ["--config", "B.toml", "kafka", "topic", "create", "t", "--config", "A.toml"],  # last wins
])
def test_config_is_accepted_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser("kafka").parse_args(argv).config == "A.toml"


@pytest.mark.parametrize("argv", [
    ["--config", "A.toml", "job", "history"],
    ["job", "history", "--config", "A.toml"],
    ["--config", "A.toml", "airflow", "env"],
    ["airflow", "env", "--config", "A.toml"],
    ["--config", "A.toml", "status"],
    ["status", "--config", "A.toml"],
    ["--config", "A.toml", "simulate", "--quick"],
])
def test_config_reaches_the_command_either_way(argv: list[str]) -> None:
    command = next(a for a in argv if not a.startswith("-") and not a.endswith(".toml"))
    assert build_parser(command).parse_args(argv).config == "A.toml"


def test_a_command_given_no_config_gets_none() -> None:
    assert build_parser("run").parse_args(["run"]).config is None


def test_the_top_level_config_is_read(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KEYSHIFT_CONFIG", raising=False)
    path = tmp_path / "k.toml"
    path.write_text("[groups]\ncount = 96\n")
    for argv in (["--config", str(path), "config"], ["config", "--config", str(path)]):
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["groups"]["count"] == 96


def test_config_on_a_command_that_reads_none_is_refused(capsys) -> None:
    assert main(["--config", "x.toml", "rebalance", "--policy", "kg"]) == 2
    assert "--config: this command reads no configuration" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["rebalance", "--policy", "kg", "--config", "x.toml"])
    assert exc.value.code == 2


@pytest.mark.parametrize("command", ["rebalance", "split", "plan-engines"])
def test_json_commands_indent_with_pretty_and_keep_indent_hidden(command: str) -> None:
    parser = build_parser(command)
    sub = next(p for p in _parsers(parser) if p.prog.endswith(command))
    assert "--pretty" in sub._option_string_actions
    assert sub._option_string_actions["--indent"].help == argparse.SUPPRESS
    assert "--indent" not in sub.format_help()
    base = [command, "--policy", "kg"] if command == "rebalance" else [command]
    assert parser.parse_args([*base, "--pretty"]).pretty is True
    assert parser.parse_args([*base, "--indent", "4"]).pretty is True
    assert parser.parse_args(base).pretty is False
