"""``keyshift plan-engines``: the JSON contract in and out, and one-line errors (status 2)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from keyshift.cli import main


def request(**over):
    w = {"in_mean": 100, "in_std": 5, "lat_mean": [0.1] * 4, "lat_std": [0.01] * 4}
    hi = dict(w, in_mean=300, in_std=30)
    doc = {
        "engines_now": 2, "min_engines": 1, "max_engines": 4, "window_s": 10, "sel": 1.0,
        "costs": {"mc": 1, "ec": 1, "rc": 5}, "windows": [w, hi, hi, w],
    }
    doc.update(over)
    return doc


def call(doc, monkeypatch, capsys):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    status = main(["plan-engines"])
    out, err = capsys.readouterr()
    return status, out, err


def test_plans_a_path(monkeypatch, capsys):
    status, out, err = call(request(), monkeypatch, capsys)
    assert status == 0, err
    res = json.loads(out)
    assert set(res) == {"path", "cost", "cost_std", "rejected_at", "elapsed_ms"}
    assert res["path"] == [1, 3, 3, 1]
    assert res["cost"] == pytest.approx(95.0)
    assert res["cost_std"] > 0 and res["rejected_at"] is None


def test_theta1_reports_the_rejected_window(monkeypatch, capsys):
    status, out, _ = call(request(theta1=10.0), monkeypatch, capsys)
    assert status == 0
    assert json.loads(out)["rejected_at"] == 1


def test_limits_from_the_request(monkeypatch, capsys):
    status, out, _ = call(request(max_engines=2), monkeypatch, capsys)
    assert status == 0
    assert max(json.loads(out)["path"]) == 2


@pytest.mark.parametrize(
    "doc, field",
    [
        ("not json", "input: malformed JSON"),
        ("[1, 2]", "input: must be a JSON object"),
        (request(windows=[]), "windows"),
        (request(engines_now=0), "engines_now"),
        (request(engines_now="two"), "engines_now"),
        (request(window_s=-1), "window_s"),
        (request(costs={"mc": -1}), "costs.mc"),
        (request(costs={"xc": 1}), "costs.xc"),
        (request(max_engines=9), "max_engines"),
        (request(bogus=1), "bogus"),
        (request(objective="p99"), "objective"),
        (request(windows=[{"in_mean": 1, "in_std": 0, "lat_mean": [0.1]}]), "windows[0].lat_std"),
        (request(windows=[{"in_mean": 1, "in_std": 0, "lat_mean": [0.1], "lat_std": [0.0]},
                          {"in_mean": 1, "in_std": 0, "lat_mean": [0.1, 0.1], "lat_std": [0.0, 0.0]}]),
         "windows[1].lat_mean"),
        (request(windows=[{"in_mean": "x", "in_std": 0, "lat_mean": [0.1], "lat_std": [0.0]}]),
         "windows[0].in_mean"),
    ],
)
def test_bad_input_exits_2_naming_the_field(doc, field, monkeypatch, capsys):
    status, out, err = call(doc, monkeypatch, capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert f": {field}" in err


def test_console_script_round_trip(tmp_path):
    path = tmp_path / "req.json"
    path.write_text(json.dumps(request()))
    proc = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "plan-engines", "--input", str(path)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["path"] == [1, 3, 3, 1]
