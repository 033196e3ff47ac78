"""Click-stream sessions → sliding-window pattern → top-k (streammine3g §6).

The paper's pipeline has three operators: group HTTP requests by session, keep a sliding
window of each session's requests and emit the pattern it forms on every update, and a top-k
that tracks the most frequent patterns. The first two are keyed by session and are this
operator (state per session: the last ``length`` URLs and when the session was last seen; an
inactivity gap longer than ``session_gap_s`` starts a new session, as web analytics do). The
top-k is a global aggregate over all sessions' patterns, so it runs downstream of the engines
on the ``pattern`` complex events: :class:`TopK`.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, detail_json
from keyshift.schemas import Column


class ClickPatterns(Operator):
    """Emits ``pattern`` (the session's last ``length`` URLs) on every full-window update."""

    app = "clicks"
    event_columns = (
        Column("user", "STRING"), Column("url", "STRING", False), Column("status", "INT"),
    )
    event_doc = "click stream; key = session id (streammine3g §6)"
    required = ("url",)

    def __init__(self, length: int = 3, session_gap_s: float = 1800.0) -> None:
        super().__init__()
        if length < 1:
            raise OperatorInputError("length", f"must be >= 1, got {length}")
        if session_gap_s <= 0:
            raise OperatorInputError("session_gap_s", f"must be > 0, got {session_gap_s}")
        self.length = length
        self.session_gap_s = session_gap_s

    def _new_state(self) -> dict[str, Any]:
        return {"urls": deque(maxlen=self.length), "last_ts": None, "session": 0}

    def _on_event(self, state: dict[str, Any], event: Mapping[str, Any]) -> list[ComplexEvent]:
        ts = int(event["ts"])
        last = state["last_ts"]
        if last is not None and ts - last > self.session_gap_s * 1000:
            state["urls"].clear()
            state["session"] += 1
        state["last_ts"] = ts
        state["urls"].append(str(event["url"]))
        if len(state["urls"]) < self.length:
            return []
        return [
            ComplexEvent(
                key=str(event["key"]),
                ts=ts,
                kind="pattern",
                detail=detail_json(pattern=" > ".join(state["urls"]), session=state["session"]),
                event_id=str(event["id"]),
            )
        ]


class TopK:
    """Global frequency of patterns (the pipeline's last operator), mergeable across engines."""

    def __init__(self, k: int = 10) -> None:
        if k < 1:
            raise OperatorInputError("k", f"must be >= 1, got {k}")
        self.k = k
        self._counts: Counter[str] = Counter()

    def update(self, patterns: Iterable[str]) -> None:
        self._counts.update(patterns)

    def top(self) -> list[tuple[str, int]]:
        """The k most frequent patterns, ties broken by pattern text for stable output."""
        return heapq.nsmallest(self.k, self._counts.items(), key=lambda kv: (-kv[1], kv[0]))
