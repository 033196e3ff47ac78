"""Windowed word count (elb-clb §5.2): tuples per word per tumbling event-time window.

State per word is the open window and its count, ``[start ms, count]``; no window is open
while the count is 0 (``[None, 0]`` before the first event): an open window has counted at
least its first event, and any start is a window, negative event times included. A window
closes when the word's own event time moves past it (a per-key clock rather than a global
watermark: a global clock would make a key's output depend on other keys' arrival, hence on
placement and batching). A late event counts in the open window. ``word_count`` is emitted
on close when the count reaches ``min_count``.

Mergeable: a count is an associative aggregate, so a hot word may be split over engines
(``dc``, ``wc``) and the partial states of one window add up (:meth:`merge`).

Summary of part of a word's events of one micro-batch: per window start, the count and the
first event (by :func:`~keyshift.apps.base.order_key`). That is enough because an engine
feeds a batch in ``order_key`` order, whose first field is event time, and a window's start
grows with event time: within a batch the windows only move forward, so a window opens (and
the one before closes, emitting) exactly at its first event unless the state's open window
is already at or past it (a late window, counted in the open one, as the rule does).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

from keyshift.apps.base import (
    ComplexEvent,
    Operator,
    OperatorInputError,
    detail_json,
    order_key,
)
from keyshift.schemas import Column


class WindowedWordCount(Operator):
    app = "wordcount"
    event_columns = (Column("word", "STRING", False),)
    event_doc = "words; key = the word (elb-clb §5.2)"
    required = ("word",)
    mergeable = True

    def __init__(self, window_s: float = 10.0, min_count: int = 1) -> None:
        super().__init__()
        if not 0.001 <= window_s < float("inf"):  # windows are whole milliseconds of ts
            raise OperatorInputError("window_s", f"must be >= 0.001 and finite, got {window_s}")
        if min_count < 1:
            raise OperatorInputError("min_count", f"must be >= 1, got {min_count}")
        self.window_s = window_s
        self.min_count = min_count

    def _new_state(self) -> list[Any]:
        return [None, 0]  # [open window start (ms), count]; count 0: no window open

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        """Partial counts of the same open window add; an empty state is the identity.

        Parts of different windows do not merge: the earlier one is a count that has not
        been emitted yet, and folding it into the later window would lose it.
        """
        if not _open(a):
            return list(b)
        if not _open(b):
            return list(a)
        if a[0] != b[0]:
            raise OperatorInputError(
                "state", f"wordcount: partial counts of windows starting at {a[0]} and "
                f"{b[0]} ms do not merge; merge each window's parts before it closes"
            )
        return [a[0], a[1] + b[1]]

    # a summary: [[window start, count, ts, partition, offset, id of its first event], ...]
    # ascending by window start (JSON-able: it travels between engines as a row)
    def _new_summary(self) -> list[list[Any]]:
        return []

    def _summarize_event(self, summary: list[list[Any]], event: Mapping[str, Any]) -> None:
        ts = int(event["ts"])
        start = ts - ts % int(self.window_s * 1000)
        if summary and summary[-1][0] == start:  # the usual case: events in order_key order
            summary[-1][1] += 1
            return
        first = list(order_key(event))
        if not summary or summary[-1][0] < start:
            summary.append([start, 1, *first])
        else:
            _add(summary, [start, 1, *first])

    def combine(self, a: list[list[Any]], b: list[list[Any]]) -> list[list[Any]]:
        out = [list(x) for x in a]
        for entry in b:
            _add(out, list(entry))
        return out

    def _apply_summary(self, state: list[int], key: str,
                       summary: list[list[Any]]) -> list[ComplexEvent]:
        out: list[ComplexEvent] = []
        for start, count, ts, _partition, _offset, event_id in summary:
            if not _open(state):
                state[0] = start
            elif start > state[0]:
                if state[1] >= self.min_count:
                    out.append(self._count(key, ts, event_id, state))
                state[0], state[1] = start, 0
            state[1] += count
        return out

    def _count(self, key: str, ts: int, event_id: str, state: list[int]) -> ComplexEvent:
        return ComplexEvent(
            key=key, ts=int(ts), kind="word_count",
            detail=detail_json(window_start=state[0], window_s=self.window_s, count=state[1]),
            event_id=str(event_id),
        )

    def _on_event(self, state: list[int], event: Mapping[str, object]) -> list[ComplexEvent]:
        ts = int(event["ts"])  # type: ignore[arg-type]
        width = int(self.window_s * 1000)
        start = ts - ts % width
        out: list[ComplexEvent] = []
        if not _open(state):
            state[0] = start
        elif start > state[0]:
            if state[1] >= self.min_count:
                out.append(self._count(str(event["key"]), ts, str(event["id"]), state))
            state[0], state[1] = start, 0
        state[1] += 1
        return out


def _open(state: list[Any]) -> bool:
    """Whether a window is open: it has counted its first event. (Not the start's sign: a
    window of events before 1970 starts below 0; a state written before this rule as
    ``[-1, 0]`` is no window either.)"""
    return state[1] > 0


def _add(summary: list[list[Any]], entry: list[Any]) -> None:
    """Put one window's [start, count, ts, partition, offset, id] into a summary: counts of a
    window add, its first event is the earlier by order_key."""
    i = bisect_left(summary, entry[0], key=lambda x: x[0])
    if i < len(summary) and summary[i][0] == entry[0]:
        mine = summary[i]
        mine[2:] = min(mine[2:], entry[2:])
        mine[1] += entry[1]
    else:
        summary.insert(i, entry)
