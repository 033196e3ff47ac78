"""Watching a run without Spark (issue 28 item 4): ``keyshift status``, ``report`` and
``dead-letters`` read the warehouse through delta-rs (``keyshift.lakehouse.delta_arrow``,
``keyshift.streaming.runs.ArrowRows``) and give what the Spark path gives, on one real run
of the streaming job (Kafka, Spark, Delta) with malformed records among its input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from keyshift.cli import main

# the shared run is made in the first test's setup, which counts toward its timeout
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

TOTAL, BAD = 600, 8  # bad kinds cycle: 2 each of malformed json, missing field, wrong type, oversized
TABLES = ("metrics", "decisions", "migrations", "control_state", "key_loads", "dead_letter",
          "events_out", "state_snapshots")


@pytest.fixture(scope="module")
def finished(spark, spark_config, tmp_path_factory) -> tuple:
    """(config, config file, run id) of one finished DLB-H wordcount run whose input had
    ``BAD`` malformed records, in a warehouse of its own. Its broker is its own, stopped once
    the run is done, with a start-up deadline for a machine as loaded as CI's can be."""
    from engines_support import job_config, new_topic, produce_events, run_job

    from keyshift.config import load_config
    from keyshift.streaming.broker import Broker, free_port

    home = tmp_path_factory.mktemp("watch")
    conf = home / "keyshift.toml"
    port, controller = free_port(), free_port()
    while controller == port:
        controller = free_port()
    base = spark_config
    conf.write_text(
        f'home = "{home}"\n[groups]\ncount = {base.groups.count}\n'
        f'[kafka]\nport = {port}\ncontroller_port = {controller}\nstartup_timeout_s = 300\n'
        f'[spark]\nmaster = "{base.spark.master}"\ntrigger_s = {base.spark.trigger_s}\n'
        f'shuffle_partitions = {base.spark.shuffle_partitions}\n')
    cfg = job_config(load_config(conf, env={}), policy="dlb-h", theta=10.0)
    assert cfg.warehouse_uri.startswith(str(home))
    broker = Broker.from_config(cfg, folder=home / "kafka")
    broker.start()
    try:
        topic = new_topic(cfg.kafka.bootstrap)
        produce_events(cfg.kafka.bootstrap, topic, "wordcount", TOTAL,
                       skew="zipf:0.2@0,1.5@300", keys=200, malformed=BAD)
        run_id = f"watch-{topic}"
        run_job(spark, cfg, "wordcount", "dlb-h", topic, TOTAL, params={"window_s": 1.0},
                max_offsets=300, run_id=run_id)
    finally:
        broker.stop()
    return cfg, conf, run_id


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal as sets of rows: the columns, then every value (arrays by their items)."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)

    def key(df: pd.DataFrame) -> list:
        return sorted(json.dumps([_plain(v) for v in row], default=str)
                      for row in df.itertuples(index=False))

    assert key(a) == key(b)


def _plain(value):
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and value != value:
        return None
    if value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


def test_the_fast_path_reads_the_rows_the_spark_path_reads(finished, spark) -> None:
    from keyshift.streaming.runs import ArrowRows, SparkRows, overview, recent

    cfg, _, run_id = finished
    fast, slow = ArrowRows(cfg), SparkRows(spark, cfg)
    for name in TABLES:
        got, want = fast.frame(name, run_id), slow.frame(name, run_id)
        # control_state, migrations, state_snapshots: rows only when the plan changed
        assert len(want) or name not in ("metrics", "decisions", "key_loads", "dead_letter",
                                         "events_out"), name
        _same(got, want)
    _same(fast.frame("plans"), slow.frame("plans"))
    assert len(fast.frame("dead_letter", run_id)) == BAD
    assert overview(fast, cfg, now=0.0) == overview(slow, cfg, now=0.0)
    assert recent(fast, cfg, run_id, 5) == recent(slow, cfg, run_id, 5)


