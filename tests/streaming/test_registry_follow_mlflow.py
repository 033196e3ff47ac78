"""The job's scaler follows a real MLflow registry (SQLite store) while it decides (issue 14
item 5; issue 16 item 1, the registry faults): the alias moves mid-run and the next decisions
name the new version; a champion whose artifact was overwritten with garbage is refused and
the model in use kept; a registry that stops answering mid-run keeps the model, and one that
was down at start, then empty, is loaded at the check after the first retrain. The checks run on the forecaster's own thread
as in the job; the test waits for each one (``join``) instead of sleeping."""

from __future__ import annotations

from pathlib import Path

import pytest
from engines_support import MemoryControlLog
from test_scaling_adapters import Clock, config, run_windows, synthetic_metrics

from keyshift.config import config_workload, load_config
from keyshift.streaming.controller import Controller

pytestmark = [pytest.mark.integration, pytest.mark.slow]

K = 2  # planner.registry_check_windows: a check before every even window


def settings(tmp_path: Path, uri: str | None = None):
    """The adapters' planner settings with a private store (``uri``: another one)."""
    cfg = config(tmp_path, registry_check_windows=K)
    return cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(update={
        "tracking_uri": uri or f"sqlite:///{tmp_path / 'mlflow.db'}",
        "artifact_root": str(tmp_path / "artifacts")})})


def register(cfg, tmp_path: Path, night: int = 0) -> set[Path]:
    """One nightly retrain (a new version of both models); the files of its stored GPs.
    Each night trains on its own history (``night`` shifts the rate): a retrain that ties
    the champion on the same data registers no version (models/training.py)."""
    from keyshift.models.training import train_and_register

    before = set((tmp_path / "artifacts").rglob("gp/*"))
    out = train_and_register(synthetic_metrics(rate=50.0 + 7.0 * night), cfg, min_rows=20,
                             kernel="ard", iters=5)
    assert "models" in out, out
    return set((tmp_path / "artifacts").rglob("gp/*")) - before


def point_alias(cfg, rate: str, latency: str) -> None:
    from mlflow import MlflowClient

    from keyshift.models.registry import model_name, tracking

    with tracking(cfg):
        client = MlflowClient()
        client.set_registered_model_alias(model_name(cfg, "input_rate"), "champion", rate)
        client.set_registered_model_alias(model_name(cfg, "latency"), "champion", latency)


def controller(cfg) -> Controller:
    """The job's controller with its default forecaster (the real registry, checks on a
    thread), one batch per window, in memory."""
    c = Controller(cfg, "r", "kg", groups=24, initial_engines=2, windows=1,
                   log=MemoryControlLog(), clock=Clock())
    c.recover(0)
    return c


def windows(c: Controller, first: int, count: int) -> list[dict]:
    """``count`` windows from batch ``first``; a check started in one of them is waited for
    before the next, so its outcome lands at the next window."""
    rows = []
    for b in range(first, first + count):
        rows += run_windows(c, [300], first_batch=b)[0]
        c.forecaster.join(120)
    return rows


def saying(rows: list[dict], words: str, start: str) -> dict:
    """The one row whose reason has ``words``; its reason must start with ``start``."""
    found = [r for r in rows if words in r["reason"]]
    print(*(r["reason"][:400] for r in found), sep="\n")
    assert len(found) == 1, [r["reason"] for r in rows]
    assert found[0]["reason"].startswith(start), found[0]["reason"]
    return found[0]


def label(rate: str, latency: str) -> str:
    w = config_workload(load_config(env={}))
    return f"champion GPs keyshift-input-rate.{w} v{rate}, keyshift-latency.{w} v{latency}"


def test_alias_moves_corrupt_champion_and_registry_down_mid_run(tmp_path) -> None:
    cfg = settings(tmp_path)
    register(cfg, tmp_path)            # v1, champion
    register(cfg, tmp_path, 1)            # v2
    corrupt = register(cfg, tmp_path, 2)  # v3
    point_alias(cfg, "1", "1")
    c = controller(cfg)
    rows = windows(c, 0, 2)
    assert all(label("1", "1") in r["reason"] for r in rows), [r["reason"] for r in rows]

    # the nightly retrain moves the input-rate alias: the next check loads it, the next
    # decisions name it, and the unmoved latency model is v1 still
    point_alias(cfg, "2", "1")
    rows = windows(c, 2, 4)  # batch b decides window b + 1: window 4 checks, 5 swaps
    moved = saying(rows, "loaded",
                   f"registry check at window 4: loaded {label('2', '1')} (was "
                   f"{label('1', '1')}); forecast: {label('2', '1')}")
    after = rows[rows.index(moved) + 1:]
    assert after and all(label("2", "1") in r["reason"] and label("1", "1") not in r["reason"]
               for r in after)

    # a champion whose artifact is garbage: refused, the model in use kept, the row says so
    assert corrupt
    for f in corrupt:
        f.write_bytes(b"\x00garbage\xff" * 64)
    point_alias(cfg, "3", "3")
    rows = windows(c, 6, 3)  # window 8 checks, 9 says it failed
    saying(rows, "failed", f"registry check at window 8 failed, kept {label('2', '1')}: "
                           "cannot load models:/keyshift-input-rate.")
    assert all(label("2", "1") in r["reason"] for r in rows)
    assert c.forecaster.models.versions == ("2", "1")

    # the registry stops answering: the check says so, the model is kept, decisions go on
    point_alias(cfg, "2", "1")
    c.forecaster.cfg = settings(tmp_path, "http://127.0.0.1:9")  # a port nobody serves
    rows = windows(c, 9, 2)  # window 10 checks, 11 says it failed
    saying(rows, "unreachable", f"registry check at window 10 failed, kept {label('2', '1')}: "
                                "MLflow tracking store http://127.0.0.1:9 is unreachable")
    assert len(rows) == 2 and all(label("2", "1") in r["reason"] for r in rows)

    # back: the alias did not move, so nothing changes and nothing is said
    c.forecaster.cfg = cfg
    rows = windows(c, 11, 3)  # windows 12 and 14 check
    assert not any("registry check" in r["reason"] for r in rows)
    assert all(label("2", "1") in r["reason"] for r in rows)


def test_registry_down_at_start_is_loaded_at_the_next_check(tmp_path) -> None:
    cfg = settings(tmp_path)
    c = controller(settings(tmp_path, "http://127.0.0.1:9"))  # down at start
    assert c.forecaster.models is None
    rows = windows(c, 0, 1)
    assert "no champion: MLflow tracking store http://127.0.0.1:9 is unreachable" \
        in rows[0]["reason"]
    c.forecaster.cfg = cfg  # up again, but nothing registered yet: the fallback goes on
    rows = windows(c, 1, 2)  # window 2 retries, 3 hears of it
    assert "no champion: no input_rate forecaster of workload" in rows[1]["reason"]
    assert "(registry check at window 2)" in rows[1]["reason"]
    register(cfg, tmp_path)  # the first nightly retrain
    rows = windows(c, 3, 3)  # window 4 checks, 5 swaps
    saying(rows, "loaded", f"registry check at window 4: loaded {label('1', '1')} "
                           "(was the fallback)")
    assert label("1", "1") in rows[-1]["reason"] and "no champion" not in rows[-1]["reason"]
