"""``keyshift demo --seed-history``: the seeded history continues into the demo's "now" in the
demo's units; a failed retrain is one line and the demo goes on with the fallback forecast;
a short real run changes N from the champion GPs and reports forecast vs actual."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from test_demo import ROOT, _demo_env

from keyshift.config import load_config
from keyshift.jobs.history import synthetic_frames
from keyshift.jobs.seed import TASK_S, TUPLE_S, demo_history
from keyshift.streaming.broker import free_port


@pytest.fixture(scope="module")
def demo_cfg():
    return load_config(env={}, groups={"count": 64}, controller={"window_s": 10.0},
                       spark={"trigger_s": 2.0})


def test_the_history_ends_at_the_current_window_at_the_demo_rate(demo_cfg) -> None:
    end = datetime(2026, 11, 26, 18, 23, 47, tzinfo=UTC)  # a Thursday evening
    spec = demo_history(demo_cfg, 300.0, end)
    metrics, _ = synthetic_frames(demo_cfg, end, spec)
    starts = metrics.window_start.dt.tz_convert("UTC") if metrics.window_start.dt.tz \
        else metrics.window_start.dt.tz_localize("UTC")
    # the windows are the scaler's: Δ long, back to back, the last one closes at the window
    # boundary just before `end`, so the forecast for the demo's first window continues them
    assert (np.diff(starts.astype("int64")) == 10 * 10**9).all()
    assert starts.iloc[-1] + np.timedelta64(10, "s") == datetime(2026, 11, 26, 18, 23, 40,
                                                                 tzinfo=UTC)
    assert (metrics.window_end - metrics.window_start).dt.total_seconds().eq(10).all()
    # the rate passes through the demo's --rate at the end (noise: 8 % per window)
    assert metrics.input_rate.tail(30).mean() == pytest.approx(300.0, rel=0.1)
    assert metrics.input_rate.head(30).mean() != pytest.approx(300.0, rel=0.1)  # a cycle
    # a scaler ran: several engine counts, each window's loads summing to its events
    assert metrics.engines.nunique() >= 4 and metrics.engines.max() <= demo_cfg.engines.max
    assert [len(x) for x in metrics.engine_loads] == metrics.engines.tolist()
    np.testing.assert_array_equal([sum(x) for x in metrics.engine_loads], metrics.events_in)
    # per-tuple latency: five batches' fixed engine time per engine over the window's
    # tuples per engine, plus the per-tuple cost
    per_engine = metrics.events_in / metrics.engines
    want = 5 * TASK_S / per_engine + TUPLE_S
    np.testing.assert_allclose(metrics.latency_s, want, rtol=0.25)


def test_the_history_ends_with_whole_days_for_a_date(demo_cfg) -> None:
    """A date still means whole UTC days (``keyshift job history``, the DAG tests)."""
    from datetime import date

    from keyshift.jobs.history import SyntheticHistory

    metrics, _ = synthetic_frames(demo_cfg, date(2026, 11, 24),
                                  SyntheticHistory(days=1, window_s=3600, keys=50))
    assert len(metrics) == 24
    assert str(metrics.window_start.iloc[0])[:19] == "2026-11-24 00:00:00"
    assert str(metrics.window_end.iloc[-1])[:19] == "2026-11-25 00:00:00"


def test_a_failed_retrain_is_one_line_and_the_demo_goes_on(tmp_path, monkeypatch) -> None:
    """The tracking store is checked before anything is written: an unusable one fails the
    seeding within seconds, in one line that says the scaler uses the fallback."""
    from keyshift.lakehouse import logs, session
    from keyshift.streaming.commands import demo

    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the store's folder would be: cannot be created
    cfg = load_config(env={}, home=str(tmp_path / "ks"),
                      mlflow={"tracking_uri": f"sqlite:///{blocked}/sub/mlflow.db"})
    monkeypatch.setattr(logs, "configure_spark_logging", lambda *a, **k: None)
    monkeypatch.setattr(logs, "set_session_level", lambda *a, **k: None)
    monkeypatch.setattr(session, "get_spark", lambda *a, **k: object())  # never used
    lines: list[str] = []
    out = demo._seed(cfg, "demo-x", 300.0, None, lines.append)
    assert out["status"] == "failed" and "mlflow.tracking_uri" in out["reason"]
    failed = [line for line in lines if line.startswith("seeding failed")]
    assert len(failed) == 1 and "\n" not in failed[0], lines
    assert "mlflow.tracking_uri" in failed[0] and failed[0].endswith(
        "the scaler starts on the fallback forecast")
    assert not (tmp_path / "ks" / "warehouse").exists()  # nothing was written


def _run_demo(tmp_path: Path, duration: int, rate: int,
              env_extra: dict[str, str] | None = None, *extra: str):
    env = {**_demo_env(tmp_path / "ks", free_port()), **(env_extra or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "demo", "--duration", str(duration), "--rate",
         str(rate), "--seed-history", "--json", *extra],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def _scaler_rows(page: str) -> list[str]:
    """The reasons of the report's scale decisions (its table of decisions that changed
    the plan)."""
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    return [r for r in rows if re.search(r"<td>scale_(out|in)</td>", r)]


@pytest.mark.integration
@pytest.mark.slow
def test_seeded_champions_change_n_and_the_report_shows_the_forecast(tmp_path: Path) -> None:
    """Seeding writes the history, the retrain registers champions, the job loads them at
    start, and the scaler's first decisions change N citing them; the report plots the
    scaler's forecast In against the measured In."""
    proc, summary = _run_demo(tmp_path, 15, 100)
    assert summary["planner"] is True
    seeded = summary["seeded"]
    assert seeded["status"] == "trained", seeded
    assert seeded["models"] == {"input_rate": "1", "latency": "1"}
    assert seeded["history"]["rows"] > 100
    assert re.search(r"^seeded \d+ windows .* champions keyshift-input-rate\.\S+ v1, "
                     r"keyshift-latency\.\S+ v1$", proc.stderr, re.MULTILINE), proc.stderr[-3000:]
    assert summary["processed"] + summary["dead_letters"] == summary["records"] == 1500
    assert summary["scale_actions"] >= 1 and summary["first_scale_s"] is not None, summary
    page = (Path(summary["run_dir"]) / "report.html").read_text()
    scaled = _scaler_rows(page)
    # the input-rate version names its forecaster when training kept one without a GP
    # ("v1 (the smoothed level (no cycle) alone)", issue 44); both are named either way
    named = re.compile(r"champion GPs keyshift-input-rate\.\S+ v1( \(.*\))?, keyshift-latency\.\S+ v1;")
    assert scaled and all(named.search(r) for r in scaled), [r[-400:] for r in scaled]
    assert "forecast.png" in page
    assert (Path(summary["run_dir"]) / "forecast.png").stat().st_size > 1000


