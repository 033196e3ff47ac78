"""Counters a user can trust (issue 46 item 9): one vocabulary (records = valid + dead
letters, processed) in ``run --json``, ``status`` and ``report``, each batch id counted once
(a batch a resumed run ran again too), and a report rounded for people while ``--json``
stays exact. The warehouse is written by delta-rs here (no JVM, no Kafka); ``keyshift run``'s
summary is built from a job that only reports its batches."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.lakehouse.delta_arrow import arrow_schema

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
VALID, DEAD = 100, 2  # per batch
COUNTS = ("records", "valid", "dead_letters", "events_in", "dead_letter")


def _write(cfg, name: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    schema = arrow_schema(name)
    data = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)
    write_deltalake(cfg.table_path(name), data, mode="append")


def _metrics(batch: int) -> dict:
    return {"schema_version": 4, "run_id": "r", "batch_id": batch,
            "window_start": T0 + timedelta(seconds=2 * batch),
            "window_end": T0 + timedelta(seconds=2 * batch + 1), "events_in": VALID,
            "dead_letter": DEAD, "processed": VALID, "out_events": 3, "missed": 0,
            "selectivity": 0.03, "engines": 2, "engine_loads": [60, 40],
            "rstd": 49.21336605569506, "var_load": 100.0, "input_rate": 100.0,
            "latency_s": 0.00012345678, "batch_duration_s": 0.512345678, "plan_version": 1,
            "policy": "kg"}


@pytest.fixture()
def warehouse(tmp_path):
    """(config file, config) of a home whose warehouse holds run ``r``: batches 0-3."""
    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{tmp_path / "home"}"\n')
    cfg = load_config(conf, env={})
    _write(cfg, "metrics", [_metrics(b) for b in range(4)])
    return conf, cfg


class _Job:
    """What ``keyshift run``'s summary reads of a job: its own running totals (which count a
    batch as often as it ran), its run id, no Spark session."""

    run_id, spark = "r", None

    def __init__(self, batches: list[int]) -> None:
        self.batches = batches

    def summary(self) -> dict:
        n = len(self.batches)
        return {"batches": n, "records": n * (VALID + DEAD), "events_in": n * VALID,
                "processed": n * VALID, "dead_letter": n * DEAD, "complex_events": 3 * n,
                "migrations": 0, "busy_s": 0.5 * n, "events_per_s": 0.0,
                "batch_p50_s": 0.5, "batch_p95_s": 0.5, "run_id": "r"}


def _ledger(batches: list[int]):
    from keyshift.streaming.commands.run import BatchLedger
    from keyshift.streaming.job import BatchReport

    ledger = BatchLedger()
    for b in batches:
        ledger.add(BatchReport(b, VALID, DEAD, 3, 10.0, 2, 1, 0, 0, 0.5))
    return ledger


def _cli(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_run_status_and_report_count_the_same_run_alike(warehouse, tmp_path, capsys) -> None:
    from keyshift.streaming.commands.run import run_summary

    conf, cfg = warehouse
    report = _cli(capsys, "report", "r", "--config", str(conf), "--json", "--out",
                  str(tmp_path / "rep"))
    (status,) = _cli(capsys, "status", "--config", str(conf), "--json")["runs"]
    one = _cli(capsys, "status", "--config", str(conf), "--run-id", "r", "--json")["run"]
    ran = run_summary(_Job([0, 1, 2, 3]), _ledger([0, 1, 2, 3]), cfg)
    want = {"records": 4 * (VALID + DEAD), "valid": 4 * VALID, "dead_letters": 4 * DEAD,
            "events_in": 4 * VALID, "dead_letter": 4 * DEAD}
    for got in (report, status, one, ran):
        assert {k: got[k] for k in COUNTS} == want, got
    assert report["processed"] == ran["processed"] == 4 * VALID
    assert report["batches"] == status["batches"] == ran["batches"] == 4


def test_a_resumed_run_counts_a_batch_it_ran_again_once(warehouse) -> None:
    """The first process ran batches 0-2 and was stopped by Ctrl-C before Spark recorded
    batch 2 as done; the resumed one ran batch 2 again, then 3 (twice: started again in
    place after an outage). The warehouse holds each batch once, and so do the counts."""
    from keyshift.streaming.commands.run import run_summary
    from keyshift.streaming.report import batch_counters

    _, cfg = warehouse
    resumed = [2, 3, 3]
    got = run_summary(_Job(resumed), _ledger(resumed), cfg)
    assert got["counted_from"] == "warehouse"
    assert (got["batches"], got["records"], got["valid"]) == (4, 4 * (VALID + DEAD), 4 * VALID)
    mine = got["this_process"]
    assert (mine["batches"], mine["records"], mine["dead_letters"], mine["complex_events"]) \
        == (2, 2 * (VALID + DEAD), 2 * DEAD, 6)
    assert got["events_per_s"] == pytest.approx(2 * VALID / 1.5)
    # without a readable warehouse: this process's batches, each id once
    gone = cfg.model_copy(update={"home": str(cfg.home_path / "elsewhere")})
    alone = run_summary(_Job(resumed), _ledger(resumed), gone)
    assert alone["counted_from"] == "this process" and alone["records"] == 2 * (VALID + DEAD)
    assert batch_counters([(5, 1, 0, 1), (5, 1, 0, 1), (6, 2, 1, 2)])["records"] == 4


def test_the_report_is_rounded_for_people_and_exact_in_json(warehouse, tmp_path) -> None:
    from keyshift.streaming.report import human, report_run
    from keyshift.streaming.runs import ArrowRows

    _, cfg = warehouse
    extra = {"vs_kg": {"busiest_vs_kg": 0.8123456789, "windows": 2}, "seeded": None}
    summary = report_run(ArrowRows(cfg), cfg, "r", tmp_path / "rep", "wordcount", extra=extra)
    assert summary["rstd_mean"] == 49.21336605569506  # exact in --json and summary.json
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["vs_kg"] == \
        extra["vs_kg"]
    page = (tmp_path / "rep" / "report.html").read_text()
    body = page[page.index("<body>"):]
    assert "None" not in body and "{" not in body and "nan" not in body.lower()
    assert not re.findall(r"\d\.\d{4,}", body), re.findall(r".{40}\d\.\d{4,}.{10}", body)
    assert "<td>rstd_mean</td><td>49.21</td>" in body
    assert "<td>vs_kg</td><td>busiest_vs_kg: 0.812; windows: 2</td>" in body
    assert "<td>records</td><td>408</td>" in body
    assert [human(x) for x in (1234567, 0.000123, 1234.5678, None, True, [1, 2.5])] == [
        "1,234,567", "0.000", "1,234.6", "n/a", "yes", "1, 2.50"]
