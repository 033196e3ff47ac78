"""The operator interface with explicit state management (streammine3g §3).

An engine runs one :class:`Operator` over the key groups it owns. The state is kept per key
group so that the group, the unit of assignment, is also the unit of migration:
``snapshot(group)`` serialises everything the operator remembers about the group's keys,
``drop(group)`` forgets it on the old engine and ``restore(group, data)`` installs it on the
new one. Because every rule below keeps state per *key* only (never across keys), the complex
events of a key depend only on that key's events in event-time order, never on which engine
processed them or how the input was cut into micro-batches: that is what makes a rebalanced
run produce exactly the complex events of key grouping (dlb §4).

Ordering contract: the engine feeds each group's events sorted by :func:`order_key`
(event time, then the Kafka partition and offset, then the event id), so ties are broken the
same way in every run.

This module is keyshift's public **Operator API**, version :data:`OPERATOR_API_VERSION`
(docs/operators.md is the guide). A user's operator subclasses :class:`Operator`, declares
the payload columns of its Kafka events (``event_columns``) and is loaded by name, by entry
point (group ``keyshift.operators``) or as ``module:Class`` (:mod:`keyshift.apps.registry`).
The contract a subclass must keep:

- **per-key state only**: ``_on_event`` reads and mutates the state of the event's key and
  nothing else (no globals, no other key, no wall clock, no randomness without a seed kept in
  that state), so a key's outputs cannot depend on placement or batching;
- **deterministic in event-time order**: the same events of a key in :func:`order_key` order
  give the same complex events, in every run and on every engine;
- **round trip**: per-key state is data the operator's ``state_codec`` keeps (the default,
  :mod:`keyshift.apps.state_codec`: None, bools, numbers, strings, bytes, lists, tuples,
  dicts, sets, frozensets, deques) and ``restore(g, snapshot(g))`` on a fresh operator
  continues exactly as the original would (``drop`` then forgets the group);
- **declared payload**: every field ``_on_event`` reads is in ``required`` (checked for
  presence before the rule runs) and declared in ``event_columns`` (typed by ingestion);
- **refuse before mutating**: an event the rule cannot use (a value out of its range)
  raises :class:`OperatorInputError` naming the field before the state changes; the engine
  makes it a dead letter with that reason and goes on with the batch. Any other exception
  is a bug of the operator and fails the query.

Optional, for key splitting (``dc``, ``wc``, ``pkg``): an operator whose per-key state is an
associative aggregate sets ``mergeable = True`` and implements :meth:`Operator.merge`, which
combines two engines' partial states of one key into the state one engine would hold had it
seen both parts. :func:`keyshift.policies.check_operator` refuses a key-splitting policy for
any other operator. To be split in the Spark job it also offers a *summary* monoid over parts
of one key's events of a micro-batch (:meth:`Operator.summarize`, :meth:`Operator.combine`,
:meth:`Operator.apply_summary`): merging states alone is not enough, because an output (a
window's count) is emitted at one event, whose engine saw only part of the window.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from keyshift.apps.state_codec import DEFAULT_CODEC, StateCodec
from keyshift.errors import FieldError
from keyshift.schemas import ENVELOPE, Column, TableSchema

OPERATOR_API_VERSION = 1
"""The Operator API this keyshift implements. Bumped only when a change would break an
operator written against the previous version (a hook renamed, a guarantee weakened); an
additive change (a new optional hook with a default) keeps it. An operator states the version
it was written for in ``api_version``; loading refuses one this keyshift does not support."""

SUPPORTED_API_VERSIONS: frozenset[int] = frozenset({1})

SUMMARY_HOOKS = ("_new_summary", "_summarize_event", "combine", "_apply_summary")
"""What a splittable operator implements (all of them or none; the loader checks)."""


class OperatorInputError(FieldError):
    """An event or a parameter the operator cannot use; ``field`` names it."""


@dataclass(frozen=True)
class ComplexEvent:
    """One output of an operator; the engine adds run, batch, app, engine and group."""

    key: str
    ts: int
    kind: str
    detail: str
    event_id: str

    def identity(self) -> tuple[str, int, str, str, str]:
        """What two runs must agree on (dlb §4's consistency criterion)."""
        return (self.key, self.ts, self.kind, self.detail, self.event_id)


def order_key(event: Mapping[str, Any]) -> tuple:
    """Processing order of events: event time, then arrival position, then id."""
    return (
        int(event["ts"]),
        int(event.get("partition", 0) or 0),
        int(event.get("offset", 0) or 0),
        str(event["id"]),
    )


def detail_json(**fields: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) so equal details compare equal as strings."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


class Operator(ABC):
    """A keyed stateful operator with per-group explicit state (Operator API v1).

    Subclasses declare, as class attributes:

    - ``app``: a short name (letters, digits, ``_``); it names the event schema
      (``event_<app>``) and appears in error messages;
    - ``event_columns``: the payload columns of the operator's Kafka events, beyond the
      envelope ``id, key, ts`` (:data:`keyshift.schemas.ENVELOPE`), as
      :class:`keyshift.schemas.Column` objects with Spark SQL DDL type names; a non-nullable
      column makes ingestion dead-letter an event without it;
    - ``required``: the payload fields ``_on_event`` reads (each declared in
      ``event_columns``); ``process`` refuses an event lacking one, naming it;
    - optionally ``event_version`` and ``event_doc`` (the schema's version and description)
      and ``api_version`` (the Operator API version written against, default 1);
    - optionally ``mergeable = True`` with :meth:`merge` (partial per-key state combines)
      and, to be split in the Spark job, the summary hooks (:meth:`summarize`);
    - optionally ``state_codec``: how a group's ``{key: state}`` map becomes snapshot bytes
      and back (default :data:`keyshift.apps.state_codec.DEFAULT_CODEC`, data only, never
      pickle).

    They take their rule's parameters in the constructor (validated there, nothing else
    done) and implement :meth:`_new_state` and :meth:`_on_event`. Everything else (the
    group → key → state map, snapshot, restore, drop, sizes) lives here once.
    """

    api_version: ClassVar[int] = OPERATOR_API_VERSION
    app: ClassVar[str]
    event_columns: ClassVar[tuple[Column, ...]] = ()
    event_version: ClassVar[int] = 1
    event_doc: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()
    mergeable: ClassVar[bool] = False
    # the parameters that build a form of this operator whose keys can split (dc, wc), for
    # an operator that has one (heavy: {"mergeable": True}); said when a run sits at the floor
    split_params: ClassVar[Mapping[str, Any] | None] = None
    state_codec: ClassVar[StateCodec] = DEFAULT_CODEC

    @classmethod
    def event_schema(cls) -> TableSchema:
        """The operator's Kafka event schema: the envelope, then the declared payload.

        Override only to build the columns dynamically; the loader checks the result either
        way (envelope first, valid names and types, ``required`` declared).
        """
        return TableSchema(
            f"event_{cls.app}", cls.event_version, ENVELOPE + tuple(cls.event_columns),
            cls.event_doc,
        )

    def __init__(self) -> None:
        self._groups: dict[int, dict[str, Any]] = {}

    # -- lifecycle -------------------------------------------------------------------
    def init(self) -> None:
        """Start empty (a new engine, or a restart before restoring snapshots)."""
        self._groups = {}

    def process(self, event: Mapping[str, Any], group: int) -> list[ComplexEvent]:
        """Feed one event of ``group``; returns the complex events it completes.

        The engine calls it for each group's events in :func:`order_key` order; an event
        lacking ``id``, ``key``, ``ts`` or a ``required`` field is refused, naming it.
        """
        self._check_fields(event)
        return self._on_event(self._state(group, str(event["key"])), event)

    def _check_fields(self, event: Mapping[str, Any]) -> None:
        for name in ("id", "key", "ts", *self.required):
            if event.get(name) is None:
                raise OperatorInputError(name, f"missing in a {self.app} event")

    def _state(self, group: int, key: str) -> Any:
        states = self._groups.get(group)
        if states is None:
            states = self._groups[group] = {}
        state = states.get(key)
        if state is None:
            state = states[key] = self._new_state()
        return state

    def process_many(
        self, events: Iterable[Mapping[str, Any]], groups: Iterable[int],
        rejected: Callable[[int, OperatorInputError], None] | None = None,
    ) -> list[tuple[int, ComplexEvent]]:
        """Feed events already in :func:`order_key` order; outputs tagged with their group.

        With ``rejected``, an event the operator refuses (:class:`OperatorInputError`) is
        reported by its position and skipped, and the others go on: the engine makes it a
        dead letter, where raising would fail the Spark task, then the query, on every retry
        of the same input.
        """
        out: list[tuple[int, ComplexEvent]] = []
        for i, (event, group) in enumerate(zip(events, groups, strict=True)):
            try:
                out.extend((group, ce) for ce in self.process(event, group))
            except OperatorInputError as exc:
                if rejected is None:
                    raise
                rejected(i, exc)
        return out

    # -- explicit state (streammine3g §3) --------------------------------------------
    def snapshot(self, group: int) -> bytes:
        """Serialised state of one group by ``state_codec`` (an empty group: an empty map).
        A state the codec cannot keep raises :class:`OperatorInputError` on ``state``."""
        try:
            return self.state_codec.encode(self._groups.get(group, {}))
        except ValueError as exc:  # the codec's StateCodecError is one
            raise OperatorInputError(
                "state", f"{self.app}: group {group}: {exc}") from None

    def restore(self, group: int, data: bytes) -> None:
        """Install a group's state from :meth:`snapshot` bytes, replacing what was there.

        Bytes the codec did not write are refused, naming the group; the default codec
        refuses the pickled snapshots of an older keyshift unread (docs/operators.md,
        "State codec")."""
        try:
            states = self.state_codec.decode(bytes(data))
        except Exception as exc:  # corrupt bytes must name the group, not crash deep inside
            raise OperatorInputError(
                "state", f"group {group}: cannot decode snapshot ({exc})") from None
        if not isinstance(states, dict):
            raise OperatorInputError("state", f"group {group}: snapshot is not a key map")
        if states:
            self._groups[group] = states
        else:
            self._groups.pop(group, None)

    def drop(self, group: int) -> None:
        """Forget a group (the old engine after its snapshot left)."""
        self._groups.pop(group, None)

    def groups(self) -> list[int]:
        """Groups this operator holds state for, ascending."""
        return sorted(self._groups)

    def state_bytes(self, group: int) -> int:
        """d_i, the group's state size in bytes (its snapshot's length)."""
        return len(self.snapshot(group)) if group in self._groups else 0

    # -- the rule --------------------------------------------------------------------
    @abstractmethod
    def _new_state(self) -> Any:
        """Empty per-key state: plain data the ``state_codec`` keeps (it travels in snapshots
        between engines and runs: lists, tuples, dicts, sets, deques, numbers, strings)."""

    @abstractmethod
    def _on_event(self, state: Any, event: Mapping[str, Any]) -> list[ComplexEvent]:
        """Apply the rule to one event of the key whose ``state`` is given (mutate it).

        Reads only ``state``, the event and the constructor's parameters; returns the
        complex events this event completes (``event_id`` = the event's id, ``ts`` = its
        event time), the same ones in every run.
        """

    def merge(self, a: Any, b: Any) -> Any:
        """Combine two partial states of one key (each from events the other did not see)
        into the state of one engine that saw both; must be associative and commutative.

        Only operators with ``mergeable = True`` implement it: a key-splitting policy sends
        a hot key's events to several engines and merges their partial states. A state the
        rule cannot combine (e.g. parts from different windows) raises
        :class:`OperatorInputError` on ``state``: merging must lose nothing.
        """
        raise OperatorInputError(
            "state", f"operator {self.app!r} ({type(self).__name__}) does not merge partial "
            "per-key state (mergeable = False)"
        )

    # -- a hot key split over engines (optional; mergeable operators) ------------------
    @classmethod
    def summarizes(cls) -> bool:
        """Whether the class offers the summary hooks the Spark job splits a key with."""
        return all(getattr(cls, h) is not getattr(Operator, h) for h in SUMMARY_HOOKS)

    def summarize(
        self, events: Iterable[Mapping[str, Any]],
        rejected: Callable[[int, OperatorInputError], None] | None = None,
    ) -> Any:
        """The summary of a part of one key's events of one micro-batch, fed in
        :func:`order_key` order; with ``rejected``, an event the rule refuses is reported by
        its position and left out (the engine makes it a dead letter), as in
        :meth:`process_many`.

        The contract (tested by hypothesis for word count): for *any* partition of a key's
        events of a batch into parts, :meth:`combine` of the parts' summaries, in any order,
        applied by :meth:`apply_summary` to the key's state as of the batch before, gives the
        state and the complex events of processing those events one by one. Any partition,
        not only contiguous runs: the job then summarizes a split key's events in the input
        tasks that read them (a combiner before the engines' shuffle), with no sort to cut runs.
        """
        summary = self._new_summary()
        for i, event in enumerate(events):
            try:
                self._check_fields(event)
                self._summarize_event(summary, event)
            except OperatorInputError as exc:
                if rejected is None:
                    raise
                rejected(i, exc)
        return summary

    def apply_summary(self, group: int, key: str, summary: Any) -> list[ComplexEvent]:
        """Apply a (combined) summary of ``key``'s events of this batch to the key's state;
        returns the complex events processing those events one by one would have."""
        return self._apply_summary(self._state(group, key), key, summary)

    def _new_summary(self) -> Any:
        """The empty summary (the identity of :meth:`combine`): plain JSON-able data, since
        summaries travel between engines as rows."""
        raise self._cannot_summarize()

    def _summarize_event(self, summary: Any, event: Mapping[str, Any]) -> None:
        """Fold one event into ``summary`` (mutate it); refuse before mutating, as
        ``_on_event`` does."""
        raise self._cannot_summarize()

    def combine(self, a: Any, b: Any) -> Any:
        """The summary of two disjoint parts of one key's events of a batch; associative and
        commutative, :meth:`_new_summary` its identity; returns a new value."""
        raise self._cannot_summarize()

    def _apply_summary(self, state: Any, key: str, summary: Any) -> list[ComplexEvent]:
        """Mutate ``state`` as the summarized events would have; return their outputs."""
        raise self._cannot_summarize()

    def _cannot_summarize(self) -> OperatorInputError:
        return OperatorInputError(
            "state", f"operator {self.app!r} ({type(self).__name__}) offers no summary of "
            "a part of a key's events (summarize, combine, apply_summary): its keys cannot be "
            "split over engines"
        )

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"
