"""``keyshift rebalance``: the JSON contract, and exit 2 with one line on bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from keyshift.cli import main

KEYSHIFT = Path(sys.executable).with_name("keyshift")


def _run(monkeypatch, capsys, policy, doc):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code = main(["rebalance", "--policy", policy])
    out, err = capsys.readouterr()
    return code, out, err


def test_dlb_decision_has_the_contract_shape(monkeypatch, capsys):
    doc = {"engines": 2, "plan": [0, 0, 0, 1], "loads": [5, 3, 1, 1], "params": {"theta": 15}}
    code, out, err = _run(monkeypatch, capsys, "dlb-h", doc)
    assert code == 0 and err == ""
    res = json.loads(out)
    assert res["plan"] == [1, 0, 0, 0] and res["engines"] == 2
    assert res["moves"] == [{"group": 0, "from": 0, "to": 1, "state": 5.0},
                            {"group": 3, "from": 1, "to": 0, "state": 1.0}]
    assert res["before"] == {"rstd": pytest.approx(80.0), "var": pytest.approx(16.0)}
    assert res["after"]["rstd"] == pytest.approx(0.0)
    assert res["moved_groups"] == 2 and res["moved_state"] == pytest.approx(6.0)
    assert isinstance(res["elapsed_ms"], float)


def test_null_plan_starts_from_kg_and_state_counts_moved_state(monkeypatch, capsys):
    doc = {"engines": 2, "plan": None, "loads": [5, 3, 1, 1], "state": [50, 30, 10, 10]}
    code, out, _ = _run(monkeypatch, capsys, "dlb-h", doc)
    res = json.loads(out)
    assert code == 0 and res["moved_state"] == 10.0  # KG (6, 4): move group 2 (load 1)


def test_elb_can_scale_and_reports_live_engines(monkeypatch, capsys):
    doc = {"engines": 2, "plan": None, "loads": [1.0] * 40, "params": {"band": [8, 12]}}
    code, out, _ = _run(monkeypatch, capsys, "elb", doc)
    res = json.loads(out)
    assert code == 0 and res["engines"] == 4 and res["slots"] == 4


def test_clb_reads_history_and_pkg_reports_split_keys(monkeypatch, capsys):
    doc = {"engines": 2, "plan": None, "loads": [1, 2, 3],
           "history": [[1, 2, 3], [3, 2, 1], [2, 2, 2]], "params": {"theta": 15}}
    code, out, _ = _run(monkeypatch, capsys, "clb", doc)
    assert code == 0 and json.loads(out)["info"]["ignored_params"] == ["theta"]
    code, out, _ = _run(monkeypatch, capsys, "pkg", {"engines": 2, "loads": [10]})
    assert code == 0 and json.loads(out)["info"]["split_keys"] == 1


def test_optimal_runs_from_the_command_line(monkeypatch, capsys):
    doc = {"engines": 2, "plan": [0, 0, 0, 1], "loads": [5, 3, 1, 1], "params": {"theta": 15}}
    code, out, _ = _run(monkeypatch, capsys, "optimal", doc)
    res = json.loads(out)
    # (9, 1) must become (5, 5): cheapest is moving the 3 and the 1 (ψ = 4), not 5 + 1
    assert code == 0 and res["moved_state"] == 4.0 and res["after"]["rstd"] == 0.0
    assert res["info"]["optimal"] is True


@pytest.mark.parametrize(
    "policy, doc, field",
    [
        ("dlb-h", "{not json", "input"),
        ("dlb-h", "[1, 2]", "input"),
        ("nope", {"engines": 2, "loads": [1]}, "policy"),
        ("dlb-h", {"loads": [1]}, "engines"),
        ("dlb-h", {"engines": 0, "loads": [1]}, "engines"),
        ("dlb-h", {"engines": "2", "loads": [1]}, "engines"),
        ("dlb-h", {"engines": 2, "loads": [1, -2]}, "loads"),
        ("dlb-h", {"engines": 2, "loads": ["a"]}, "loads"),
        ("dlb-h", {"engines": 2, "loads": []}, "loads"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "plan": [0]}, "plan"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "plan": [0, 2]}, "plan"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "plan": [0, 0.5]}, "plan"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "state": [1]}, "state"),
        ("clb", {"engines": 2, "loads": [1, 2], "history": [[1]]}, "history"),
        ("clb", {"engines": 2, "loads": [1, 2]}, "history"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "live": [False, False]}, "live"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "params": {"thetta": 1}}, "params.thetta"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "params": {"theta": -1}}, "theta"),
        ("elb", {"engines": 2, "loads": [1, 2], "params": {"band": [3, 1]}}, "band"),
        ("dlb-h", {"engines": 2, "loads": [1, 2], "lods": [1]}, "lods"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(monkeypatch, capsys, policy, doc, field):
    code, out, err = _run(monkeypatch, capsys, policy, doc)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"keyshift rebalance: {field}:")


def test_console_script_never_prints_a_traceback():
    for stdin in ["{", '{"engines": 1, "loads": [1], "plan": [5]}']:
        proc = subprocess.run(
            [str(KEYSHIFT), "rebalance", "--policy", "dlb-l"],
            input=stdin, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1
