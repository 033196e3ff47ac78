"""The ``keyshift`` command. Sub-commands are plugins (entry points ``keyshift.commands``) so
the pure core never imports Spark, Airflow or torch, and ``keyshift rebalance`` starts in
milliseconds: only the module of the command being run is imported.

Each plugin module defines ``register(subparsers) -> argparse.ArgumentParser`` and sets
``func`` on the parser's defaults; ``func(args) -> int`` returns the exit status.
Usage errors and :class:`UsageError` exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib.metadata import entry_points
from typing import Any

from keyshift.errors import ConfigError, FieldError


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


def read_json_request(path: str | None) -> Any:
    """The one JSON object a JSON-in/JSON-out command reads: from ``path`` or stdin.
    Unreadable or malformed input is a :class:`UsageError` naming ``input``."""
    try:
        if path:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        else:
            text = sys.stdin.read()
    except OSError as exc:
        raise UsageError(f"input: cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"input: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _commands() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group="keyshift.commands")}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="keyshift",
        description="Keep a keyed, stateful stream job balanced and right-sized while it runs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands = _commands()
    if command in commands:
        importlib.import_module(commands[command]).register(sub)
    else:
        for name in sorted(commands):
            sub.add_parser(name, help=f"(run 'keyshift {name} -h')")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(command)
    except ImportError as exc:
        module = _commands().get(command or "", "")
        if exc.name and module.startswith(exc.name):
            why = f"its module {module} is not part of this installation"
        else:
            why = (
                f"it needs {exc.name or exc}, an optional dependency that is not installed; "
                "run 'make venv' or pip install 'keyshift[all]'"
            )
        print(f"keyshift {command}: cannot run: {why}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None and not argv else 2
    try:
        return int(args.func(args) or 0)
    except (UsageError, ConfigError, FieldError) as exc:  # bad input: one line, status 2
        print(f"keyshift {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"keyshift {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run through the imported module so plugins' ``UsageError`` is the same class.
    from keyshift.cli import main as _main

    raise SystemExit(_main())
