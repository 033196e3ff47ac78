"""The blocking-rate experiment (§6) on a tiny configuration: direction of the results, the
report files, and argument errors through ``keyshift simulate``."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from keyshift.cli import main
from keyshift.experiments import blocking_rate as br


def _args(tmp_path, **kw):
    base = dict(json=True, seed=0, report_dir=str(tmp_path), duration=15.0, quick=True,
                figures="10", connections="2", decay=0.1, max_step=50, units=1000,
                max_slowdown=60.0, zero_weight=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_figure10_direction_and_report(tmp_path):
    out = br.run(_args(tmp_path))
    assert out["processed"] > 0 and out["wall_s"] > 0
    rows = {(r["scenario"], r["connections"]): r for r in out["rows"]}
    static, dynamic = rows[("static", 2)], rows[("dynamic", 2)]
    # RR is gated by the 100x slower PE; the balancer is not
    assert static["time_RR"] > 10 * static["time_LB-adaptive"]
    assert static["time_LB-static"] < 3.0
    # only the adaptive balancer finds out that the slowdown is gone
    assert dynamic["final_tps_LB-adaptive"] > dynamic["final_tps_LB-static"]
    assert dynamic["final_tps_RR"] == pytest.approx(dynamic["final_tps_Oracle*"], rel=0.1)
    assert (tmp_path / "blocking_rate.md").is_file()
    assert all(p.endswith(".png") for p in out["plots"]) and len(out["plots"]) >= 4
    json.dumps(out)


def test_oracle_weights_follow_capacity():
    w = br.oracle_weights(np.array([100.0, 1.0]), 1000)
    assert w.tolist() == [991, 9]  # max(9.91, 9) < max(9.9, 10)
    assert br.oracle_throughput(np.array([100.0, 1.0]), 1000) == pytest.approx(101.0, rel=0.01)


def test_cases_cover_the_papers_figures():
    settings = br._settings(_args(None, figures="9,10,12,13", connections=None, quick=False))
    cs = br.cases(settings)
    figs = {c.figure for c in cs}
    assert figs == {"9", "10", "12", "13"}
    fig12 = next(c for c in cs if c.figure == "12")
    assert (fig12.slowdown == 100).sum() == 20 and (fig12.slowdown == 5).sum() == 20


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--figures", "11"], "--figures"),
        (["--connections", "1"], "--connections"),
        (["--connections", "two"], "--connections"),
        (["--decay", "1.5"], "--decay"),
        (["--zero-weight", "2"], "--zero-weight"),
    ],
)
def test_bad_arguments_exit_2(tmp_path, capsys, extra, message):
    code = main(["simulate", "--scenario", "blocking-rate", "--json", "--report-dir", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_through_keyshift_simulate_json(tmp_path, capsys, ks_home):
    code = main(["simulate", "--scenario", "blocking-rate", "--json", "--figures", "9",
                 "--connections", "2", "--duration", "6", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(out) == 1
    summary = json.loads(out[0])
    assert summary["scenario"] == "blocking-rate"
    assert summary["processed"] > 0 and summary["wall_s"] > 0
    assert {(r["figure"], r["scenario"]) for r in summary["rows"]} == {("9", "static"), ("9", "dynamic")}
    assert any(c["figure"] == "9-static" for c in summary["claims"])
