"""``keyshift stream`` input checks (no Spark needed: they fail before the session starts)."""

from __future__ import annotations

import pytest

from keyshift.cli import main
from streaming.broker import free_port


@pytest.mark.parametrize("argv, field", [
    (["--run-id", "bad id!"], "--run-id"),
    (["--window", "0"], "--window"),
    (["--duration", "-3"], "--duration"),
])
def test_stream_bad_input_exits_2(argv, field, capsys):
    assert main(["stream", *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_stream_without_broker_is_a_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(free_port()))
    assert main(["stream", "--duration", "1"]) == 1
    assert "no Kafka broker answers" in capsys.readouterr().err


@pytest.mark.integration
def test_kafka_fetch_jars_uses_the_cache(capsys):
    # The cache is filled by the first integration run (or the install step), so this is an
    # offline lookup; it proves both jar sets resolve and are reported.
    assert main(["kafka", "fetch-jars"]) == 0
    out = capsys.readouterr().out
    assert "broker jars" in out and "Spark jars" in out
