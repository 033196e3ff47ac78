"""Decision.info is a typed DecisionInfo (issue 25 item 3): the facts the loop, the simulator
and the job act on are fields; the policy's own facts are ``details``; a third-party policy
that returns a plain dict still works; ``keyshift rebalance --json`` keeps its ``info``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from keyshift.plan import Plan
from keyshift.policies import (
    DecisionInfo,
    Policy,
    PolicyInputError,
    SplitRouting,
    Window,
    make_policy,
)


class DictPolicy(Policy):
    """A third-party policy written against the dict contract."""

    name = "dict-policy"
    kind = "reference"

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], None]:
        return plan, {"reason": "kept", "stateful_safe": False, "engines_changed": False,
                      "routing": {"groups": [0], "engines": [1], "share": [0.25]},
                      "split_keys": 1, "mine": 7}, None


def test_a_plain_dict_becomes_typed_facts_and_details() -> None:
    d = DictPolicy().decide(Plan.hashed(2, 2), Window(np.array([4.0, 4.0])))
    assert isinstance(d.info, DecisionInfo)
    assert d.info.reason == "kept" and d.info.stateful_safe is False
    assert d.info.engines_changed is False and not d.changed
    assert d.info.split_keys == 1 and d.info.details == {"mine": 7}
    assert isinstance(d.info.routing, SplitRouting)
    assert d.info.routing.groups.tolist() == [0] and d.info.routing.share.tolist() == [0.25]
    assert d.to_dict()["info"] == {
        "reason": "kept", "split_keys": 1,
        "routing": {"groups": [0], "engines": [1], "share": [0.25]},
        "stateful_safe": False, "engines_changed": False, "mine": 7}


def test_a_bad_routing_names_the_field() -> None:
    with pytest.raises(PolicyInputError, match="routing"):
        DecisionInfo.of({"routing": {"groups": [0]}})


def test_the_defaults_report_nothing() -> None:
    info = DecisionInfo.of(None)
    assert info == DecisionInfo() and info.as_dict() == {}
    assert info.routing is None and info.stateful_safe and info.engines_changed is None


@pytest.mark.parametrize("policy, params, keys", [
    ("kg", {}, {"reason"}),
    ("pkg", {}, {"split_keys", "routing", "stateful_safe", "warning"}),
    ("wc", {}, {"split_keys", "routing", "stateful_safe", "hot_keys", "choices",
                "hot_threshold", "warning"}),
    ("dlb-h", {"theta": 1}, {"reason", "steps", "theta", "policy"}),
])
def test_the_json_info_keeps_the_keys_the_policy_reports(policy, params, keys) -> None:
    d = make_policy(policy, **params).decide(Plan.hashed(8, 2),
                                              Window(np.arange(1.0, 9.0) ** 2))
    info = json.loads(json.dumps(d.to_dict()))["info"]
    assert set(info) == keys


def test_elb_reports_whether_it_changed_the_engine_count() -> None:
    d = make_policy("elb", band=[8, 12]).decide(Plan.hashed(40, 2), Window(np.ones(40)))
    assert d.info.engines_changed is True and d.changed
    assert d.to_dict()["info"]["engines_changed"] is True
    assert d.info.details["pi"] == d.plan.parallelism
