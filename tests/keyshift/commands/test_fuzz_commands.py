"""Issue 16 item 6: the JSON-reading commands under fuzzing (hypothesis).

``keyshift rebalance``, ``split`` and ``plan-engines`` read one JSON object. Whatever they
are given — random bytes, any JSON value, a valid request with one field replaced by any
JSON value (huge integers, NaN, infinities, unicode, nesting), nesting thousands deep, an
oversized number — they exit 0 with a JSON object, or exit 2 with one line that names the
field (``keyshift CMD: FIELD: why``); never a traceback.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_support import json_values, mutated, paths_of

from keyshift.cli import main

# "keyshift CMD: FIELD: why", FIELD a dotted path (params.x, connections[0].samples) whose
# last key is JSON-quoted when it is not a plain name
FIELD_LINE = re.compile(r'^keyshift [a-z-]+: [A-Za-z_][\w.\[\]-]*(\.?"(?:[^"\\]|\\.)*")?: \S'
                        r'|^keyshift [a-z-]+: "(?:[^"\\]|\\.)*": \S')
_DIR = Path(tempfile.mkdtemp(prefix="keyshift-fuzz-"))

_W = {"in_mean": 100, "in_std": 5, "lat_mean": [0.1] * 3, "lat_std": [0.01] * 3}
BASE = {
    "rebalance": {"engines": 3, "plan": [0, 1, 2, 0, 1, 2], "loads": [5, 1, 9, 2, 2, 7],
                  "state": [1, 1, 2, 2, 3, 3], "history": [[1, 2, 3, 4, 5, 6]] * 3,
                  "live": [True, True, True], "params": {"theta": 10}},
    "split": {"total": 10, "functions": [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]] * 2,
              "min": [0, 0], "max": [10, 10], "cluster": "auto", "delta": 1e-6},
    "split-samples": {"total": 100, "connections": [{"samples": [[50, 0.9], [30, 0.0]]},
                                                    {"samples": [[50, 0.0]], "max": 40}],
                      "smoothing": 0.5, "cluster_threshold": 1.2},
    "plan-engines": {"engines_now": 2, "min_engines": 1, "max_engines": 3, "window_s": 10,
                     "sel": 1.0, "costs": {"mc": 1, "ec": 1, "rc": 5},
                     "windows": [_W, dict(_W, in_mean=300), _W], "theta1": 0.5,
                     "max_step": 1, "cooldown_windows": 0, "windows_since_change": 3,
                     "objective": "mean"},
}
POLICIES = ["kg", "dlb-h", "dlb-l", "dlb-s", "elb", "lptf", "clb", "uhlb", "pkg", "dc", "wc"]

def run_command(argv: list[str], data: bytes) -> tuple[int, str, str]:
    path = _DIR / "request.json"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--input", str(path)])
    return code, out.getvalue(), err.getvalue()


def check(argv: list[str], data: bytes) -> None:
    code, out, err = run_command(argv, data)
    assert code in (0, 2), (code, err)
    if code == 0:
        assert isinstance(json.loads(out), dict)
    else:
        assert err.count("\n") == 1 and FIELD_LINE.match(err), err
        assert "Traceback" not in err


def _argv(command: str, policy: str) -> list[str]:
    if command == "rebalance":
        return ["rebalance", "--policy", policy]
    return ["split" if command.startswith("split") else command]


# KEYSHIFT_FUZZ_EXAMPLES=5000 for a longer hunt than CI's
FUZZ = settings(max_examples=int(os.environ.get("KEYSHIFT_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(command=st.sampled_from(sorted(BASE)), data=st.binary(max_size=200))
def test_random_bytes(command, data):
    check(_argv(command, "kg"), data)


@FUZZ
@given(command=st.sampled_from(sorted(BASE)), value=json_values)
def test_any_json_value(command, value):
    check(_argv(command, "dlb-h"), json.dumps(value).encode())


@FUZZ
@given(data=st.data(), command=st.sampled_from(sorted(BASE)), policy=st.sampled_from(POLICIES),
       value=json_values, how=st.sampled_from(["replace", "replace", "delete", "extra"]))
def test_one_field_replaced(data, command, policy, value, how):
    base = BASE[command]
    path = data.draw(st.sampled_from(paths_of(base)))
    doc = mutated(base, path, value, how)
    check(_argv(command, policy), json.dumps(doc, ensure_ascii=False).encode())


@pytest.mark.parametrize("command", sorted(BASE))
def test_the_bases_are_valid(command):
    code, _, err = run_command(_argv(command, "dlb-h"), json.dumps(BASE[command]).encode())
    assert code == 0, err


@pytest.mark.parametrize("command", sorted(BASE))
@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                       # nesting deeper than the recursion limit
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    "1" * 10_000,                                        # an integer too long to convert
    '{"engines": ' + "9" * 5000 + "}",
    "NaN", "[Infinity, -Infinity]", '"\\ud800"',         # not JSON numbers, a lone surrogate
    "\ufeff{}",                                          # a byte order mark
])
def test_pathological_documents(command, text):
    check(_argv(command, "dlb-h"), text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("command", sorted(BASE))
def test_non_utf8_and_oversized(command):
    check(_argv(command, "kg"), b"\xff\xfe{\x00}")
    big = dict(BASE[command])
    check(_argv(command, "kg"), (json.dumps(big)[:-1] + ', "pad": "' + "x" * 2_000_000 + '"}')
          .encode())


@pytest.mark.parametrize("since", [None, 0, 1, 2, 5, 40, 60])
@pytest.mark.parametrize("cooldown", [4, 7, 50])
def test_a_cooldown_beyond_the_horizon_is_clamped_to_the_same_plan(cooldown, since):
    """Fuzzing found cooldown_windows = 420518585 allocating 28 GiB; the command now plans
    with an equivalent cooldown of the horizon's length (3 windows here)."""
    from keyshift.commands.plan_engines import parse_request, plan_request
    from keyshift.elastic.planner import GraphPlanner

    doc = dict(BASE["plan-engines"], cooldown_windows=cooldown, max_step=0,
               costs={"mc": 50, "ec": 1, "rc": 1})
    doc["windows"] = [_W, dict(_W, in_mean=3000), _W]
    if since is None:
        doc.pop("windows_since_change")
    else:
        doc["windows_since_change"] = since
    clamped = plan_request(doc)
    _, forecast, now, _, floors = parse_request(copy.deepcopy(doc))  # reference: unclamped
    planner = GraphPlanner(window_s=10, sel=1.0, mc=50, ec=1, rc=1, theta1=0.5, min_engines=1,
                           max_engines=3, cooldown_windows=cooldown, max_step=0)
    reference = planner.plan(forecast, now, since, in_floor=floors).to_json()
    assert clamped["path"] == reference["path"]
    assert clamped["cost"] == pytest.approx(reference["cost"])
