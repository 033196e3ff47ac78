"""``keyshift simulate``: the JSON contract, traces, bad arguments (exit 2, one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keyshift.cli import main
from keyshift.commands.simulate import REQUIRED_KEYS


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    return json.loads(out[0])


def test_plain_run_prints_the_contract(capsys: pytest.CaptureFixture[str], ks_home: Path) -> None:
    out = run_json(capsys, "--engines", "4", "--policy", "kg", "--groups", "256", "--zipf",
                   "0.8", "--rate", "2000", "--duration", "20")
    for key in REQUIRED_KEYS:
        assert key in out, key
    assert out["processed"] > 0
    assert out["engine_seconds"] == pytest.approx(4 * 20)
    assert out["rebalances"] == 0  # KG never moves


def test_a_plain_run_decides_with_the_jobs_controller_settings(
        capsys: pytest.CaptureFixture[str], ks_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation's loop is the job's on the same config (issue 25 item 2): the default
    min_gain declines DLB-H's shuffles under a hot key, 0 lets them through, and recommend
    mode moves nothing and says what it would have done."""
    argv = ("--policy", "dlb-h", "--zipf", "1.5", "--engines", "4", "--groups", "64",
            "--duration", "30")
    vetoed = run_json(capsys, *argv)
    assert vetoed["mode"] == "act" and vetoed["min_gain"] == 0.05
    assert vetoed["declined"] > 0
    monkeypatch.setenv("KEYSHIFT_CONTROLLER__MIN_GAIN", "0")
    free = run_json(capsys, *argv)
    assert free["declined"] == 0 and free["rebalances"] > vetoed["rebalances"]
    monkeypatch.setenv("KEYSHIFT_CONTROLLER__MODE", "recommend")
    shown = run_json(capsys, *argv)
    assert shown["rebalances"] == 0 and shown["moved_groups"] == 0
    assert shown["recommended"] > 0


def test_trace_replay_scaled(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                             ks_home: Path) -> None:
    trace = tmp_path / "t.csv"
    rows = ["ts,key"] + [f"{100 + i * 0.5},k{i % 7}" for i in range(200)]
    trace.write_text("\n".join(rows) + "\n")
    plain = run_json(capsys, "--trace", str(trace), "--engines", "2", "--window", "5")
    assert plain["generated"] == 200
    assert plain["processed"] + plain["missed"] + plain["queued_end"] == pytest.approx(200)
    fast = run_json(capsys, "--trace", str(trace), "--engines", "2", "--window", "1",
                    "--speedup", "10", "--rate", "4000")
    assert fast["simulated_s"] <= 11
    assert 0.7 * 4000 * 10 < fast["generated"] < 1.3 * 4000 * 10


def test_report_dir_gets_plots(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               ks_home: Path) -> None:
    out = run_json(capsys, "--groups", "64", "--duration", "5", "--report-dir",
                   str(tmp_path / "rep"))
    files = {p.name for p in Path(out["report_dir"]).iterdir()}
    assert {"simulate_throughput.png", "simulate_rstd.png", "summary.json"} <= files


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--engines", "0"], "--engines"),
        (["--rate", "-5"], "--rate"),
        (["--policy", "nope"], "--policy"),
        (["--policy", "kg", "--policy-param", "oops"], "--policy-param"),
        (["--speedup", "2"], "--speedup"),
        (["--trace", "/no/such/file.csv"], "trace"),
        (["--scenario", "nope"], "scenario"),
        (["--window", "1", "--tick", "0.3"], "window_s"),
        (["--no-such-option"], "unrecognized"),
    ],
)
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                              needle: str, ks_home: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["simulate", *argv]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_bad_trace_header(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                          ks_home: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("time,user\n1,a\n")
    assert main(["simulate", "--trace", str(trace)]) == 2
    assert "ts and key" in capsys.readouterr().err


def test_heterogeneous_hosts_and_external_load(capsys: pytest.CaptureFixture[str],
                                               ks_home: Path) -> None:
    base = ["--engines", "2", "--groups", "64", "--zipf", "0", "--rate", "1000",
            "--duration", "20", "--window", "1"]
    even = run_json(capsys, *base, "--service-rates", "600,600")
    slow = run_json(capsys, *base, "--service-rates", "600,300")
    tenant = run_json(capsys, *base, "--service-rates", "600,600", "--external", "1:5:15:0.8")
    assert even["missed"] < slow["missed"]
    assert even["missed"] < tenant["missed"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--external", "0:1:x"], "--external"),
        (["--external", "0:1:2:5"], "share"),
        (["--service-rates", "1,a"], "--service-rates"),
    ],
)
def test_bad_host_options(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str,
                          ks_home: Path) -> None:
    assert main(["simulate", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_replay_of_a_real_access_log(real_data: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str], ks_home: Path) -> None:
    # NASA-HTTP log (data/README.md): unix seconds and host, 30,969 requests
    lines = (real_data / "nasa_19950801.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    i_ts, i_host = header.index("time"), header.index("host")
    rows = [line.split("\t") for line in lines[1:]]
    trace = tmp_path / "nasa.csv"
    trace.write_text("ts,key\n" + "\n".join(f"{r[i_ts]},{r[i_host]}" for r in rows) + "\n")
    out = run_json(capsys, "--trace", str(trace), "--speedup", "120", "--engines", "4",
                   "--policy", "dlb-h", "--window", "5", "--groups", "512")
    assert out["generated"] == len(rows)
    assert out["processed"] + out["missed"] + out["queued_end"] == pytest.approx(len(rows))
    assert out["rebalances"] > 0
