"""``keyshift status`` reads what it shows and no more (issue 46 item 5): a run's operator,
when this home has no ``job.json`` for it, comes from one file of ``events_out`` (the Delta
log's statistics say which), not from the ``app`` column of every row (5.2 s and 1.7 GB at
20 M rows). The rows read are counted here; nothing is timed."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.lakehouse.delta_arrow import arrow_schema

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
FILES, ROWS = 12, 400  # the big run's events_out: FILES appends of ROWS rows


def _write(cfg, name: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    schema = arrow_schema(name)
    data = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)
    write_deltalake(cfg.table_path(name), data, mode="append")


def _metrics(run: str, batch: int) -> dict:
    return {"schema_version": 4, "run_id": run, "batch_id": batch,
            "window_start": T0 + timedelta(seconds=batch), "window_end":
            T0 + timedelta(seconds=batch + 1), "events_in": 10, "dead_letter": 0,
            "processed": 10, "out_events": 1, "missed": 0, "selectivity": 0.1, "engines": 2,
            "engine_loads": [5, 5], "rstd": 0.0, "var_load": 0.0, "input_rate": 10.0,
            "latency_s": 0.01, "batch_duration_s": 0.5, "plan_version": 1, "policy": "kg"}


def _out(run: str, app: str, batch: int, n: int) -> list[dict]:
    return [{"schema_version": 4, "run_id": run, "batch_id": batch, "app": app, "engine": 0,
             "group": i % 7, "key": f"k{i}", "ts": i, "kind": "x", "detail": "{}",
             "event_id": f"{run}-{batch}-{i}"} for i in range(n)]


@pytest.fixture()
def warehouse(tmp_path):
    """Runs ``big`` (wordcount, FILES x ROWS complex events) and ``small`` (fsd, 3), their
    files interleaved in ``events_out``; no job.json in the home."""
    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{tmp_path / "home"}"\n')
    cfg = load_config(conf, env={})
    _write(cfg, "metrics", [_metrics(r, b) for r in ("big", "small") for b in range(2)])
    for b in range(FILES):
        _write(cfg, "events_out", _out("big", "wordcount", b, ROWS))
        if b == FILES // 2:
            _write(cfg, "events_out", _out("small", "fsd", 0, 3))
    return conf


@pytest.fixture()
def rows_read(monkeypatch) -> Counter:
    """Rows of ``events_out`` read, by every way this process reads Parquet or Delta."""
    from deltalake import DeltaTable

    read: Counter = Counter()

    def counted(fn, where):
        def wrapper(*args, **kwargs):
            got = fn(*args, **kwargs)
            if "events_out" in str(where(args)):
                read["rows"] += got.num_rows
            return got
        return wrapper

    monkeypatch.setattr(pq, "read_table", counted(pq.read_table, lambda a: a[0]))
    monkeypatch.setattr(DeltaTable, "to_pyarrow_table",
                        counted(DeltaTable.to_pyarrow_table, lambda a: a[0].table_uri))
    real_dataset = DeltaTable.to_pyarrow_dataset

    def dataset(self, *args, **kwargs):
        if "events_out" in self.table_uri:
            read["datasets"] += 1  # a scan this test cannot count: refused below
        return real_dataset(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", dataset)
    return read


@pytest.mark.parametrize("argv", [["status"], ["status", "--run-id", "big"]])
def test_status_reads_one_file_of_events_out_per_run(warehouse, rows_read, capsys,
                                                     argv) -> None:
    code = main([*argv, "--config", str(warehouse), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)
    apps = {r["run_id"]: r["app"] for r in got["runs"]} if "runs" in got else {
        got["run"]["run_id"]: got["run"]["app"]}
    assert apps.get("big") == "wordcount" and apps.get("small", "fsd") == "fsd"
    assert rows_read["datasets"] == 0
    assert 0 < rows_read["rows"] <= ROWS + 3, rows_read  # not FILES x ROWS
