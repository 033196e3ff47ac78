"""What a warehouse's rows may do to whoever reads them (issue 46 items 1 and 4): an
operator name read back from ``events_out`` is looked up among the operators this host
ships or has installed, never imported, and a table's strings reach the terminal with their
control characters escaped. The warehouse is written here by delta-rs (no JVM)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.control import key_group_floor
from keyshift.lakehouse.delta_arrow import arrow_schema

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
ESCAPES = "\x1b[2J\rX"  # clear the screen, then overwrite the line


@pytest.fixture()
def planted(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A module on the path whose import writes a marker file: ``planted_mod:Op``."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_mod.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\nclass Op: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_mod", raising=False)
    return "planted_mod:Op", marker


def _write(cfg, name: str, rows: list[dict]) -> None:
    from deltalake import write_deltalake

    schema = arrow_schema(name)
    data = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)
    write_deltalake(cfg.table_path(name), data, mode="append")


def _metrics(run: str, batch: int, events: int = 100, dead: int = 0) -> dict:
    hot = key_group_floor(np.array([0.7, 0.1, 0.1, 0.1]) * events, 2).columns()
    return {**hot, "schema_version": 4, "run_id": run, "batch_id": batch,
            "window_start": T0 + timedelta(seconds=2 * batch),
            "window_end": T0 + timedelta(seconds=2 * batch + 1), "events_in": events,
            "dead_letter": dead, "processed": events, "out_events": 1, "missed": 0,
            "selectivity": 0.01, "engines": 2, "engine_loads": [events // 2, events // 2],
            "rstd": 49.21336605569506, "var_load": 0.0, "input_rate": float(events),
            "latency_s": 0.001, "batch_duration_s": 0.5, "plan_version": 1, "policy": "kg"}


def _events_out(run: str, app: str) -> dict:
    return {"schema_version": 4, "run_id": run, "batch_id": 0, "app": app, "engine": 0,
            "group": 1, "key": "k", "ts": 0, "kind": "x", "detail": "{}", "event_id": "e1"}


@pytest.fixture()
def forged(tmp_path, planted) -> tuple[Path, Path]:
    """A warehouse (no job.json in the home: a report made on another host) whose
    ``events_out`` names the planted module as the run's operator; (config file, marker)."""
    spec, marker = planted
    home = tmp_path / "home"
    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{home}"\n')
    cfg = load_config(conf, env={})
    _write(cfg, "metrics", [_metrics("r", b) for b in range(3)])
    _write(cfg, "events_out", [_events_out("r", spec)])
    return conf, marker


def test_known_operator_imports_nothing_a_name_chooses(planted, monkeypatch) -> None:
    from keyshift.apps import WindowedWordCount, known_operator
    from keyshift.apps import registry

    spec, marker = planted
    assert known_operator("wordcount") is WindowedWordCount
    for name in (spec, "os:X", "venv.__main__:X", "planted_mod", "", None, 3):
        assert known_operator(name) is None, name
    assert not marker.exists() and "planted_mod" not in sys.modules

    class Ep:  # an installed package's operator: the host's owner installed it
        name, value = "mine", "somepkg:Mine"

        def load(self):
            return WindowedWordCount

    monkeypatch.setattr(registry, "_operator_entry_points", lambda: {"mine": Ep()})
    assert known_operator("mine") is WindowedWordCount


def test_the_floor_note_names_an_unknown_operator_without_importing_it(planted) -> None:
    import pandas as pd

    from keyshift.streaming.report import _floor_note

    spec, marker = planted
    m = pd.DataFrame([_metrics("r", b) for b in range(3)])
    note = _floor_note(m, spec, "kg")
    assert not marker.exists(), "the report imported a module a table named"
    assert "Operator planted_mod:Op is not one this host knows" in note
    assert "its summary hooks are not checked" in note
    assert "wordcount summarizes part of a key" in _floor_note(m, "wordcount", "kg")
    assert "os:X is not one this host knows" in _floor_note(m, "os:X", "kg")


def test_keyshift_report_of_a_forged_row_does_not_import_it(forged, tmp_path, capsys) -> None:
    conf, marker = forged
    code = main(["report", "r", "--config", str(conf), "--out", str(tmp_path / "rep")])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert not marker.exists(), "keyshift report imported the module a warehouse row named"
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Operator planted_mod:Op is not one this host knows" in page


def _decision(run: str, batch: int, reason: str) -> dict:
    return {"schema_version": 4, "run_id": run, "batch_id": batch, "decided_at": T0,
            "component": "balancer", "policy": "kg", "action": "rebalance", "reason": reason,
            "rstd_before": 40.0, "rstd_after": 12.0, "moved_groups": 3, "engines_before": 2,
            "engines_after": 2, "plan_version": 2}


@pytest.fixture()
def hostile(tmp_path) -> Path:
    """A warehouse whose string columns carry escape sequences, a carriage return and rich
    markup: the operator's name, a decision's reason, a dead letter's reason and record."""
    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{tmp_path / "home"}"\n')
    cfg = load_config(conf, env={})
    _write(cfg, "metrics", [_metrics("r", b, dead=1) for b in range(3)]
           + [_metrics(f"forged{ESCAPES}", 0)])
    _write(cfg, "events_out", [_events_out("r", f"wordcount{ESCAPES}")])
    _write(cfg, "decisions", [_decision("r", 1, f"moved{ESCAPES} [bold red]loud[/]")])
    _write(cfg, "dead_letter", [{
        "schema_version": 4, "run_id": "r", "batch_id": 0, "topic": "t", "partition": 0,
        "offset": 1, "kafka_ts": T0, "raw": f"rec{ESCAPES}", "reason": f"bad{ESCAPES}"}])
    return conf


@pytest.mark.parametrize("argv", [["status"], ["status", "--run-id", "r"],
                                  ["dead-letters", "r"]])
def test_watching_commands_escape_what_rows_say(hostile, capsys, argv) -> None:
    code = main([*argv, "--config", str(hostile)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out and "\r" not in out, out
    assert "\\x1b[2J\\rX" in out  # shown, as its escapes
    if argv != ["dead-letters", "r"]:
        assert "[bold red]loud[/]" in out.replace("\n", "")  # rich markup is text too


def test_an_error_line_naming_the_runs_escapes_them(hostile, capsys) -> None:
    """An unknown run id is answered with the known ones, which are the tables' own."""
    code = main(["status", "--run-id", "nope", "--config", str(hostile)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "\x1b" not in err and "\r" not in err and err.count("\n") == 1, err
    assert "forged\\x1b[2J\\rX" in err