@pytest.mark.integration
@pytest.mark.slow
def test_seeding_that_fails_leaves_the_demo_on_the_fallback(tmp_path: Path) -> None:
    """An unusable tracking store: one line says the seeding failed, the demo still runs
    with the engine scaler (``--planner``, which ``--seed-history`` implies, given both),
    whose decisions come from the pure-core fallback forecast once it has measured three
    windows. Engine-seconds cost ten times a missed tuple here, so the 4 initial engines are
    too many for 50 events/s and N comes down; at most 50 records per trigger, so that the
    400 events make eight windows, not two large catch-up batches. The summary and the
    report say so. (This run is also the demo's ``--planner`` test: a fresh home's empty
    store gives the same fallback, which test_engines_scaling's no-champion test covers on
    the job itself.)"""
    blocked = tmp_path / "file"
    blocked.write_text("")
    proc, summary = _run_demo(tmp_path, 8, 50, {
        "KEYSHIFT_MLFLOW__TRACKING_URI": f"sqlite:///{blocked}/sub/mlflow.db",
        "KEYSHIFT_PLANNER__EC": "10", "KEYSHIFT_SPARK__MAX_OFFSETS_PER_TRIGGER": "50",
        # the fallback's own decisions: measured demand would scale in at window 1, before
        # the fallback has its three windows (tests/keyshift/control/test_overrule.py)
        "KEYSHIFT_PLANNER__OVERRULE_WINDOWS": "0"},
        "--planner")
    failed = [line for line in proc.stderr.splitlines() if line.startswith("seeding failed")]
    assert len(failed) == 1 and "mlflow.tracking_uri" in failed[0], proc.stderr[-3000:]
    assert "engine scaler on" in proc.stderr
    assert summary["seeded"]["status"] == "failed" and summary["planner"] is True
    assert summary["processed"] + summary["dead_letters"] == summary["records"] == 400
    assert summary["scale_actions"] >= 1, summary
    assert summary["engines_max"] == 4 and summary["engines_min"] < 4, summary
    scaled = _scaler_rows((Path(summary["run_dir"]) / "report.html").read_text())
    assert scaled and all("fallback SeasonalProfile+EngineLatency" in r and "no champion" in r
                          for r in scaled), scaled
