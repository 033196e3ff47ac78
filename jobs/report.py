"""How a job talks to a person: a rich table by default, JSON on request, one-line errors.

Shared by ``python -m jobs.<name>`` and ``keyshift job <name>`` so both print the same thing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def emit(result: dict[str, Any], as_json: bool, table: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        table(result)


def one_line_error(job: str, exc: BaseException, status: int) -> int:
    """Operators read the reason, not a stack: the message already names the field or table."""
    print(f"{job}: {exc}", file=sys.stderr)
    return status
