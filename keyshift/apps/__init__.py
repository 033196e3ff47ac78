"""The operators of the four shipped applications behind one interface (:mod:`.base`).

``make_operator(app, **params)`` builds one by name, like ``make_policy`` for policies.
"""

from __future__ import annotations

from typing import Any

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, order_key
from keyshift.apps.clicks import ClickPatterns, TopK
from keyshift.apps.fsd import FirstStoryDetection
from keyshift.apps.traffic import TrafficAnomaly
from keyshift.apps.wordcount import WindowedWordCount

OPERATORS: dict[str, type[Operator]] = {
    "fsd": FirstStoryDetection,
    "traffic": TrafficAnomaly,
    "clicks": ClickPatterns,
    "wordcount": WindowedWordCount,
}


def make_operator(app: str, **params: Any) -> Operator:
    """Build an application's operator; a bad name or parameter names the field."""
    try:
        cls = OPERATORS[app]
    except KeyError:
        raise OperatorInputError(
            "app", f"unknown application {app!r}; choose one of {', '.join(sorted(OPERATORS))}"
        ) from None
    try:
        return cls(**params)
    except TypeError as exc:
        raise OperatorInputError("params", f"{app}: {exc}") from None


__all__ = [
    "OPERATORS",
    "ClickPatterns",
    "ComplexEvent",
    "FirstStoryDetection",
    "Operator",
    "OperatorInputError",
    "TopK",
    "TrafficAnomaly",
    "WindowedWordCount",
    "make_operator",
    "order_key",
]
