"""Batch-layer logic without Spark: date ranges, the synthetic history, expected imbalance,
baseline plans, tracking-store checks and the mapping of job outcomes to Airflow states."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from datetime import UTC, date, datetime

import numpy as np
import pytest

from keyshift.config import load_config
from keyshift.jobs.baseline_partitions import compute_baselines
from keyshift.jobs.history import (
    DayRange,
    HistoryError,
    LoadHistory,
    SyntheticHistory,
    engine_loads_per_window,
    imbalance_on_history,
    range_from_args,
    synthetic_frames,
)
from keyshift.jobs.retrain_models import TrackingStoreError, check_tracking_store
from keyshift.metrics import rstd
from keyshift.plan import Plan
from keyshift.schemas import TABLES


def test_day_range_is_inclusive_days_and_half_open_times() -> None:
    r = DayRange.parse("2026-11-01", "2026-11-03")
    assert r.days == 3
    assert r.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert r.end == datetime(2026, 11, 4, tzinfo=UTC)
    assert DayRange.ending(date(2026, 11, 25), 7).first == date(2026, 11, 19)


@pytest.mark.parametrize(
    ("first", "last", "match"),
    [("2026-11-05", "2026-11-01", "to: .* is before from"), ("yesterday", "2026-11-01", "from:"),
     ("2026-11-01", "2026-13-01", "to:")],
)
def test_day_range_rejects_bad_input_naming_the_field(first: str, last: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DayRange.parse(first, last)


def test_range_from_args_days_and_from_are_exclusive() -> None:
    args = argparse.Namespace(first="2026-11-01", last="2026-11-03", days=2)
    with pytest.raises(ValueError, match="days:"):
        range_from_args(args, 7)
    args = argparse.Namespace(first=None, last="2026-11-03", days=None)
    assert str(range_from_args(args, 7)) == "2026-10-28..2026-11-03"
    with pytest.raises(ValueError, match="days: must be >= 1"):
        range_from_args(argparse.Namespace(first=None, last="2026-11-03", days=0), 7)


@pytest.fixture(scope="module")
def small_cfg():
    return load_config(env={}, groups={"count": 64})


@pytest.fixture(scope="module")
def frames(small_cfg):
    spec = SyntheticHistory(days=2, window_s=1800, keys=300, engines=4, seed=3)
    return synthetic_frames(small_cfg, date(2026, 11, 24), spec)


def test_synthetic_history_follows_the_schemas(frames) -> None:
    metrics, key_loads = frames
    for frame, name in ((metrics, "metrics"), (key_loads, "key_loads")):
        assert list(frame.columns) == TABLES[name].names
        assert not frame[TABLES[name].required].isna().any().any(), name
    assert len(metrics) == 2 * 48
    assert key_loads["group"].between(0, 63).all()
    assert (key_loads["load"] > 0).all()  # one row per non-empty group, as the contract says


def test_synthetic_history_is_consistent_and_has_a_daily_cycle(frames) -> None:
    metrics, key_loads = frames
    per_window = key_loads.groupby("batch_id")["load"].sum()
    np.testing.assert_array_equal(per_window.to_numpy(), metrics["events_in"].to_numpy())
    sums = np.array([sum(x) for x in metrics["engine_loads"]])
    np.testing.assert_array_equal(sums, metrics["events_in"].to_numpy())
    hour = metrics["window_start"].dt.hour
    assert metrics.loc[hour.between(17, 21), "input_rate"].mean() > (
        2 * metrics.loc[hour.between(5, 9), "input_rate"].mean()
    )
    np.testing.assert_allclose(metrics["rstd"][0], rstd(np.asarray(metrics["engine_loads"][0])))


def test_synthetic_history_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="days"):
        SyntheticHistory(days=0)


def test_imbalance_on_history_matches_per_window_rstd() -> None:
    rng = np.random.default_rng(0)
    loads = rng.integers(0, 50, size=(5, 12)).astype(float)
    plan = Plan.hashed(12, 3)
    got = imbalance_on_history(plan, loads)
    want = np.mean([rstd(plan.engine_loads(row)) for row in loads])
    assert got["rstd"] == pytest.approx(want)
    assert engine_loads_per_window(plan, loads).sum() == pytest.approx(loads.sum())


def _history(loads: np.ndarray) -> LoadHistory:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    return LoadHistory(np.arange(loads.shape[0]) * 3600, loads, loads.mean(axis=0), 3600, t0,
                       t0)


def test_lptf_baseline_beats_kg_on_a_skewed_history() -> None:
    rng = np.random.default_rng(1)
    base = 1.0 / np.arange(1, 65) ** 1.2
    loads = rng.poisson(2000 * base[rng.permutation(64)], size=(24, 64)).astype(float)
    kg, plans = compute_baselines(_history(loads), engines=4, policies=["lptf"])
    (lptf,) = plans
    assert lptf.policy == "lptf"
    assert lptf.plan.groups == 64 and lptf.plan.slots == 4
    assert lptf.expected["rstd_total"] < kg["rstd_total"]
    assert lptf.moved_groups == int((lptf.plan.assignment != np.arange(64) % 4).sum())


def test_compute_baselines_rejects_zero_engines() -> None:
    with pytest.raises(ValueError, match="engines"):
        compute_baselines(_history(np.ones((2, 8))), engines=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_tracking_server_fails_fast_naming_the_key() -> None:
    with pytest.raises(TrackingStoreError, match="mlflow.tracking_uri: cannot reach"):
        check_tracking_store(f"http://127.0.0.1:{_free_port()}", timeout_s=2.0)


def test_unwritable_sqlite_tracking_store_is_reported(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TrackingStoreError, match="cannot be created"):
        check_tracking_store(f"sqlite:///{blocker}/sub/mlflow.db")
    check_tracking_store(f"sqlite:///{tmp_path}/ok/mlflow.db")  # creatable: no error


def test_retrain_job_checks_the_store_before_touching_spark(monkeypatch) -> None:
    from keyshift.jobs import retrain_models

    cfg = load_config(env={"KEYSHIFT_MLFLOW__TRACKING_URI": f"http://127.0.0.1:{_free_port()}"})
    with pytest.raises(TrackingStoreError):
        retrain_models.run(cfg, DayRange.parse("2026-11-01", "2026-11-02"),
                           spark=object())  # a real session is never needed to fail here


def test_history_error_is_a_clear_failure_not_a_skip() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from keyshift.jobs.airflow_tasks import _run

    def missing():
        raise HistoryError("metrics: no Delta table at /x")

    with pytest.raises(AirflowFailException, match="metrics: no Delta table"):
        _run("retrain_models", missing)


def test_skipped_result_becomes_an_airflow_skip_with_the_reason() -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from keyshift.jobs.airflow_tasks import _run

    with pytest.raises(AirflowSkipException, match="nothing to train on"):
        _run("retrain_models", lambda: {"status": "skipped", "reason": "nothing to train on"})
    assert _run("x", lambda: {"status": "trained"}) == {"status": "trained"}


def test_transient_errors_are_left_to_the_retries() -> None:
    from keyshift.jobs.airflow_tasks import _run

    def down():
        raise TrackingStoreError("mlflow.tracking_uri: cannot reach")

    with pytest.raises(TrackingStoreError):  # not AirflowFailException: retried with back-off
        _run("retrain_models", down)


def test_nightly_range_covers_the_days_before_the_run() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from keyshift.jobs.airflow_tasks import nightly_range

    run = datetime(2026, 11, 26, 2, 0, tzinfo=UTC)
    assert str(nightly_range(run, 3)) == "2026-11-23..2026-11-25"
    assert str(nightly_range(run, 2, "2026-11-10")) == "2026-11-09..2026-11-10"
    with pytest.raises(AirflowFailException, match="params.days"):
        nightly_range(run, 0)


def test_report_line_names_policies_and_rstd() -> None:
    from keyshift.jobs.airflow_tasks import report

    line = report({
        "job": "baseline_partitions", "range": "2026-11-01..2026-11-02", "engines": 4,
        "kg": {"expected_rstd": 30.0},
        "plans": [{"policy": "lptf", "version": 3, "new": True, "expected_rstd": 12.5,
                   "moved_groups_from_kg": 40}],
    })
    assert "lptf v3 (new): RSTD 12.5% (KG 30.0%)" in line


def test_report_line_says_what_clbs_moves_are() -> None:
    """Issue 46 item 11: 'clb v2 (new): RSTD 0.3% (KG 32.5%), moves 3079' on 4,096 groups and
    4 engines is what a from-scratch partition moves, and the line says so."""
    from keyshift.jobs.airflow_tasks import report

    line = report({
        "job": "baseline_partitions", "range": "2026-11-22..2026-11-24", "engines": 4,
        "groups": 4096, "kg": {"expected_rstd": 32.5},
        "plans": [{"policy": "clb", "version": 2, "new": True, "expected_rstd": 0.3,
                   "moved_groups_from_kg": 3079}],
    })
    assert "moves 3079 (of 4096 groups; CLB ignores state movement" in line
    assert "(1 - 1/4) of them, 3072)" in line


def test_clb_moves_what_a_partition_from_scratch_moves() -> None:
    rng = np.random.default_rng(0)
    weights = 1 / np.arange(1, 1025) ** 1.0
    rng.shuffle(weights)
    loads = rng.poisson(np.outer(1 + 0.5 * np.sin(np.arange(24) / 6), weights * 5000))
    _, plans = compute_baselines(_history(loads.astype(float)), 4, ["clb"])
    assert abs(plans[0].moved_groups / 1024 - 0.75) < 0.05


def test_airflow_env_points_at_the_repo_dags_and_a_local_sqlite(tmp_path) -> None:
    from keyshift.jobs.commands.airflow import airflow_env, dags_folder

    cfg = load_config(env={"KEYSHIFT_HOME": str(tmp_path)})
    env = airflow_env(cfg, port=18080)
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(dags_folder())
    assert (dags_folder() / "keyshift_nightly_retrain.py").is_file()
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path}/airflow/airflow.db"
    assert env["AIRFLOW__API__PORT"] == "18080"
    assert env["KEYSHIFT_HOME"] == str(tmp_path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["job", "baselines", "--from", "2026-11-05", "--to", "2026-11-01"], "before from"),
     (["job", "retrain", "--to", "someday"], "to: 'someday' is not a date"),
     (["job", "baselines", "--to", "2026-11-01", "--engines", "0"], "engines: must be in")],
)
def test_cli_bad_input_is_one_line_exit_2(argv: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "keyshift.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_clb_baseline_is_reported_on_the_history_it_was_computed_on() -> None:
    """Two anti-correlated blocks of groups (day and night peaks), KG keeps each block on
    two engines. The job must report CLB's plan with the imbalance that plan really has on
    the history and CLB's own objective (ħ before/after), whatever CLB decides."""
    rng = np.random.default_rng(2)
    hours = np.arange(48)
    day = 100 * (1 + np.sin(2 * np.pi * hours / 24))
    night = 100 * (1 + np.cos(2 * np.pi * hours / 24 + np.pi / 3))
    g = np.arange(32)
    loads = rng.poisson(np.where((g % 4 < 2)[None, :], day[:, None], night[:, None]))
    loads = loads.astype(float)
    kg, plans = compute_baselines(_history(loads), engines=4, policies=["lptf", "clb"])
    by = {p.policy: p for p in plans}
    assert set(by) == {"lptf", "clb"}
    clb = by["clb"]
    assert clb.expected == imbalance_on_history(clb.plan, loads)
    assert clb.info["windows"] == 48 and "hbar_after" in clb.info
    assert by["lptf"].expected["var"] < kg["var"]  # LPTF mixes the blocks: less variance


