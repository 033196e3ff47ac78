"""The papers' experiments through ``keyshift simulate --scenario``: short runs that check
the output contract, the report files and the direction of the paper's findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keyshift.cli import main
from keyshift.commands.simulate import REQUIRED_KEYS


def scenario(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_dlb_short_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, ks_home: Path) -> None:
    out = scenario(capsys, "--scenario", "dlb", "--runs", "DLB-H,KG", "--duration", "120",
                   "--low-s", "20", "--high-s", "100", "--report-dir", str(tmp_path))
    for key in REQUIRED_KEYS:
        assert key in out, key
    dlb, kg = out["runs"]["DLB-H"], out["runs"]["KG"]
    assert kg["rebalances"] == 0 and kg["moved_groups"] == 0
    assert dlb["rebalances"] > 0
    # the paper's direction: DLB-H balances better than KG and processes more
    assert dlb["rstd_mean"] < kg["rstd_mean"]
    assert dlb["processed"] > kg["processed"]
    assert (tmp_path / "dlb.md").read_text().count("|") > 20
    assert (tmp_path / "dlb_throughput.png").stat().st_size > 0
    assert (tmp_path / "dlb_loads_KG.png").exists()


def test_dlb_with_the_jobs_min_gain_declines_the_hot_keys_shuffles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, ks_home: Path) -> None:
    """The simulator decides through the job's loop: with controller.min_gain the moves
    that would not lower the busiest engine are declined, so DLB-H rebalances less."""
    argv = ("--scenario", "dlb", "--runs", "DLB-H", "--duration", "120", "--low-s", "20",
            "--high-s", "100", "--report-dir", str(tmp_path))
    free = scenario(capsys, *argv)["runs"]["DLB-H"]
    vetoed = scenario(capsys, *argv, "--min-gain", "0.05")["runs"]["DLB-H"]
    assert 0 < vetoed["rebalances"] < free["rebalances"]
    assert "min_gain 0.05" in (tmp_path / "dlb.md").read_text()


def test_elb_clb_short_run(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                           ks_home: Path) -> None:
    out = scenario(capsys, "--scenario", "elb-clb", "--ns", "5", "--windows", "4",
                   "--policies", "ELB,UHLB", "--report-dir", str(tmp_path))
    runs = out["runs"]
    assert set(runs) == {"S1/ELB/n=5", "S1/UHLB/n=5", "S2/ELB/n=5", "S2/UHLB/n=5"}
    # ELB balances S1 far better than a load-blind hash
    assert runs["S1/ELB/n=5"]["var_mean"] < runs["S1/UHLB/n=5"]["var_mean"]
    assert runs["S1/ELB/n=5"]["missed"] == 0
    assert "Table 1" in (tmp_path / "elb_clb.md").read_text()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--scenario", "dlb", "--runs", "XYZ"], "runs"),
        (["--scenario", "dlb", "--theta", "abc"], "--theta"),
        (["--scenario", "dlb", "--min-gain", "1.5"], "min-gain"),
        (["--scenario", "elb-clb", "--ns", "0"], "ns"),
        (["--scenario", "elb-clb", "--policies", "FOO"], "policies"),
    ],
)
def test_scenario_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str],
                                needle: str, ks_home: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["simulate", *argv]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
