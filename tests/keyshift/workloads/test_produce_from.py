"""``keyshift produce --from FILE``: a user's own records, typed by the operator's schema."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from engines_support import consume

from keyshift.cli import main
from keyshift.schemas import ENVELOPE, Column, TableSchema
from keyshift.workloads import WorkloadInputError
from keyshift.workloads.records import BadRecord, Record, read_records, type_record

SCHEMA = TableSchema("speeds", 1, ENVELOPE + (
    Column("speed", "DOUBLE", False), Column("lane", "INT"), Column("ok", "BOOLEAN"),
    Column("tags", "ARRAY<STRING>"), Column("note", "STRING")))


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _items(path: Path, schema: TableSchema | None = None) -> list[Record | BadRecord]:
    return list(read_records(path, schema))


def test_csv_is_typed_by_the_schema_so_numbers_are_numbers(tmp_path):
    path = _write(tmp_path, "r.csv", "id,key,ts,speed,lane,ok,tags,note,extra\n"
                  'a,k1,1000,3.5,2,true,"[""x""]",hi,7\n'
                  "b,k2,2000,4,,FALSE,,,\n")
    good = _items(path, SCHEMA)
    assert good == [
        Record(2, {"id": "a", "key": "k1", "ts": 1000, "speed": 3.5, "lane": 2, "ok": True,
                   "tags": ["x"], "note": "hi", "extra": "7"}),
        Record(3, {"id": "b", "key": "k2", "ts": 2000, "speed": 4.0, "ok": False,
                   "extra": ""}),
    ]


def test_csv_without_a_schema_types_only_the_envelope(tmp_path):
    path = _write(tmp_path, "r.csv", "id,key,ts,speed\na,k1,1000,3.5\n")
    assert _items(path) == [Record(2, {"id": "a", "key": "k1", "ts": 1000, "speed": "3.5"})]


def test_bad_csv_records_are_named_by_line_and_field(tmp_path):
    path = _write(tmp_path, "r.csv", "id,key,ts,speed,lane\n"
                  "a,k1,1000,3.5,1\n"   # 2 good
                  "b,k2,soon,3.5,1\n"   # 3 ts not an integer
                  "c,,3000,3.5,1\n"     # 4 key missing
                  "d,k4,4000,fast,1\n"  # 5 speed not a number
                  "e,k5,5000,,1\n"      # 6 speed NOT NULL
                  "f,k6,6000,1,1e9\n"   # 7 lane not an integer
                  "g,k7,7000,1\n"       # 8 a cell short
                  "h,k8,8000,nan,1\n")  # 9 not finite
    items = _items(path, SCHEMA)
    assert isinstance(items[0], Record)
    bad = {b.line: b.why for b in items[1:]}
    assert all(isinstance(b, BadRecord) for b in items[1:])
    assert sorted(bad) == [3, 4, 5, 6, 7, 8, 9]
    assert bad[3].startswith("ts: expected an integer")
    assert bad[4].startswith("key: missing")
    assert bad[5].startswith("speed: expected a number")
    assert bad[6].startswith("speed: missing")
    assert bad[7].startswith("lane: expected an integer")
    assert "cells" in bad[8]
    assert bad[9].startswith("speed: expected a finite number")


def test_jsonl_records_must_already_have_their_types(tmp_path):
    path = _write(tmp_path, "r.jsonl", "\n".join([
        '{"id": "a", "key": "k", "ts": 1, "speed": 2, "ok": true}',  # 1 good (int is a number)
        "",                                                          # 2 blank: skipped silently
        '{"id": "b", "key": "k", "ts": 2, "speed": "2"}',            # 3 a string is not a number
        '{"id": "c", "key": 7, "ts": 3, "speed": 1.0}',              # 4 key not a string
        '{"id": "d", "key": "k", "ts": 4.5, "speed": 1.0}',          # 5 ts not an integer
        '{"id": "e", "key": "k", "speed": 1.0}',                     # 6 ts missing
        "not json",                                                  # 7
        "[1, 2]",                                                    # 8 not an object
        '{"id": "f", "key": "k", "ts": 5, "speed": 1.0, "lane": 2147483648}',  # 9 INT range
        '{"id": "g", "key": "k", "ts": 6, "speed": 1.0, "ok": 1}',  # 10 not a boolean
    ]) + "\n")
    items = _items(path, SCHEMA)
    assert items[0] == Record(1, {"id": "a", "key": "k", "ts": 1, "speed": 2, "ok": True})
    bad = {b.line: b.why for b in items[1:]}
    assert sorted(bad) == [3, 4, 5, 6, 7, 8, 9, 10]
    assert bad[3].startswith("speed: expected a number")
    assert bad[4].startswith("key: expected a string")
    assert bad[5].startswith("ts: expected an integer")
    assert bad[6].startswith("ts: missing")
    assert bad[7].startswith("not JSON")
    assert bad[8] == "expected a JSON object, got list"
    assert "out of the range of INT" in bad[9]
    assert bad[10].startswith("ok: expected true or false")


def test_a_file_that_cannot_be_used_is_refused_before_any_record(tmp_path):
    with pytest.raises(WorkloadInputError, match="cannot read"):
        read_records(tmp_path / "missing.jsonl")
    with pytest.raises(WorkloadInputError, match="header has no column key, ts"):
        read_records(_write(tmp_path, "h.csv", "id,value\n1,2\n"))
    with pytest.raises(WorkloadInputError, match="empty file"):
        read_records(_write(tmp_path, "e.csv", ""))
    with pytest.raises(WorkloadInputError, match=r"\.jsonl or \.csv"):
        read_records(_write(tmp_path, "r.txt", "{}"))


def test_type_record_keeps_undeclared_fields():
    assert type_record({"id": "a", "key": "k", "ts": 1, "x": [1]}) == \
        {"id": "a", "key": "k", "ts": 1, "x": [1]}


def test_the_shipped_schema_of_an_app_types_the_records(tmp_path):
    from keyshift.apps import resolve_operator

    schema = resolve_operator("traffic").schema
    numbers = [c.name for c in schema.columns if c.type == "DOUBLE"]
    row = {c.name: "1" for c in schema.columns}
    typed = type_record(row, schema, from_text=True)
    assert all(isinstance(typed[n], float) for n in numbers) and isinstance(typed["ts"], int)


@pytest.mark.parametrize("argv, field", [
    (["--from", "/nonexistent/r.jsonl"], "--from"),
    (["--app", "no_such_app"], "--app"),
    (["--count", "3"], "--from: does not go with --count"),
])
def test_cli_refuses_a_bad_file_or_app_with_2_before_the_broker(argv, field, tmp_path, capsys,
                                                                monkeypatch):
    from keyshift.streaming.broker import free_port

    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(free_port()))  # never asked
    path = _write(tmp_path, "r.jsonl", '{"id": "a", "key": "k", "ts": 1}\n')
    if "--from" not in argv:
        argv = ["--from", str(path), *argv]
    assert main(["produce", *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.integration
def test_cli_sends_a_jsonl_file_keyed_by_key(kafka_broker, ks_home, tmp_path, monkeypatch,
                                             capsys):
    from keyshift.streaming.kafka_client import create_topic

    topic = f"from-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, 1)  # produce refuses a missing topic
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(kafka_broker.port))
    monkeypatch.setenv("KEYSHIFT_KAFKA__CONTROLLER_PORT", str(kafka_broker.controller_port))
    lines = [{"id": f"e{i}", "key": f"k{i % 3}", "ts": 1_000 + i, "delay_s": i / 2}
             for i in range(5)]
    text = "\n".join(json.dumps(e) for e in lines[:3]) + '\n{"id": "x", "ts": 9}\n' + \
        "\n".join(json.dumps(e) for e in lines[3:]) + "\n"
    path = _write(tmp_path, "mine.jsonl", text)
    rc = main(["produce", "--from", str(path), "--topic", topic, "--rate", "500"])
    err = capsys.readouterr().err
    assert rc == 1  # one record skipped: said, counted, not silent
    assert f"skipped {path} line 4: key: missing" in err
    assert "skipped 1 records" in err and "5 sent" in err
    got = consume(kafka_broker.bootstrap, topic)
    assert sorted((m.key.decode(), json.loads(m.value)["id"]) for m in got) == \
        sorted((e["key"], e["id"]) for e in lines)
    assert {json.loads(m.value)["id"]: json.loads(m.value) for m in got}["e3"] == lines[3]
