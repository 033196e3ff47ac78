"""`keyshift forecast`: the Table II comparison from a CSV as a rolling-origin backtest; bad
files exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from keyshift.cli import main


@pytest.fixture()
def taxi_csv(real_data: Path, tmp_path: Path) -> Path:
    """1,200 half-hours (25 days) of the NAB NYC taxi series, with the column renamed to `ts`."""
    frame = pd.read_csv(real_data / "nab_nyc_taxi.csv").head(1200)
    path = tmp_path / "taxi.csv"
    frame.rename(columns={"timestamp": "ts"}).to_csv(path, index=False)
    return path


def test_json_reports_every_metric_per_model(taxi_csv, capsys):
    rc = main(["forecast", "--series", str(taxi_csv), "--test-fraction", "0.2", "--json",
               "--models", "gp,svm,seasonal-naive,seasonal-profile", "--iters", "15"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_train"] == 960 and out["n_test"] == 240
    assert out["origins"] == 5 and out["horizon"] == 48  # five consecutive days
    assert set(out["models"]) == {"gp", "svm", "seasonal-naive", "seasonal-profile"}
    for metrics in out["models"].values():
        assert {"mae", "rmse", "mase", "cc", "coverage_90", "train_s"} <= set(metrics)
        assert metrics["rmse"] >= metrics["mae"] >= 0 and 0 <= metrics["coverage_90"] <= 1
    assert out["models"]["seasonal-naive"]["mase"] == 1.0  # the scale itself
    # the daily and weekly cycle is what the GP is for: it must beat last week's value,
    # with an honest 90 % interval
    gp = out["models"]["gp"]
    assert gp["mase"] < 1 and 0.8 <= gp["coverage_90"] <= 0.97 and gp["cc"] > 0.94


def test_origins_and_horizon_options(taxi_csv, capsys):
    rc = main(["forecast", "--series", str(taxi_csv), "--json", "--models", "seasonal-naive",
               "--origins", "6", "--horizon", "10"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["origins"], out["horizon"], out["n_test"], out["n_train"]) == (6, 10, 60, 1140)


def test_unix_seconds_and_table_output_and_plot(tmp_path, capsys):
    path = tmp_path / "s.csv"
    path.write_text("ts,value\n" + "".join(f"{1_700_000_000 + 3600 * i},{i % 24}\n"
                                           for i in range(96)))
    png = tmp_path / "plot.png"
    rc = main(["forecast", "--series", str(path), "--models", "seasonal-naive,svm",
               "--plot", str(png)])
    assert rc == 0
    assert "seasonal-naive" in capsys.readouterr().out
    assert png.stat().st_size > 0


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("", "is empty"),
    ("time,count\n1,2\n", "columns 'ts' and 'value'"),
    ("ts,value\n", "no rows"),
    ("ts,value\n2026-01-01,1\nyesterday,2\n", "ts: line 3"),
    ("ts,value\n1,1\n2,abc\n", "value: line 3"),
    ("ts,value\n1,1\n2,2\n3,3\n", "need at least"),
])
def test_bad_files_exit_2_with_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_text(content)
    rc = main(["forecast", "--series", str(path), "--json"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--test-fraction", "1.5"], "test_fraction"),
    (["--models", "gp,arima"], "unknown"),
    (["--iters", "0"], "--iters"),
    (["--kernel", "ard|ard+hourly"], "--kernel: 'ard+hourly' is not one of"),
    (["--origins", "0"], "origins"),
    (["--horizon", "400", "--origins", "5"], "need at least"),
])
def test_bad_options_exit_2(taxi_csv, capsys, argv, message):
    rc = main(["forecast", "--series", str(taxi_csv), "--json", *argv])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_the_help_text_lists_the_kernels_the_gp_has():
    """`keyshift forecast -h` names the kernels without importing the model layer: its copy
    must be the input-rate GP's (every kernel but the latency GP's load terms)."""
    from keyshift.models import commands, gp

    assert commands.KERNELS == tuple(k for k in gp.KERNELS if k not in gp.LOAD_KERNELS)


def test_the_forecast_says_which_forecaster_each_origin_chose(tmp_path, capsys):
    """Issue 44: on the timetable series the choice may end at seasonal naive or the profile
    alone; `keyshift forecast` says what each origin's fit became, in the JSON and below the
    table."""
    from keyshift.models.synthetic import timetable_series

    t, y = timetable_series(weeks=6)
    path = tmp_path / "timetable.csv"
    pd.DataFrame({"ts": t.astype(int), "value": y}).to_csv(path, index=False)
    args = ["forecast", "--series", str(path), "--models", "gp,seasonal-naive", "--origins",
            "3", "--horizon", "24", "--iters", "10"]
    assert main(args + ["--json"]) == 0
    gp = json.loads(capsys.readouterr().out)["models"]["gp"]
    assert gp["choice"].startswith(("GP on the", "the ", "daily ", "weekly ")), gp["choice"]
    assert main(args) == 0
    assert "gp chose, per origin: " in capsys.readouterr().out
