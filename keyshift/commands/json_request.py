"""The request reader of the JSON-in/JSON-out commands (``rebalance``, ``split``,
``plan-engines``): :func:`keyshift.cli.read_json_request` plus the failures ``json.loads``
raises besides a syntax error, each turned into the one-line ``input:`` error (issue 16
item 6, found by tests/keyshift/commands/test_fuzz_commands.py): bytes that are not UTF-8, nesting deeper than
Python's recursion limit, an integer literal longer than Python converts (4,300 digits).
"""

from __future__ import annotations

import json
import re
from typing import Any

from keyshift.cli import UsageError, read_json_request


def read_request(path: str | None) -> Any:
    """The parsed JSON document from ``path`` or stdin; UsageError naming ``input``."""
    try:
        return read_json_request(path)
    except UnicodeDecodeError as exc:
        raise UsageError(f"input: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise UsageError("input: nested too deeply") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string"
        raise UsageError(f"input: {str(exc).splitlines()[0][:200]}") from None


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def key_name(key: str) -> str:
    """A key of the request as a field name in a one-line error: as is when it is a plain
    name, else JSON-quoted (an empty key, a line break or any other text stays visible and
    on one line)."""
    return key if _PLAIN_KEY.match(key) else json.dumps(key[:64])
