"""What a reviewer sees in MLflow (issue 15 item 5): each training run's held-out plots and
input dataset (the Delta table and the version read), each version's description; and the
retrain job on a real Delta table carrying the version it read into that lineage."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pytest

from keyshift.models.review import (
    DeltaSource,
    held_out_figures,
    plot_path,
    version_description,
)

T0 = 1_764_547_200.0  # 2025-12-01 00:00 UTC


def test_held_out_figures_draw_the_forecast_the_interval_and_the_residuals() -> None:
    from matplotlib.dates import date2num

    t = T0 + np.arange(12) * 600.0
    actual = np.linspace(10, 21, 12)
    mean = actual + np.where(np.arange(12) % 2, 1.0, -0.5)
    figs = held_out_figures("input_rate", t, actual, mean, mean - 0.8, mean + 0.8)
    assert set(figs) == {"forecast_vs_actual", "residuals"}
    ax = figs["forecast_vs_actual"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_allclose(lines["actual"].get_ydata(), actual)
    np.testing.assert_allclose(lines["forecast (mean)"].get_ydata(), mean)
    np.testing.assert_allclose(date2num(lines["actual"].get_xdata()),
                               date2num(t.astype("datetime64[s]")))
    assert "50% inside the 90 % interval" in ax.get_title()  # the -0.5 misses are inside
    assert ax.get_ylabel() == "input rate [events/s]"
    over_time, spread = figs["residuals"].axes
    points = next(line for line in over_time.get_lines() if line.get_label() != "_child0")
    np.testing.assert_allclose(points.get_ydata(), actual - mean)
    assert sum(p.get_width() for p in spread.patches) == 12  # every window in the histogram


def test_version_description_names_target_window_metrics_and_data() -> None:
    text = version_description(
        "latency", ("timestamp", "engines"), T0 + np.arange(10) * 3600.0,
        T0 + np.arange(10, 13) * 3600.0, {"rmse": 0.0123, "mae": 0.01, "cc": 0.91},
        "ard+daily", DeltaSource("metrics", "/wh/metrics", 0), "no champion yet")
    assert text.startswith("Forecasts the latency per event [s]")
    assert "10 windows, 2025-12-01 00:00 to 2025-12-01 09:00 UTC" in text
    assert "next 3 windows, 2025-12-01 10:00 to 2025-12-01 12:00 UTC: RMSE 0.0123" in text
    assert "Delta table `metrics` at /wh/metrics, version 0" in text
    assert plot_path("latency", "residuals") in text


def _client(cfg):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=cfg.mlflow_tracking_uri,
                        registry_uri=cfg.mlflow_tracking_uri)


def _cfg(tmp_path: Path, **extra):
    from keyshift.config import load_config

    return load_config(env={}, home=str(tmp_path / "ks"),
                       mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                               "artifact_root": str(tmp_path / "artifacts")}, **extra)


def _training_input(client, run_id: str):
    inputs = client.get_run(run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    return inputs[0].dataset, {t.key: t.value for t in inputs[0].tags}


@pytest.mark.integration
def test_a_training_run_logs_plots_lineage_and_a_version_description(tmp_path) -> None:
    from test_models_registry import _metrics

    from keyshift.models.training import train_and_register

    cfg = _cfg(tmp_path)
    source = DeltaSource("metrics", str(tmp_path / "wh" / "metrics"), 7)
    out = train_and_register(_metrics(), cfg, kernel="ard", iters=5, source=source)
    client = _client(cfg)
    plots = sorted(a.path for a in client.list_artifacts(out["run_id"], "plots"))
    assert plots == sorted(plot_path(w, p) for w in ("input_rate", "latency")
                           for p in ("forecast_vs_actual", "residuals"))
    local = Path(client.download_artifacts(out["run_id"], plots[0], str(tmp_path / "dl")))
    assert local.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dataset, tags = _training_input(client, out["run_id"])
    assert dataset.name == "metrics@v7" and dataset.source_type == "delta_table"
    assert '"delta_table_version": 7' in dataset.source and str(source.path) in dataset.source
    assert tags["mlflow.data.context"] == "training" and tags["delta_table_version"] == "7"
    for model in out["models"].values():
        version = client.get_model_version(model["name"], model["version"])
        assert "version 7" in version.description
        assert f"RMSE {model['metrics']['rmse']:.4g}" in version.description
        assert model["reason"] in version.description
        # which forecaster the training window chose, and why (issue 44)
        assert f"Why this forecaster: {model['why']}" in version.description
        assert model["forecaster"] in version.description


@pytest.mark.integration
@pytest.mark.slow
def test_the_retrain_job_logs_the_delta_version_it_read(spark, spark_config,
                                                        tmp_path) -> None:
    """Two writes make version 1 of ``metrics`` (create, then the history); the job reads
    it pinned, and a later append does not change what the run says it trained on."""
    from keyshift.jobs import retrain_models
    from keyshift.jobs.history import (
        DayRange,
        SyntheticHistory,
        read_pinned,
        write_synthetic_history,
    )

    cfg = spark_config.model_copy(update={
        "warehouse": spark_config.warehouse.model_copy(update={"root": str(tmp_path / "wh")}),
        "mlflow": _cfg(tmp_path).mlflow, "home": str(tmp_path / "ks")})
    spec = SyntheticHistory(days=2, window_s=1800, keys=200, engines=3, seed=3)
    write_synthetic_history(spark, cfg, date(2026, 11, 24), spec)
    _, version = read_pinned(spark, cfg, "metrics")
    out = retrain_models.run(cfg, DayRange.parse("2026-11-23", "2026-11-24"), spark=spark,
                             kernel="ard", min_rows=20)
    assert out["status"] == "trained" and out["metrics_version"] == version
    write_synthetic_history(spark, cfg, date(2026, 11, 24), spec)  # a newer version
    assert read_pinned(spark, cfg, "metrics")[1] > version
    from keyshift.config import config_workload

    # the history's rows carry the config's workload, read back through Delta
    assert set(out["workloads"]) == {config_workload(cfg)}, out["workloads"].keys()
    trained = out["workloads"][config_workload(cfg)]["models"]
    dataset, tags = _training_input(_client(cfg), trained["run_id"])
    assert tags["delta_table_version"] == str(version)
    assert tags["delta_path"] == cfg.table_path("metrics")
    assert dataset.name == f"metrics@v{version}"
