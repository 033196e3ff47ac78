"""The ``keyshift`` command. Sub-commands are plugins (entry points ``keyshift.commands``) so
the pure core never imports Spark, Airflow or torch, and ``keyshift rebalance`` starts in
milliseconds: only the module of the command being run is imported.

Each plugin module defines ``SUMMARY`` (a string literal: the command's line in
``keyshift -h``, read from the source without importing the module, so the list stays
instant and shows commands whose optional dependencies are missing) and
``register(subparsers) -> argparse.ArgumentParser``, which sets ``func`` on the parser's
defaults; ``func(args) -> int`` returns the exit status.
Usage errors and :class:`UsageError` exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import sys
from importlib.metadata import entry_points
from typing import Any

from keyshift.errors import ConfigError, FieldError


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


def printable(value: Any) -> str:
    """A string that may quote what a table, a file or a record holds, as it may reach a
    terminal: every character that is not printable (an escape sequence's ESC, a carriage
    return, a newline, a bidi override) written as its Python escape (``\\x1b``), so whoever
    could write the warehouse or the input cannot clear, move or recolour the reader's
    screen; None is ''. The one escaping of what the commands print (their error lines,
    ``status``, ``dead-letters``)."""
    if value is None:
        return ""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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


CONFIG_HELP = ("TOML file (default: $KEYSHIFT_CONFIG, else the project's keyshift.toml, "
               "else built-in)")


def add_config_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--config FILE``, the same on every command that reads the configuration. The
    top-level parser has it too (default None), so ``keyshift --config F CMD`` and
    ``keyshift CMD --config F`` both work: below the top it defaults to SUPPRESS, so a command
    whose own --config is not given does not overwrite the top-level one with None.
    :func:`build_parser` adds it to every parser of a command that has no ``--config`` of its
    own, unless the command's module says ``READS_CONFIG = False``."""
    p.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)


def add_json_options(p: argparse.ArgumentParser | argparse._ArgumentGroup,
                     json_help: str | None = "print one JSON object") -> None:
    """The one JSON-output convention: ``--json`` for one JSON object (omitted, with
    ``json_help=None``, on a command that always answers JSON), ``--pretty`` to indent it.
    ``--indent N`` is kept as a hidden alias of ``--pretty`` (N ignored: indent 2)."""
    if json_help is not None:
        p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--pretty", action="store_true", help="indent the JSON output")
    p.add_argument("--indent", dest="pretty", nargs="?", const=True, type=_true,
                   help=argparse.SUPPRESS)


def _true(_: str) -> bool:
    return True


def json_indent(args: argparse.Namespace) -> int | None:
    """``json.dumps``'s indent for ``--pretty``."""
    return 2 if getattr(args, "pretty", False) else None


LOG_LEVELS = ("ERROR", "WARN", "INFO", "DEBUG")


class _MoreVerbose(argparse.Action):
    """Each ``-v`` raises the terminal's log level one step (none, WARN, INFO, DEBUG), so
    ``-v`` and ``--log-level`` set the one value a command reads, ``args.log_level``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        now = getattr(namespace, self.dest)
        step = LOG_LEVELS.index(now) + 1 if now in LOG_LEVELS else 1
        setattr(namespace, self.dest, LOG_LEVELS[min(step, len(LOG_LEVELS) - 1)])


def add_log_options(p: argparse.ArgumentParser) -> None:
    """``-v`` and ``--log-level`` of every command that drives Spark or Kafka clients: their
    log lines go to a log file unless asked for on the terminal (``keyshift.lakehouse.logs``)."""
    g = p.add_argument_group("log output")
    g.add_argument("-v", "--verbose", dest="log_level", nargs=0, action=_MoreVerbose,
                   default=None, help="show the log lines of Spark and the Kafka client "
                   "here: -v warnings and errors, -vv info, -vvv debug (default: they go to "
                   "a log file, named when something fails)")
    g.add_argument("--log-level", dest="log_level", type=str.upper, choices=LOG_LEVELS,
                   metavar="LEVEL", help="show those log lines from LEVEL up here: ERROR, "
                   "WARN, INFO or DEBUG")


class _Commands(argparse._SubParsersAction):
    """Sub-commands whose ``-h`` starts with their one-line help when they give no
    description of their own, so no command's help page is a bare list of options."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        summary = kwargs.get("help")
        if kwargs.get("description") is None and summary:
            kwargs["description"] = summary[0].upper() + summary[1:].rstrip(".") + "."
        return super().add_parser(name, **kwargs)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def error(self, message: str) -> None:  # one line, status 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _commands() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group="keyshift.commands")}


def summary(module: str) -> str:
    """The ``SUMMARY`` literal of a command's module, read from its source (see above);
    empty for a plugin that defines none or whose source is not there."""
    try:
        spec = importlib.util.find_spec(module)
        with open(spec.origin, encoding="utf-8") as f:  # type: ignore[union-attr]
            tree = ast.parse(f.read())
    except (ImportError, AttributeError, TypeError, OSError, SyntaxError):
        return ""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "SUMMARY"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return ""


def _operator_api() -> int:
    from keyshift.apps.base import OPERATOR_API_VERSION

    return OPERATOR_API_VERSION


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every sub-parser below it, each once (aliases share a parser)."""
    out, seen = [], set()
    todo = [parser]
    while todo:
        p = todo.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        out.append(p)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return out


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="keyshift",
        description="Keep a keyed, stateful stream job balanced and right-sized while it runs.",
    )
    from keyshift import __version__

    parser.add_argument("--version", action="version",
                        version=f"keyshift {__version__} (Operator API {_operator_api()})")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help=CONFIG_HELP + "; also accepted after the command")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands = _commands()
    if command in commands:
        module = importlib.import_module(commands[command])
        top = module.register(sub)
        reads = getattr(module, "READS_CONFIG", True)
        top.set_defaults(_reads_config=reads)
        for p in _parsers(top) if reads else ():
            if "--config" not in p._option_string_actions:
                add_config_option(p)
    else:
        for name in sorted(commands):
            sub.add_parser(name, help=summary(commands[name]))
        parser.epilog = "Run 'keyshift COMMAND -h' for a command's options."
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The command named on the line: the first word that is not an option or the value of
    the top-level ``--config``."""
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--config":
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _command_word(argv)
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
    if args.config is not None and not getattr(args, "_reads_config", True):
        print(f"keyshift {args.command}: --config: this command reads no configuration",
              file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except (UsageError, ConfigError, FieldError) as exc:  # bad input: one line, status 2
        print(f"keyshift {args.command}: {printable(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"keyshift {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run through the imported module so plugins' ``UsageError`` is the same class.
    from keyshift.cli import main as _main

    raise SystemExit(_main())
