"""The Operator API's optional merge of partial per-key state (for key-splitting policies):
word count merges, FSD and the CEP patterns refuse, the loader checks the declaration."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.apps import OPERATOR_API_VERSION, SHIPPED, Operator, OperatorInputError
from keyshift.apps.declaration import DeclarationError, check_declaration
from keyshift.apps.wordcount import WindowedWordCount


def _events(times: list[int]) -> list[dict]:
    return [{"id": f"e{i}", "key": "w", "ts": t, "word": "w"} for i, t in enumerate(times)]


def _state(op: WindowedWordCount, events: list[dict]) -> list[int]:
    op.init()
    for e in events:
        op.process(e, 0)
    return op._groups[0]["w"] if events else op._new_state()


@settings(max_examples=100, deadline=None)
@given(times=st.lists(st.integers(0, 9_999), max_size=40), cut=st.lists(st.booleans(), max_size=40))
def test_word_count_partial_states_of_a_window_add_up_to_one_engines_state(times, cut):
    """A hot word's events of one window split over two engines in any way merge into the
    state of one engine that saw them all (merge is commutative; empty is the identity)."""
    events = _events(sorted(times))  # one 10 s window: 0..9,999 ms
    side = [cut[i] if i < len(cut) else False for i in range(len(events))]
    op = WindowedWordCount(window_s=10.0)
    whole = _state(op, events)
    a = _state(op, [e for e, s in zip(events, side, strict=True) if s])
    b = _state(op, [e for e, s in zip(events, side, strict=True) if not s])
    assert op.merge(a, b) == op.merge(b, a) == whole
    assert op.merge(whole, op._new_state()) == whole


def test_word_count_refuses_to_merge_parts_of_different_windows():
    op = WindowedWordCount(window_s=10.0)
    early, late = _state(op, _events([1_000])), _state(op, _events([12_000]))
    with pytest.raises(OperatorInputError, match="^state: wordcount: .*windows starting at 0"):
        op.merge(early, late)


@pytest.mark.parametrize("app", ["fsd", "traffic", "clicks"])
def test_cep_operators_are_not_mergeable_and_say_so(app):
    cls = SHIPPED[app]
    assert cls.mergeable is False
    with pytest.raises(OperatorInputError, match=rf"^state: operator '{app}' .*mergeable = False"):
        cls().merge({}, {})


def test_merge_is_additive_to_api_version_1():
    assert OPERATOR_API_VERSION == 1 and Operator.mergeable is False
    assert SHIPPED["wordcount"].mergeable is True
    for cls in SHIPPED.values():
        check_declaration(cls)


class _Counter(Operator):
    app = "counter"

    def _new_state(self) -> list[int]:
        return [0]

    def _on_event(self, state: list[int], event: Mapping[str, object]) -> list:
        state[0] += 1
        return []


def test_the_loader_refuses_mergeable_without_merge_and_a_non_bool_flag():
    claims = type("Claims", (_Counter,), {"mergeable": True})
    with pytest.raises(DeclarationError, match="mergeable = True but does not implement merge"):
        check_declaration(claims)
    odd = type("Odd", (_Counter,), {"mergeable": "yes"})
    with pytest.raises(DeclarationError, match="mergeable must be True or False"):
        check_declaration(odd)
    fine = type("Fine", (_Counter,), {"mergeable": True, "merge": lambda self, a, b: [a[0] + b[0]]})
    check_declaration(fine)
