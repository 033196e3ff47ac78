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
    split_params = {"mergeable": True}  # MergeableHeavyRule: dc and wc split its keys

    def __new__(cls, *args: Any, mergeable: bool = False, **kwargs: Any) -> HeavyRule:
        # ``heavy`` with ``mergeable: true`` is the rule whose keys can split
        # (``--params '{"work_us": 300, "mergeable": true}'``): one name for both forms
        if mergeable is not False and mergeable is not True:
            raise OperatorInputError("mergeable", f"must be true or false, got {mergeable!r}")
        return super().__new__(MergeableHeavyRule if mergeable and cls is HeavyRule else cls)

    def __init__(self, work_us: float = 200.0, every: int = 16,
                 mergeable: bool = False) -> None:
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


class MergeableHeavyRule(HeavyRule):
    """The heavy rule in a form whose hot keys can split over engines (issue 42): each
    event's work is a digest of its own word (``PBKDF2-HMAC-SHA256(word, salt = event id,
    iterations)``), done where the event is read, in :meth:`_summarize_event` when the key is
    split; the event completes a ``heavy_match`` when the digest's first four bytes are
    ``0 mod every``. The key's state, events seen and the sum of the digests' first eight
    bytes mod 2^64, merges by addition. The hash chain of :class:`HeavyRule` cannot split (each
    digest needs the one before); this form gives up the order dependence for it, so its
    outputs are the same under any partition of a key's events."""

    mergeable = True

    def get_params(self) -> dict[str, Any]:
        return {**super().get_params(), "mergeable": True}

    def _digest(self, event: Mapping[str, Any]) -> bytes:
        return hashlib.pbkdf2_hmac("sha256", str(event["word"]).encode(),
                                   str(event["id"]).encode(), self._iterations)

    def _new_state(self) -> list[int]:
        return [0, 0]  # [events seen, sum of the digests' first 8 bytes mod 2^64]

    def _match(self, digest: bytes) -> bool:
        return int.from_bytes(digest[:4], "big") % self.every == 0

    def _emit(self, key: str, ts: int, event_id: str, digest_hex: str) -> ComplexEvent:
        return ComplexEvent(key=key, ts=int(ts), kind="heavy_match",
                            detail=detail_json(digest=digest_hex), event_id=event_id)

    def _on_event(self, state: list[int], event: Mapping[str, Any]) -> list[ComplexEvent]:
        d = self._digest(event)
        state[0] += 1
        state[1] = (state[1] + int.from_bytes(d[:8], "big")) % _MOD
        if not self._match(d):
            return []
        return [self._emit(str(event["key"]), int(event["ts"]), str(event["id"]),
                           d.hex()[:16])]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], (a[1] + b[1]) % _MOD]

    # a summary: [events, digest sum mod 2^64, [[ts, event id, digest hex], ...] of matches]
    def _new_summary(self) -> list[Any]:
        return [0, 0, []]

    def _summarize_event(self, summary: list[Any], event: Mapping[str, Any]) -> None:
        d = self._digest(event)  # the event's work, in the task that read it
        summary[0] += 1
        summary[1] = (summary[1] + int.from_bytes(d[:8], "big")) % _MOD
        if self._match(d):
            summary[2].append([int(event["ts"]), str(event["id"]), d.hex()[:16]])

    def combine(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [a[0] + b[0], (a[1] + b[1]) % _MOD, sorted([*a[2], *b[2]])]

    def _apply_summary(self, state: list[int], key: str,
                       summary: list[Any]) -> list[ComplexEvent]:
        state[0] += summary[0]
        state[1] = (state[1] + summary[1]) % _MOD
        return [self._emit(key, ts, event_id, d) for ts, event_id, d in summary[2]]


_MOD = 2 ** 64
