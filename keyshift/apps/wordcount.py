"""Windowed word count (elb-clb §5.2): tuples per word per tumbling event-time window.

State per word is the open window and its count. A window closes when the word's own
event time moves past it (a per-key clock rather than a global watermark: a global clock
would make a key's output depend on other keys' arrival, hence on placement and batching).
A late event counts in the open window. ``word_count`` is emitted on close when the count
reaches ``min_count``.

Mergeable: a count is an associative aggregate, so a hot word may be split over engines
(``dc``, ``wc``) and the partial states of one window add up (:meth:`merge`).
"""

from __future__ import annotations

from collections.abc import Mapping

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, detail_json
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

    def _new_state(self) -> list[int]:
        return [-1, 0]  # [open window start (ms), count]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        """Partial counts of the same open window add; an empty state is the identity.

        Parts of different windows do not merge: the earlier one is a count that has not
        been emitted yet, and folding it into the later window would lose it.
        """
        if a[0] < 0:
            return list(b)
        if b[0] < 0:
            return list(a)
        if a[0] != b[0]:
            raise OperatorInputError(
                "state", f"wordcount: partial counts of windows starting at {a[0]} and "
                f"{b[0]} ms do not merge; merge each window's parts before it closes"
            )
        return [a[0], a[1] + b[1]]

    def _on_event(self, state: list[int], event: Mapping[str, object]) -> list[ComplexEvent]:
        ts = int(event["ts"])  # type: ignore[arg-type]
        width = int(self.window_s * 1000)
        start = ts - ts % width
        out: list[ComplexEvent] = []
        if state[0] < 0:
            state[0] = start
        elif start > state[0]:
            if state[1] >= self.min_count:
                out.append(
                    ComplexEvent(
                        key=str(event["key"]),
                        ts=ts,
                        kind="word_count",
                        detail=detail_json(window_start=state[0], window_s=self.window_s,
                                           count=state[1]),
                        event_id=str(event["id"]),
                    )
                )
            state[0], state[1] = start, 0
        state[1] += 1
        return out