def test_status_report_and_dead_letters_of_a_finished_run_start_no_jvm(finished,
                                                                       tmp_path) -> None:
    """In a process where Java cannot be found and pyspark is never imported: each command
    answers from the warehouse, so none of them took the Spark path."""
    _, conf, run_id = finished
    script = (
        "import sys\n"
        "from keyshift.cli import main\n"
        "codes = [main(argv) for argv in (\n"
        f"    ['status', '--config', {str(conf)!r}, '--json'],\n"
        f"    ['status', '--config', {str(conf)!r}, '--run-id', {run_id!r}],\n"
        f"    ['report', {run_id!r}, '--config', {str(conf)!r}, '--out', "
        f"{str(tmp_path / 'rep')!r}],\n"
        f"    ['dead-letters', {run_id!r}, '--config', {str(conf)!r}, '--json'])]\n"
        "print('CODES', codes, 'pyspark' in sys.modules, file=sys.stderr)\n")
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}  # Spark's launcher takes it
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert "CODES [0, 0, 0, 0] False" in done.stderr, done.stderr[-3000:]
    assert "reading the warehouse with Spark" not in done.stderr
    assert (tmp_path / "rep" / "report.html").stat().st_size > 1000
    lines = done.stdout.strip().splitlines()
    runs = json.loads(lines[0])["runs"]
    assert [r["run_id"] for r in runs] == [run_id]
    assert runs[0]["dead_letters"] == BAD and runs[0]["events_in"] == TOTAL - BAD
    assert not runs[0]["alive"]  # a clean stop cleared its heartbeat
    assert json.loads(lines[-1])["total"] == BAD


def test_dead_letters_counts_reasons_with_samples_where_kafka_has_them(finished, spark,
                                                                       capsys) -> None:
    cfg, conf, run_id = finished
    code = main(["dead-letters", run_id, "--config", str(conf), "--limit", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)
    assert got["run_id"] == run_id and got["total"] == BAD
    reasons = {r["reason"]: r for r in got["reasons"]}
    assert sum(r["count"] for r in got["reasons"]) == BAD
    assert [r["count"] for r in got["reasons"]] == sorted(
        (r["count"] for r in got["reasons"]), reverse=True)
    assert reasons["malformed json"]["count"] == 2
    assert reasons["missing field: key"]["count"] == 2
    assert reasons["wrong type: ts (expected BIGINT)"]["count"] == 2
    oversized = [reasons["oversized: N bytes > 65536"]]
    assert oversized[0]["count"] == 2
    stored = {(r.partition, r.offset): r for r in spark.read.format("delta")
              .load(cfg.table_path("dead_letter")).where(f"run_id = '{run_id}'").collect()}
    for r in got["reasons"]:
        assert len(r["samples"]) == 1
        s = r["samples"][0]
        row = stored[(s["partition"], s["offset"])]  # a record Kafka holds at that place
        assert row.reason == s["reason"] and row.raw.startswith(s["raw"])
        assert s["raw_chars"] == len(row.raw) and len(s["raw"]) <= 200
    assert oversized[0]["samples"][0]["raw_chars"] > 200  # cut, and says how long it was

    code = main(["dead-letters", run_id, "--config", str(conf)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"dead letters of run {run_id}: {BAD} in" in out
    assert "missing field: key" in out and "chars)" in out


def test_an_unknown_run_is_one_line_naming_the_known_ones_without_spark(finished, capsys,
                                                                        monkeypatch) -> None:
    from keyshift.streaming import runs

    def no_spark(*args, **kwargs):
        raise AssertionError("the Spark path was taken")

    monkeypatch.setattr(runs, "open_spark", no_spark)
    _, conf, run_id = finished
    for argv in (["dead-letters", "nope"], ["report", "nope"], ["status", "--run-id", "nope"]):
        code = main([*argv, "--config", str(conf)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", err
        assert err.count("\n") == 1, err
        assert "no run 'nope' in the warehouse at " in err and f"known runs, newest first: "\
            f"{run_id}" in err, err


def test_where_delta_rs_cannot_read_the_spark_path_answers_and_says_so(finished, spark,
                                                                       capsys,
                                                                       monkeypatch) -> None:
    from keyshift.lakehouse.delta_arrow import FastReadUnavailable
    from keyshift.streaming import runs

    def refuse(self, name, *args, **kwargs):
        raise FastReadUnavailable(f"{name}: delta-rs cannot read the table at /x: a test")

    opened = []
    monkeypatch.setattr(runs.ArrowRows, "frame", refuse)
    monkeypatch.setattr(runs, "open_spark", lambda *a, **k: opened.append(a) or spark)
    _, conf, run_id = finished
    code = main(["status", "--config", str(conf), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(opened) == 1
    assert err == ("reading the warehouse with Spark (slower): metrics: delta-rs cannot read "
                   "the table at /x: a test\n")
    (run,) = json.loads(out)["runs"]
    assert run["run_id"] == run_id and run["dead_letters"] == BAD
