"""A CPU-heavy keyed rule: the model of a complex-event rule whose work dominates a batch.

The shipped rules are cheap per event (a count, a cosine against a few hundred term sets), so
in a micro-batch the engines' stage is a small part of the batch and a balancer has little
to win. A real CEP rule often spends tens to hundreds of microseconds per event: a
similarity search over an LSH table, a model scored on the event, a regex set. This operator
spends a *deterministic* amount of CPU per event so that benches can put the engine stage
where a production rule puts it, and the balancer's worth can be measured there.

The rule, per key (the word-count event schema: key = the word): every event extends a hash
chain, ``digest = PBKDF2-HMAC-SHA256(previous digest + word, salt = event id,
iterations)``, and the event completes a ``heavy_match`` when the new digest's first four
bytes are ``0 mod every``. The work is a C loop whose cost is linear in ``iterations``
(:data:`ITERATIONS_PER_US` per microsecond, measured on this project's 2-core machine), and
the iterations come from ``work_us`` by that fixed constant, never from a clock: the outputs
are the same on every host, whatever its speed. Because each digest depends on every earlier
event of the key in order, a lost, doubled or reordered event changes every later output of
that key, so equality with key grouping's outputs is a strong check of a rebalanced run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, detail_json
from keyshift.schemas import Column

ITERATIONS_PER_US = 4.6
"""PBKDF2-HMAC-SHA256 iterations per microsecond of one core of the project's machine
(0.217 µs per iteration measured, Python 3.11, OpenSSL 3). A faster host spends less time
per event for the same ``work_us``; the outputs do not change."""

MAX_WORK_US = 1_000_000.0


def iterations_for(work_us: float) -> int:
    """The chain's iterations per event for about ``work_us`` µs of one core (at least 1)."""
    return max(1, round(work_us * ITERATIONS_PER_US))


class HeavyRule(Operator):
    """Per-key hash chain of about ``work_us`` µs per event; emits about one event in ``every``."""

    app = "heavy"
    event_columns = (Column("word", "STRING", False, "the text the rule hashes"),)
    event_doc = "a CPU-heavy rule on words (the word-count schema); key = the word"
    required = ("word",)

    def __init__(self, work_us: float = 200.0, every: int = 16) -> None:
        super().__init__()
        try:
            work = float(work_us)
        except (TypeError, ValueError):
            raise OperatorInputError("work_us", f"must be a number, got {work_us!r}") from None
        if not 0.0 <= work <= MAX_WORK_US:
            raise OperatorInputError("work_us", f"must be in [0, {MAX_WORK_US:g}] µs, got {work_us}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise OperatorInputError("every", f"must be an integer >= 1, got {every!r}")
        self.work_us = work
        self.every = every
        self._iterations = iterations_for(work)

    def _new_state(self) -> list[Any]:
        return [0, ""]  # [events seen, hex digest of the chain so far]

    def _on_event(self, state: list[Any], event: Mapping[str, Any]) -> list[ComplexEvent]:
        digest = hashlib.pbkdf2_hmac(
            "sha256", (state[1] + str(event["word"])).encode(), str(event["id"]).encode(),
            self._iterations)
        state[0] += 1
        state[1] = digest.hex()
        if int.from_bytes(digest[:4], "big") % self.every:
            return []
        return [ComplexEvent(
            key=str(event["key"]), ts=int(event["ts"]), kind="heavy_match",
            detail=detail_json(seen=state[0], digest=state[1][:16]),
            event_id=str(event["id"]),
        )]
