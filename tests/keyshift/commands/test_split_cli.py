"""``keyshift split``: JSON in, JSON out; bad input exits 2 with one line naming the field."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from keyshift.cli import main
from keyshift.commands.split import solve_request
from keyshift.split import SplitInputError


def _call(monkeypatch, capsys, payload: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(payload))
    code = main(["split"])
    out, err = capsys.readouterr()
    return code, out, err


def test_samples_in_weights_out(monkeypatch, capsys):
    req = {
        "total": 100,
        "connections": [
            {"samples": [[50, 0.9], [30, 0.0]]},  # blocks above 30: a slow connection
            {"samples": [[50, 0.0]]},
            {"samples": [[50, 0.0]], "max": 40},
        ],
    }
    code, out, err = _call(monkeypatch, capsys, json.dumps(req))
    assert code == 0, err
    res = json.loads(out)
    assert sum(res["weights"]) == 100
    assert res["weights"][2] <= 40
    assert res["weights"][0] <= 31  # past its knee it is predicted to block
    assert res["clusters"] == [0, 1, 2]
    assert set(res) >= {"weights", "max_blocking", "elapsed_ms", "clusters"}


def test_functions_in_weights_out():
    res = solve_request({"functions": [[0, 1, 2, 3, 4], [0, 0, 0, 5, 9]], "total": 4})
    assert res["weights"] == [2, 2]
    assert res["max_blocking"] == pytest.approx(2.0)


def test_many_connections_are_clustered():
    g = np.arange(101.0)
    funcs = [np.maximum(0, (g - 3) * 0.5).tolist()] * 16 + [np.maximum(0, (g - 40) * 0.01).tolist()] * 16
    res = solve_request({"functions": funcs})
    labels = res["clusters"]
    assert len(set(labels[:16])) == 1 and len(set(labels[16:])) == 1 and labels[0] != labels[16]
    assert sum(res["weights"]) == 100
    assert max(res["weights"][:16]) <= 3  # past the knee at 3 the slow ones block
    assert np.mean(res["weights"][:16]) < np.mean(res["weights"][16:])


@pytest.mark.parametrize(
    "payload, field",
    [
        ("[1, 2]", "input"),
        ("{nope", "input"),
        ('{"functions": [[0, 2, 1]]}', "functions[0]"),
        ('{"functions": [[0, 1], [0, 1, 2]]}', "functions"),
        ('{"functions": [[0, "a"]]}', "functions"),
        ('{"connections": []}', "connections"),
        ('{"connections": [{"samples": [[5]]}]}', "connections[0].samples"),
        ('{"connections": [{"samples": [[5000, 0.1]]}]}', "connections[0].samples"),
        ('{"connections": [{"samples": [[5, -1]]}]}', "connections[0].samples"),
        ('{"connections": [{"min": 1.5}]}', "connections[0].min"),
        ('{"connections": [{"speed": 1}]}', "connections[0].speed"),
        ('{"total": 0, "connections": [{}]}', "total"),
        # found by the fuzz test: a grid of 10^30 points reached numpy as an array shape
        ('{"total": 1e30, "connections": [{}]}', "total"),
        ('{"total": 5000000, "connections": [{}, {}]}', "total"),
        ('{"total": 10, "connections": [{"max": 3}, {"max": 3}]}', "total"),
        ('{"functions": [[0, 1]], "connections": [{}]}', "input"),
        ('{"functions": [[0, 1]], "cluster": "yes"}', "cluster"),
        ('{"functions": [[0, 1]], "colour": 1}', "colour"),
    ],
)
def test_bad_input_exits_2_naming_the_field(monkeypatch, capsys, payload, field):
    code, out, err = _call(monkeypatch, capsys, payload)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and f"keyshift split: {field}" in err


def test_solve_request_raises_the_field():
    with pytest.raises(SplitInputError) as exc:
        solve_request({"connections": [{"samples": "x"}]})
    assert exc.value.field == "connections[0].samples"


def test_input_file_and_missing_file(tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"functions": [[0, 1, 2], [0, 1, 2]]}))
    assert main(["split", "--input", str(req)]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == [1, 1]
    assert main(["split", "--input", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keyshift split: input: cannot read") and err.count("\n") == 1
