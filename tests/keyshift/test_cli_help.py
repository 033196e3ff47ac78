"""Every command's help, as a person reads it (issue 15 item 3): ``keyshift -h`` gives each
command a real one-line summary, and each ``-h`` page, sub-commands and the simulator's
scenarios included, exits 0, starts with a description, and is plain text that fits the
terminal (no reStructuredText, no line over 100 characters)."""

from __future__ import annotations

import argparse
import re

import pytest

from keyshift.cli import _commands, build_parser, main
from keyshift.experiments import SCENARIOS

RST = re.compile(r"``|:(func|mod|class|data|meth|attr):|^\s*\.\. ", re.MULTILINE)
WIDTH = 100


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, p in a.choices.items()}


def _pages() -> list[list[str]]:
    """argv of every help page: each command, and each action of commands that have them."""
    pages = [[]]
    for name in sorted(_commands()):
        todo = [([name], _subparsers(build_parser(name))[name])]
        while todo:
            argv, parser = todo.pop()
            pages.append(argv)
            todo += [([*argv, sub], p) for sub, p in _subparsers(parser).items()]
    pages += [["simulate", "--scenario", s] for s in SCENARIOS]
    return pages


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))


def test_every_command_has_a_real_summary_in_the_list(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["-h"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    listed = dict(re.findall(r"^    (\S+)\s*\n?\s+(\S.*)$", out, re.MULTILINE))
    assert set(listed) == set(_commands()), out
    for name, line in listed.items():
        assert "-h" not in line and len(line) >= 20, f"{name}: {line!r}"


@pytest.mark.parametrize("argv", _pages(), ids=lambda a: " ".join(a) or "keyshift")
def test_help_page_is_plain_and_fits(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main([*argv, "-h"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    paragraphs = out.split("\n\n")
    assert paragraphs[0].startswith("usage: keyshift")
    description = next((p for p in paragraphs[1:] if not p.startswith(("usage:", "positional",
                                                                        "options:"))), "")
    assert len(description.split()) >= 3 and not description.endswith(":"), out
    assert not RST.search(out), RST.search(out).group(0)
    long = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not long, long


def test_verbose_and_log_level_set_one_value() -> None:
    parser = build_parser("run")
    parse = parser.parse_args
    assert parse(["run"]).log_level is None
    assert parse(["run", "-v"]).log_level == "WARN"
    assert parse(["run", "-vv"]).log_level == "INFO"
    assert parse(["run", "-vvvv"]).log_level == "DEBUG"
    assert parse(["run", "--log-level", "error"]).log_level == "ERROR"
    with pytest.raises(SystemExit):
        parse(["run", "--log-level", "loud"])