def test_retrain_rejects_an_unknown_kernel_naming_the_field() -> None:
    from keyshift.jobs import retrain_models

    days = DayRange.parse("2026-11-01", "2026-11-02")
    with pytest.raises(ValueError, match="kernel: 'rbf' is not one of auto"):
        retrain_models.run(load_config(env={}), days, kernel="rbf", spark=object())
    # a list ('ard|ard+local', the backtest's) is checked part by part
    with pytest.raises(ValueError, match=r"kernel: 'ard\|rbf' is not one of auto"):
        retrain_models.run(load_config(env={}), days, kernel="ard|rbf", spark=object())


@pytest.mark.integration
def test_cli_missing_history_is_one_line_exit_1(tmp_path) -> None:
    """Against an empty warehouse the job fails with the table and path (needs Spark)."""
    env = {**os.environ, "KEYSHIFT_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "keyshift.cli", "job", "baselines",
                           "--to", "2026-11-01", "--days", "1"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "key_loads: no Delta table at" in proc.stderr
    assert "Traceback" not in proc.stderr



def test_report_line_for_a_retrain_names_versions_and_the_champion_decision() -> None:
    from keyshift.jobs.airflow_tasks import report

    line = report({
        "job": "retrain_models", "range": "2026-11-22..2026-11-24", "windows": 432,
        "workloads": {"fsd.events": {"status": "trained", "models": {"models": {"input_rate": {
            "name": "keyshift-input-rate.fsd.events", "version": "2", "kernel": "ard+daily",
            "metrics": {"cc": 0.97, "rmse": 13.3}, "champion_moved": False,
            "reason": "champion RMSE 12.9 is better"}}}},
            "heavy.pay": {"status": "skipped", "reason": "9 usable metrics rows, need at least 48"}},
    })
    assert "fsd.events: input_rate keyshift-input-rate.fsd.events v2 (ard+daily): CC 0.970, " \
           "RMSE 13.3" in line
    assert "champion kept (champion RMSE 12.9 is better)" in line
    assert "heavy.pay: 9 usable metrics rows, need at least 48" in line

