"""Workload names: what a run, its metrics rows and its registered forecasters are keyed by."""

from __future__ import annotations

import pytest

from keyshift.config import ConfigError, config_workload, load_config, with_workload
from keyshift.workload_names import (
    WorkloadNameError,
    check_workload,
    registered_name,
    workload_from_name,
    workload_of,
)


def test_a_run_is_its_operator_on_its_topic_unless_named() -> None:
    assert workload_of("heavy", "clicks") == "heavy.clicks"
    # a user's operator spec and an odd topic still make a registered model's name
    assert workload_of("mypkg.rules:Fraud Rule", "pay/ments") == "mypkg.rules-Fraud-Rule.pay-ments"
    assert workload_of("heavy", "clicks", "fraud-eu") == "fraud-eu"


@pytest.mark.parametrize("bad", ["a/b", "a:b", "x@champion", "-lead", "", "a" * 121])
def test_a_name_that_cannot_name_a_model_is_refused(bad: str) -> None:
    with pytest.raises(WorkloadNameError, match="workload: "):
        check_workload(bad)


def test_registered_names_carry_the_workload_and_give_it_back() -> None:
    name = registered_name("keyshift-input-rate", "fsd.events")
    assert name == "keyshift-input-rate.fsd.events"
    assert workload_from_name("keyshift-input-rate", name) == "fsd.events"
    assert workload_from_name("keyshift-input-rate", "keyshift-input-rate") is None
    assert workload_from_name("keyshift-input-rate", "keyshift-latency.fsd.events") is None


def test_the_config_key_is_checked_and_a_run_resolves_its_own() -> None:
    with pytest.raises(ConfigError, match="mlflow.workload"):
        load_config(env={}, mlflow={"workload": "a:b"})
    cfg = load_config(env={}, controller={"app": "fsd"}, kafka={"topic": "events"})
    assert config_workload(cfg) == "fsd.events"
    assert with_workload(cfg, "heavy", "clicks").mlflow.workload == "heavy.clicks"
    named = load_config(env={}, mlflow={"workload": "mine"})
    assert with_workload(named, "heavy", "clicks").mlflow.workload == "mine"

