"""First story detection (dlb §4, Listing 1.1).

The EPL rule joins the last tweet with the last H tweets of the same LSH key and fires when
the highest similarity is at most τ: a tweet unlike every recent tweet of its bucket starts
a new story. H = 500 and τ = 0.2 are the paper's values. Similarity is the cosine of the
binary term vectors, |A ∩ B| / sqrt(|A|·|B|), computed with C-level set intersections so a
comparison against 500 neighbours stays in the tens of microseconds.

The key is an LSH bucket (random hyperplanes over hashed terms, the standard FSD trick the
paper cites): similar tweets share a bucket, so comparing within a key finds the neighbours.
``lsh_key`` is here so that producers and replays compute the same key.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, detail_json
from keyshift.schemas import Column

_TOKEN = re.compile(r"[a-z0-9#@']+")


def tokens(text: str) -> frozenset[str]:
    """The tweet's distinct lower-case terms (the binary term vector)."""
    return frozenset(_TOKEN.findall(text.lower()))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Cosine similarity of two binary term vectors; 0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / math.sqrt(len(a) * len(b))


def lsh_key(text: str, bits: int = 12) -> str:
    """Random-hyperplane LSH bucket of a text: ``bits`` sign bits, e.g. ``'h0101...'``.

    Each term gets a pseudo-random ±1 vector from xxHash (seeded by the bit index), the
    document vector is their sum, and bit i is its sign on hyperplane i. Deterministic across
    processes, unlike Python's salted ``hash``.
    """
    if not 1 <= bits <= 62:
        raise OperatorInputError("bits", f"must be in 1..62, got {bits}")
    terms = sorted(tokens(text))
    if not terms:
        return "h" + "0" * bits
    h = np.array([xxhash.xxh64_intdigest(t.encode(), seed=7) for t in terms], dtype=np.uint64)
    planes = (h[:, None] >> np.arange(bits, dtype=np.uint64)[None, :]) & np.uint64(1)
    signs = planes.astype(np.int64) * 2 - 1
    bits_set = signs.sum(axis=0) > 0
    return "h" + "".join("1" if b else "0" for b in bits_set)


class FirstStoryDetection(Operator):
    """Fires ``first_story`` when a tweet's best match among its key's last H is ≤ τ."""

    app = "fsd"
    event_columns = (Column("text", "STRING", False, "short text (tweet)"),)
    event_doc = "first story detection; key = LSH bucket of the text (dlb Listing 1.1)"
    required = ("text",)

    def __init__(self, history: int = 500, tau: float = 0.2) -> None:
        super().__init__()
        if history < 1:
            raise OperatorInputError("history", f"must be >= 1, got {history}")
        if not 0.0 <= tau <= 1.0:
            raise OperatorInputError("tau", f"must be in [0, 1], got {tau}")
        self.history = history
        self.tau = tau

    def _new_state(self) -> deque:
        return deque(maxlen=self.history)

    def _on_event(self, state: deque, event: Mapping[str, Any]) -> list[ComplexEvent]:
        terms = tokens(str(event["text"]))
        best = max((similarity(terms, other) for other in state), default=0.0)
        state.append(terms)
        if best > self.tau:
            return []
        return [
            ComplexEvent(
                key=str(event["key"]),
                ts=int(event["ts"]),
                kind="first_story",
                detail=detail_json(max_similarity=round(best, 6), neighbours=len(state) - 1),
                event_id=str(event["id"]),
            )
        ]
