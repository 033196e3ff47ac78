"""How a job talks to a person: a rich table by default, JSON on request, one-line errors.

Shared by ``python -m jobs.<name>`` and ``keyshift job <name>`` so both print the same thing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from keyshift.errors import ConfigError


def emit(result: dict[str, Any], as_json: bool, table: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        table(result)


def one_line_error(job: str, exc: BaseException, status: int) -> int:
    """Operators read the reason, not a stack: the message already names the field or table."""
    print(f"{job}: {exc}", file=sys.stderr)
    return status


def run_job(
    job: str,
    args: Any,
    run_from_args: Callable[[Any], dict[str, Any]],
    print_summary: Callable[[dict[str, Any]], None],
    runtime_errors: tuple[type[BaseException], ...],
) -> int:
    """Run a job from parsed arguments: bad input → status 2, a missing table or store
    (``runtime_errors``) → status 1, each as one line; otherwise print the summary."""
    try:
        result = run_from_args(args)
    except (ValueError, ConfigError) as exc:
        return one_line_error(job, exc, status=2)
    except runtime_errors as exc:
        return one_line_error(job, exc, status=1)
    emit(result, args.json, print_summary)
    return 0
