"""Hypothesis strategies and request mutations shared by the fuzz tests of the JSON commands
(tests/keyshift/commands/test_fuzz_commands.py) and of the event path
(tests/streaming/test_fuzz_events.py)."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

numbers = st.one_of(
    st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**63, -(2**63) - 1, 2**64, 1e308, 5e-324, 1e-300]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6),
                            st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=25,
)


def paths_of(doc, prefix=()):
    """Every place in a request a fuzzed value can go: keys, list items, nested fields."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out += paths_of(v, prefix + (k,))
    elif isinstance(doc, list) and doc:
        out.append(prefix + (0,))
        out += paths_of(doc[0], prefix + (0,))
    return out


def mutated(doc, path, value, how):
    doc = copy.deepcopy(doc)
    node = doc
    for part in path[:-1]:
        node = node[part]
    last = path[-1]
    if how == "delete" and isinstance(node, dict):
        del node[last]
    elif how == "extra" and isinstance(node, dict):
        node["\u00e9xtra\u2603"] = value
    else:
        node[last] = value
    return doc
