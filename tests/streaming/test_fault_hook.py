"""The fault tests' hook (keyshift.streaming.faults): injected into the job through
``JobOptions.phases``, nothing unless ``KS_FAULT_KILL_AT`` asks for it, and a bad value
refused when ``keyshift run`` starts rather than at the first phase the job reaches."""

from __future__ import annotations

import argparse

import pytest

from keyshift.cli import UsageError
from keyshift.config import load_config
from keyshift.streaming import faults
from keyshift.streaming.faults import ENV, NO_FAULTS, KillAt, phases_from_env


def test_no_variable_no_faults() -> None:
    assert phases_from_env({}) is NO_FAULTS
    NO_FAULTS.reached("engines", 3)
    with NO_FAULTS.during("writes", 3):
        pass


def test_the_hook_kills_at_its_phase_from_its_batch_on(monkeypatch) -> None:
    killed: list[tuple[str, int]] = []
    hook = phases_from_env({ENV: "controller@2"})
    assert isinstance(hook, KillAt)
    monkeypatch.setattr(hook, "_kill", lambda: killed.append(("now", 0)))
    hook.reached("controller", 1)
    hook.reached("writes", 2)
    assert killed == []
    hook.reached("controller", 2)
    assert len(killed) == 1


def test_during_arms_a_timer_only_for_its_phase(monkeypatch) -> None:
    import threading

    fired = threading.Event()
    hook = KillAt("writes@0")
    monkeypatch.setattr(hook, "_kill", fired.set)
    with hook.during("engines", 5, after_s=0.0):
        pass
    assert not fired.wait(0.05)
    with hook.during("writes", 5, after_s=0.0):
        assert fired.wait(2.0)


def test_a_phase_that_ends_before_its_delay_is_killed_as_it_ends(monkeypatch) -> None:
    """A write faster than ``after_s`` (delta-rs's 0.02 s commit) is still killed inside its
    phase, once."""
    killed: list[int] = []
    hook = KillAt("writes@0")
    monkeypatch.setattr(hook, "_kill", lambda: killed.append(1))
    with hook.during("writes", 5, after_s=30.0):
        assert killed == []
    assert killed == [1]


@pytest.mark.parametrize("spec", ["nowhere@1", "engines", "engines@x"])
def test_a_bad_value_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=f"{ENV}=.*expected PHASE@BATCH"):
        phases_from_env({ENV: spec})


def test_keyshift_run_refuses_a_bad_value_at_start(monkeypatch) -> None:
    from keyshift.streaming.commands.run import add_arguments, options_from

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(["--app", "wordcount", "--policy", "kg"])
    cfg = load_config(env={})
    assert options_from(ns, cfg).phases is NO_FAULTS
    monkeypatch.setenv(ENV, "engines@2")
    assert isinstance(options_from(ns, cfg).phases, KillAt)
    monkeypatch.setenv(ENV, "engine@2")
    with pytest.raises(UsageError, match="expected PHASE@BATCH"):
        options_from(ns, cfg)
    assert faults.PHASES[0] == "before_engines"
