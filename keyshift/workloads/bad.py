"""Bad records for tests and demos: the four ways a record fails validation.

The ingestion job must route each of them to ``dead_letter`` with a reason and keep going;
the producer's ``--malformed K`` / ``--bad-fraction F`` send them mixed into the good stream.
"""

from __future__ import annotations

import json
from typing import Any

from keyshift.schemas import MAX_EVENT_BYTES

BAD_KINDS = ("malformed_json", "missing_field", "wrong_type", "oversized")


def bad_record(kind: str, event: dict[str, Any]) -> bytes:
    """A broken variant of a valid ``event`` (its id kept, so it can be traced)."""
    if kind == "malformed_json":
        return (json.dumps(event)[:-1] + ',"oops":').encode()
    if kind == "missing_field":
        return json.dumps({k: v for k, v in event.items() if k != "key"}).encode()
    if kind == "wrong_type":
        return json.dumps({**event, "ts": "yesterday"}).encode()
    if kind == "oversized":
        return json.dumps({**event, "pad": "x" * (MAX_EVENT_BYTES + 1)}).encode()
    raise ValueError(f"bad record kind must be one of {', '.join(BAD_KINDS)}, got {kind!r}")
