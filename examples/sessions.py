"""Per-user sessions with an inactivity gap: an example operator of the Operator API v1.

Key = user id. A user's session is the run of their events with no pause longer than
``gap_s`` in event time. When an event arrives after a longer pause, the previous session
closes and the operator emits ``session`` (start, end, events, spend); the first time a
session's spend reaches ``alert_amount`` it emits ``big_spender``. The clock is the key's own
event time, never a global watermark or the wall clock: a global clock would make one user's
output depend on other users' arrival, hence on placement and batching, and break the
Operator API's determinism rule.

Load it with ``--app keyshift.examples.sessions:SessionOperator``; :func:`generate` makes valid
events for it (``python -m keyshift.examples.sessions --count 1000`` prints them as JSON lines).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Mapping
from typing import Any

from keyshift.apps import ComplexEvent, Operator, OperatorInputError, detail_json
from keyshift.schemas import Column

SPEC = "keyshift.examples.sessions:SessionOperator"

PAGES = ("home", "search", "product", "cart", "checkout", "help")

# Per-key state, a plain list so snapshots are small and need no class to decode:
_START, _LAST, _EVENTS, _SPEND, _ALERTED, _SESSION = range(6)


class SessionOperator(Operator):
    """Emits ``session`` when a user's session closes and ``big_spender`` once per session
    whose spend reaches ``alert_amount``."""

    api_version = 1
    app = "sessions"
    event_columns = (
        Column("page", "STRING", False, "page or screen the user viewed"),
        Column("amount", "DOUBLE", True, "purchase amount when the event is a purchase"),
    )
    event_doc = "user activity; key = user id (examples/sessions.py)"
    required = ("page",)

    def __init__(self, gap_s: float = 30.0, alert_amount: float = 100.0) -> None:
        super().__init__()
        if not gap_s > 0:
            raise OperatorInputError("gap_s", f"must be > 0, got {gap_s}")
        if not alert_amount > 0:
            raise OperatorInputError("alert_amount", f"must be > 0, got {alert_amount}")
        self.gap_s = gap_s
        self.alert_amount = alert_amount

    def _new_state(self) -> list[Any]:
        return [-1, -1, 0, 0.0, False, 0]

    def _on_event(self, state: list[Any], event: Mapping[str, Any]) -> list[ComplexEvent]:
        ts = int(event["ts"])
        key, event_id = str(event["key"]), str(event["id"])
        out: list[ComplexEvent] = []
        if state[_START] >= 0 and ts - state[_LAST] > self.gap_s * 1000:
            out.append(ComplexEvent(
                key=key, ts=ts, kind="session", event_id=event_id,
                detail=detail_json(session=state[_SESSION], start=state[_START],
                                   end=state[_LAST], events=state[_EVENTS],
                                   spend=round(state[_SPEND], 2)),
            ))
            state[:] = [-1, -1, 0, 0.0, False, state[_SESSION] + 1]
        if state[_START] < 0:
            state[_START] = ts
        state[_LAST] = max(state[_LAST], ts)  # an out-of-order event does not rewind the clock
        state[_EVENTS] += 1
        amount = event.get("amount")
        if amount is not None:
            state[_SPEND] += float(amount)
        if not state[_ALERTED] and state[_SPEND] >= self.alert_amount:
            state[_ALERTED] = True
            out.append(ComplexEvent(
                key=key, ts=ts, kind="big_spender", event_id=event_id,
                detail=detail_json(session=state[_SESSION], spend=round(state[_SPEND], 2)),
            ))
        return out


def generate(n: int, keys: int = 50, seed: int = 0, *, start_ms: int = 1_700_000_000_000,
             gap_s: float = 30.0, skew: float = 1.0, step_ms: int = 100,
             pause: float = 0.05, purchase: float = 0.15) -> list[dict[str, Any]]:
    """``n`` valid events for :class:`SessionOperator`, in event-time order.

    Users are drawn Zipf(``skew``) from ``keys`` (hot users make key skew for the balancer);
    the clock advances ~``step_ms`` per draw; after an event a user pauses for 1.5–3 times
    ``gap_s`` with probability ``pause`` (so hot users' sessions close too), and buys
    something with probability ``purchase`` (``amount``; absent otherwise). Ids are
    ``s{seed}-{index}``, unique across seeds. Deterministic for a seed.
    """
    if n < 0 or keys < 1:
        raise ValueError(f"n must be >= 0 and keys >= 1, got n={n}, keys={keys}")
    rng = random.Random(seed)
    users = [f"user-{i:04d}" for i in range(keys)]
    weights = [1.0 / (rank + 1) ** skew for rank in range(keys)]
    idle_until = dict.fromkeys(users, 0)
    gap_ms = int(gap_s * 1000)
    clock, out = start_ms, []
    while len(out) < n:
        clock += rng.randint(1, 2 * step_ms)
        user = rng.choices(users, weights)[0]
        if clock < idle_until[user]:
            continue
        event: dict[str, Any] = {"id": f"s{seed}-{len(out):07d}", "key": user, "ts": clock,
                                 "page": rng.choice(PAGES)}
        if rng.random() < purchase:
            event["amount"] = round(rng.uniform(5.0, 80.0), 2)
        out.append(event)
        if rng.random() < pause:
            idle_until[user] = clock + int(gap_ms * rng.uniform(1.5, 3.0))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print generated events as JSON lines (pipe them to any Kafka producer)."""
    p = argparse.ArgumentParser(prog="python -m keyshift.examples.sessions", description=main.__doc__)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gap-s", type=float, default=30.0)
    args = p.parse_args(argv)
    for event in generate(args.count, args.keys, args.seed, gap_s=args.gap_s):
        sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
