"""Your own operator through ``keyshift run``: the example package's session operator (not one
of the shipped apps), loaded by ``module:Class``, on a real broker, Spark and Delta, with
DLB-H moving groups; its complex events equal the single-operator reference. And the
command's bad input: each a single line and exit status 2, before Spark starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engines_support import new_topic, outputs, reference, table_rows

from keyshift.cli import main
from keyshift.examples.sessions import SPEC, generate

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"gap_s": 2.0, "alert_amount": 100.0}


def _send(bootstrap: str, topic: str, events: list[dict], extra: list[bytes] = ()) -> None:
    from keyshift.streaming.producer import connect

    producer = connect(bootstrap)
    for e in events:
        producer.send(topic, key=str(e["key"]).encode(), value=json.dumps(e).encode())
    for raw in extra:
        producer.send(topic, value=raw)
    producer.flush()
    producer.close()


def _env(cfg) -> dict[str, str]:
    return {
        **os.environ,
        "KEYSHIFT_HOME": str(cfg.home_path),
        "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
        "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count),
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",
        "KEYSHIFT_CONTROLLER__THETA": "10.0",
        "PYSPARK_PYTHON": sys.executable,
    }


@pytest.mark.integration
@pytest.mark.slow
def test_own_operator_runs_end_to_end_and_matches_the_reference(spark, platform_config) -> None:
    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap)
    events = generate(900, keys=20, seed=3, gap_s=2.0)
    _send(cfg.kafka.bootstrap, topic, events, extra=[b"{not json", b'{"id": "x", "key": "k"}'])
    proc = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "run", "--app", SPEC, "--params",
         json.dumps(PARAMS), "--topic", topic, "--policy", "dlb-h", "--engines", "3",
         "--max-offsets", "150", "--run-id", "own-op", "--available-now", "--json"],
        cwd=ROOT, env=_env(cfg), capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["events_in"] == len(events) and summary["dead_letter"] == 2
    assert summary["processed"] == summary["events_in"]
    assert summary["batches"] >= 6  # times are the bench's business: here only their keys
    assert {"busy_s", "events_per_s", "batch_p50_s", "batch_p95_s"} <= set(summary)
    # one progress line per batch on stderr, and no Spark WARN flood
    lines = [x for x in proc.stderr.splitlines() if x.startswith("batch ")]
    assert len(lines) == summary["batches"]
    assert not [x for x in proc.stderr.splitlines() if " WARN " in x]
    ref = reference(SPEC, events, cfg.groups.count, PARAMS)
    assert ref and outputs(spark, cfg, "own-op") == ref
    dead = table_rows(spark, cfg, "dead_letter", "own-op")
    assert sorted(r.reason for r in dead) == ["malformed json", "missing field: ts"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--app", "no.such.module:Op"], "--app"),
        (["--app", "keyshift.examples.sessions:Nope"], "--app"),
        (["--app", "wordcount", "--params", "[1]"], "--params"),
        (["--app", "wordcount", "--params", '{"nope": 1}'], "--params"),
        (["--app", "heavy", "--params", '{"work_us": -1}'], "--params: work_us"),
        (["--app", "wordcount", "--policy", "nope"], "--policy"),
        (["--app", "wordcount", "--engines", "999"], "--engines"),
        (["--app", "wordcount", "--max-offsets", "0"], "--max-offsets"),
        (["--app", "wordcount", "--run-id", "bad id!"], "--run-id"),
        (["--app", "wordcount", "--duration", "-1"], "--duration"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, field, capsys, ks_home) -> None:
    try:
        code = main(["run", *argv])
    except SystemExit as stop:  # argparse's refusal: a run id is its type (keyshift.run_ids)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err, err


def test_an_unknown_parameter_is_named_with_the_ones_the_operator_takes(capsys, ks_home) -> None:
    assert main(["run", "--app", "wordcount", "--params", '{"window": 5}']) == 2
    err = capsys.readouterr().err.strip()
    assert "--params: wordcount: unknown parameter 'window'; wordcount takes window_s, " \
           "min_count" in err and "unexpected keyword" not in err


def test_a_broker_that_is_down_is_one_line(capsys, ks_home, monkeypatch) -> None:
    from keyshift.streaming.broker import free_port

    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(free_port()))
    assert main(["run", "--app", "wordcount", "--topic", "t"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "kafka" in err and "no Kafka broker answers" in err


@pytest.mark.integration
def test_a_missing_topic_is_one_line(capsys, ks_home, monkeypatch, kafka_broker) -> None:
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(kafka_broker.port))
    assert main(["run", "--app", "wordcount", "--topic", "no-such-topic"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--topic" in err and "no-such-topic" in err
