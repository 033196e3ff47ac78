"""Operators: the Operator API (:mod:`.base`), the shipped applications, and the one
resolver (:mod:`.registry`) that loads an operator by shipped name, entry point (group
``keyshift.operators``) or ``module:Class``.

``make_operator(spec, **params)`` builds one, like ``make_policy`` for policies.
"""

from __future__ import annotations

from keyshift.apps.base import (
    OPERATOR_API_VERSION,
    SUPPORTED_API_VERSIONS,
    ComplexEvent,
    Operator,
    OperatorInputError,
    detail_json,
    order_key,
)
from keyshift.apps.clicks import ClickPatterns, TopK
from keyshift.apps.fsd import FirstStoryDetection
from keyshift.apps.heavy import HeavyRule
from keyshift.apps.registry import (
    ENTRY_POINT_GROUP,
    SHIPPED,
    OperatorSpec,
    UnknownOperatorError,
    event_schema,
    known_operator,
    make_operator,
    resolve_operator,
    shipped_event_schemas,
)
from keyshift.apps.traffic import TrafficAnomaly
from keyshift.apps.wordcount import WindowedWordCount

OPERATORS = SHIPPED  # the shipped applications by name (older name)
EVENTS = shipped_event_schemas()  # the shipped applications' Kafka event schemas by name

__all__ = [
    "ENTRY_POINT_GROUP",
    "EVENTS",
    "OPERATORS",
    "OPERATOR_API_VERSION",
    "SHIPPED",
    "SUPPORTED_API_VERSIONS",
    "ClickPatterns",
    "ComplexEvent",
    "FirstStoryDetection",
    "HeavyRule",
    "Operator",
    "OperatorInputError",
    "OperatorSpec",
    "TopK",
    "TrafficAnomaly",
    "UnknownOperatorError",
    "WindowedWordCount",
    "detail_json",
    "event_schema",
    "known_operator",
    "make_operator",
    "order_key",
    "resolve_operator",
]
