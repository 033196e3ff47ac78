"""``keyshift stream`` input checks (no Spark needed: they fail before the session starts)."""

from __future__ import annotations

import pytest

from keyshift.cli import main
from keyshift.streaming.broker import free_port


@pytest.mark.parametrize("argv, field", [
    (["--run-id", "bad id!"], "--run-id"),
    (["--window", "0"], "--window"),
    (["--duration", "-3"], "--duration"),
    (["--policy", "nope"], "--policy"),
    (["--no-routing", "--policy", "dlb-h"], "--no-routing"),
    (["--app", "nosuch.module:Op"], "--app"),
    (["--scope", "baseline"], "--scope"),
])
def test_stream_bad_input_exits_2(argv, field, capsys):
    try:
        code = main(["stream", *argv])
    except SystemExit as stop:  # argparse's refusal: a run id is its type (keyshift.run_ids)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_stream_options_are_the_jobs_ingest_mode():
    """One pipeline: ``keyshift stream`` is StreamJob with ingest_only, kg by default."""
    import argparse

    from keyshift.config import load_config
    from keyshift.streaming.commands.stream import ingest_options, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    base = load_config(env={})
    cfg, opts = ingest_options(parser.parse_args(
        ["stream", "--app", "traffic", "--run-id", "r1", "--window", "3", "--topic", "t"]), base)
    assert opts.ingest_only and opts.policy == "kg" and opts.app == "traffic"
    assert (opts.run_id, opts.topic, opts.trigger_s, opts.engines) == ("r1", "t", 3.0, None)
    assert cfg.controller.window_s == 3.0 and not cfg.planner.enabled
    _, one = ingest_options(parser.parse_args(["stream", "--no-routing"]), base)
    assert one.engines == 1 and one.policy == "kg" and one.trigger_s is None


def test_stream_without_broker_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(free_port()))
    assert main(["stream", "--duration", "1"]) == 2  # the same check as keyshift run
    err = capsys.readouterr().err
    assert "no Kafka broker answers" in err and "Traceback" not in err


@pytest.mark.integration
def test_kafka_fetch_jars_uses_the_cache(capsys):
    # The cache is filled by the first integration run (or the install step), so this is an
    # offline lookup; it proves both jar sets resolve and are reported.
    assert main(["kafka", "fetch-jars"]) == 0
    out = capsys.readouterr().out
    assert "broker jars" in out and "Spark jars" in out
