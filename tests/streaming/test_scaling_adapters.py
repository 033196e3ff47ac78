"""The streaming scaler's adapters without Spark: forecasts from real (small) GPs trained
by models/, the fallback and its reasons, plan realization through ELB's scale mechanics,
the decision rows, and recovery from the typed control records alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from engines_support import MemoryControlLog

from keyshift.config import config_workload, load_config, with_workload
from keyshift.control import MIN_FALLBACK_WINDOWS, WindowSample, fallback_forecast
from keyshift.control import scale_plan as realize
from keyshift.plan import Plan
from keyshift.streaming.controller import Controller
from keyshift.streaming.scaling import ChampionForecast, JobForecaster, load_champions

WINDOW_S = 10.0
T0 = 1_764_000_000.0  # a fixed epoch second: runs are reproducible


def synthetic_metrics(rows: int = 60, rate: float = 50.0, lat_ms: float = 2.0) -> pd.DataFrame:
    """Rows of the metrics schema: a steady rate with a small wave, per-tuple latency that
    grows slightly with the engine count (the units the scaler feeds the GPs)."""
    rng = np.random.default_rng(0)
    t = T0 - WINDOW_S * np.arange(rows, 0, -1)
    engines = 1 + (np.arange(rows) % 4)
    input_rate = rate + 5 * np.sin(np.arange(rows) / 5) + rng.normal(0, 0.5, rows)
    return pd.DataFrame({
        "window_start": pd.to_datetime(t, unit="s", utc=True),
        "input_rate": input_rate,
        "events_in": np.round(input_rate * WINDOW_S),
        "latency_s": lat_ms / 1000 * (1 + 0.05 * (engines - 1)) * (1 + rng.normal(0, 0.01, rows)),
        "engines": engines,
    })


@pytest.fixture(scope="module")
def trained() -> tuple[bytes, bytes]:
    return train_gps()


def train_gps() -> tuple[bytes, bytes]:
    """Both GPs trained through models/ (features from the one builder), as stored."""
    from keyshift.models.features import build_features
    from keyshift.models.gp import InputRateGP, LatencyGP

    X_r, y_r, X_l, y_l = build_features(synthetic_metrics())
    rate = InputRateGP(kernel="ard", iters=15).fit(X_r, y_r)
    lat = LatencyGP(kernel="ard", iters=15).fit(X_l, y_l)
    return rate.to_bytes(), lat.to_bytes()


@pytest.fixture()
def champion(trained) -> ChampionForecast:
    """A fresh copy per test (online observations change a served model)."""
    from keyshift.models.gp import GPForecaster
    from keyshift.models.registry import LoadedModel

    rate, lat = (GPForecaster.from_bytes(b) for b in trained)
    return ChampionForecast(LoadedModel(rate, "keyshift-input-rate", "1"),
                            LoadedModel(lat, "keyshift-latency", "1"))


def config(tmp_path, **planner):
    return load_config(env={}, home=str(tmp_path / "home"),
                       controller={"window_s": WINDOW_S},
                       engines={"initial": 2, "min": 1, "max": 6},
                       planner={"enabled": True, "horizon": 4, "mc": 10.0, "ec": 1.0,
                                "rc": 5.0, **planner})


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def controller(cfg, loader=None, log=None, policy: str = "kg", groups: int = 24,
               batch_id: int = 0) -> Controller:
    """The job's controller with one batch per window, in memory, on a test clock."""
    c = Controller(cfg, "r", policy, groups=groups, initial_engines=2, windows=1,
                   log=log if log is not None else MemoryControlLog(),
                   forecaster=JobForecaster(cfg, loader), clock=Clock())
    c.recover(batch_id)
    return c


def run_windows(c: Controller, inputs, lat_s: float | list = 0.02, first_batch: int = 0):
    """Drive the controller like the job: one batch per window; returns the scaler's rows
    and the plan in force after each window (the first: before the first)."""
    groups = c.groups
    rows, plans = [], [c.plan_for(first_batch)]
    lats = lat_s if isinstance(lat_s, list) else [lat_s] * len(inputs)
    for i, n_in in enumerate(inputs):
        b = first_batch + i
        loads = np.full(groups, n_in / groups)
        c.collect(b, loads, np.zeros(groups), engine_s=lats[i] * n_in, started=T0 + WINDOW_S * b)
        c.loop.clock.t = T0 + WINDOW_S * (b + 1)
        d = c.end_of_batch(b)
        rows.append(d.rows[0])
        plans.append(c.plan_for(b + 1))
    return rows, plans


# -- forecasts ------------------------------------------------------------------------------------
def test_champion_forecast_has_the_planners_shapes_and_units(champion) -> None:
    fc = champion.forecast(T0, horizon=5, k=4, window_s=WINDOW_S)
    assert fc.in_mean.shape == (5,) and fc.lat_mean.shape == (5, 4)
    # the GP forecasts events/s; the planner gets tuples per window (x Δt)
    assert 300 < fc.in_mean[0] < 700
    assert (fc.in_std > 0).all()
    # per-tuple latency around the 2 ms it was trained on, rising with the engine count
    assert 1.5e-3 < fc.lat_mean[0, 0] < 2.5e-3
    assert fc.lat_mean[0, 3] > fc.lat_mean[0, 0]


def test_champion_follows_online_observations_without_refit(champion) -> None:
    before = champion.forecast(T0, 3, 2, WINDOW_S).in_mean[0]
    hp = champion.rate.gp.hyperparameters()
    for j in range(5):  # the input jumps to 4x: the next windows' forecast must move up
        champion.observe(WindowSample(T0 + WINDOW_S * j, 2000.0, 2e-3, 2), WINDOW_S)
    after = champion.forecast(T0 + 5 * WINDOW_S, 3, 2, WINDOW_S).in_mean[0]
    assert after > before * 2
    assert champion.rate.gp.hyperparameters() == hp


def test_fallback_needs_history_then_follows_the_run() -> None:
    hist = [WindowSample(T0 + WINDOW_S * i, 100.0 * (i + 1), 1e-3 * (1 + 0.1 * (i % 2)),
                         1 + i % 2) for i in range(MIN_FALLBACK_WINDOWS - 1)]
    with pytest.raises(RuntimeError, match="too little history"):
        fallback_forecast(hist, T0, 3, 4, WINDOW_S)
    hist += [WindowSample(T0 + WINDOW_S * i, 100.0 * (i + 1), 1e-3 * (1 + 0.1 * (i % 2)),
                          1 + i % 2) for i in range(MIN_FALLBACK_WINDOWS - 1, 8)]
    fc = fallback_forecast(hist, T0 + 80, 3, 4, WINDOW_S)
    assert fc.in_mean.shape == (3,) and fc.lat_mean.shape == (3, 4)
    # a ramp: the AR(1) carries the recent level, well above the run's mean of 450
    assert fc.in_mean[0] > 600
    assert fc.lat_mean[0, 1] > fc.lat_mean[0, 0] > 0
    assert not fc.in_predictive  # a spread of past windows: the reserve sizes on the rises


# -- realization -------------------------------------------------------------------------------
def test_scale_out_moves_only_what_the_new_slot_needs() -> None:
    plan = Plan.hashed(60, 3)
    new, _ = realize(plan, 4, np.ones(60))
    assert new.parallelism == 4
    moved = np.flatnonzero(plan.assignment != new.assignment)
    # every move goes to the new slot (no shuffling among the old engines), and no more
    # than the new mean 60/4 = 15 move; ELB sheds strictly below each donor's excess of
    # 5, so each donor keeps one group above the mean: 3 x 4 = 12 moves
    assert set(new.assignment[moved].tolist()) == {3}
    assert moved.size == 12
    assert np.bincount(new.assignment, minlength=4).tolist() == [16, 16, 16, 12]


def test_scale_in_moves_only_the_removed_engines_groups() -> None:
    plan = Plan.hashed(60, 4)
    # events per group in the window: engine 2 is plainly the least loaded (50 against
    # 100 is no Poisson noise; 0.5 against 1 would be, keyshift.control.scaling.expected_loads)
    loads = np.full(60, 100.0)
    loads[plan.assignment == 2] = 50.0
    new, _ = realize(plan, 3, loads)
    assert new.parallelism == 3 and not new.live[2] and new.slots == 4
    moved = np.flatnonzero(plan.assignment != new.assignment)
    assert set(moved.tolist()) == set(np.flatnonzero(plan.assignment == 2).tolist())


@pytest.mark.parametrize("seed", range(6))
def test_realize_keeps_one_live_owner_and_moves_only_from_loaded_engines(seed) -> None:
    rng = np.random.default_rng(seed)
    groups, n = 64, int(rng.integers(1, 6))
    plan = Plan.hashed(groups, n)
    loads = rng.zipf(1.5, groups).astype(float) * (rng.random(groups) < 0.8)
    target = int(rng.integers(1, 8))
    new, _ = realize(plan, target, loads)
    assert new.parallelism == target
    assert new.live[new.assignment].all()  # every group has exactly one live owner
    eng = plan.engine_loads(loads)
    mean_after = loads.sum() / target if loads.sum() > 0 else 0.0
    moved = np.flatnonzero(plan.assignment != new.assignment)
    src = plan.assignment[moved]
    # a group leaves only an engine that was removed or was above the new mean load
    assert all((not new.live[e]) or eng[e] > mean_after for e in src.tolist())
    # far fewer moves than re-hashing onto the new count would make
    rehash = np.count_nonzero(plan.assignment != np.arange(groups) % target)
    assert moved.size <= max(rehash, np.count_nonzero(~new.live[plan.assignment]))


def test_realize_without_load_still_gives_the_new_slots_groups() -> None:
    new, _ = realize(Plan.hashed(8, 2), 4, np.zeros(8))
    counts = np.bincount(new.assignment, minlength=4)
    assert new.parallelism == 4 and (counts[2:] >= 1).all()  # ELB's strict shedding: 3,3,1,1


# -- decisions and their reasons -------------------------------------------------------------
def test_missing_registry_falls_back_and_says_so(tmp_path) -> None:
    # the fallback's own decisions, without measured demand overruling them (its test:
    # tests/keyshift/control/test_overrule.py; with it this run scales in at window 2)
    cfg = config(tmp_path, overrule_windows=0)
    c = controller(cfg)  # a fresh SQLite store: no registered model
    assert c.forecaster.models is None
    assert "no input_rate forecaster of workload" in c.forecaster.model_error
    rows, plans = run_windows(c, [40] * (MIN_FALLBACK_WINDOWS + 2))
    first = rows[0]
    assert first["component"] == "scaler" and first["action"] == "none"
    assert "too little history" in first["reason"]
    assert "no input_rate forecaster" in first["reason"]
    later = rows[-1]
    assert "fallback SeasonalProfile+EngineLatency" in later["reason"]
    assert "no input_rate forecaster" in later["reason"]
    # 40 tuples x 20 ms = 0.8 engine-seconds per 10-s window: one engine is enough, and the
    # fallback's forecast says so once it has the history
    scaled = [r for r in rows if r["action"] == "scale_in"]
    assert scaled and "fallback SeasonalProfile" in scaled[0]["reason"]
    assert plans[-1].parallelism == 1


def test_ramp_scales_out_with_the_champion_and_realizes_the_plan(tmp_path, champion) -> None:
    cfg = config(tmp_path)
    log = MemoryControlLog()
    c = controller(cfg, lambda _cfg: champion, log)
    # 2 engines handle 2·10 s / 20 ms = 1000 tuples per window; the input ramps past it
    inputs = [300, 300, 600, 1500, 2500, 2500]
    rows, plans = run_windows(c, inputs, lat_s=0.02)
    actions = [r["action"] for r in rows]
    assert "scale_out" in actions, [r["reason"] for r in rows]
    i = actions.index("scale_out")
    r = rows[i]
    assert "champion GPs keyshift-input-rate v1, keyshift-latency v1" in r["reason"] or \
        "following the path" in r["reason"]
    assert r["engines_after"] > r["engines_before"] and r["moved_groups"] > 0
    assert plans[i + 1].parallelism == r["engines_after"]
    assert plans[-1].live[plans[-1].assignment].all()
    # the restart state is typed, in the store, and not in the audit log's words
    assert "| obs" not in r["reason"] and "| state" not in r["reason"]
    rec = {x.batch_id: x for x in log.records()}[r["batch_id"]]
    assert rec.sample.in_tuples == inputs[i] and rec.sample.lat_s == pytest.approx(0.02)
    assert rec.plan_version == r["plan_version"] and rec.scaler.engines_after == r["engines_after"]
    assert rec.scaler.reason == r["reason"]


def test_dry_run_records_without_changing_the_plan(tmp_path, champion) -> None:
    cfg = config(tmp_path, dry_run=True)
    c = controller(cfg, lambda _cfg: champion)
    rows, plans = run_windows(c, [300, 2500, 2500, 2500], lat_s=0.02)
    assert any(r["action"] != "none" for r in rows)  # the planner wanted another N ...
    assert all(p.parallelism == 2 for p in plans)  # ... and nothing was applied
    assert all(r["engines_after"] == 2 for r in rows)
    assert any(r["reason"].startswith("dry run, not applied") for r in rows)


@pytest.mark.parametrize("reserve", [0.0, 1.0])
def test_recovery_from_rows_decides_like_the_uninterrupted_run(tmp_path, reserve) -> None:
    cfg = config(tmp_path, horizon=6, reserve_quantile=reserve)
    # with the burst reserve, the early burst's rise keeps headroom after the restart too
    inputs = ([200, 300, 500, 800, 1200, 1600, 1600, 1200, 700, 300] if not reserve else
              [100, 100, 1500, 100, 100, 100, 100, 100, 100, 100])
    log = MemoryControlLog()
    straight = controller(cfg, _no_registry, log)
    rows, plans = run_windows(straight, inputs, lat_s=0.02)

    cut = 6  # crash after window 6's record was written: restart at batch 6
    crashed = MemoryControlLog()
    for r in log.records():
        if r.batch_id <= cut:
            crashed.write_record(r)
    known = {r.plan_version for r in crashed.records()} | {0}
    crashed.plans_written = [p for p in log.plans_written if p.version in known]
    again = controller(cfg, _no_registry, crashed, batch_id=cut)
    assert [h.in_tuples for h in again.scaler.history] == inputs[:cut]
    # the re-executed batch measures other timings; the later ones are those of the first run
    lats = [0.03] + [0.02] * (len(inputs) - cut - 1)
    rerun, replans = run_windows(again, inputs[cut:], lat_s=lats, first_batch=cut)

    def same(r):
        return {k: v for k, v in r.items() if k != "decided_at"}

    assert same(rerun[0]) == same(rows[cut])  # the re-executed batch takes the recorded decision
    assert [(r["action"], r["engines_after"]) for r in rerun[1:]] == \
        [(r["action"], r["engines_after"]) for r in rows[cut + 1:]]
    assert [p.parallelism for p in replans] == [p.parallelism for p in plans[cut:]]


def _no_registry(cfg):
    from keyshift.models.registry import RegistryError

    raise RegistryError("no registered model 'keyshift-input-rate' (test)")


# -- the controller's order: one plan version per window -------------------------------------
def test_controller_scaler_change_is_the_windows_plan_change(tmp_path, champion) -> None:
    cfg = config(tmp_path)
    log = MemoryControlLog()
    c = controller(cfg, lambda _cfg: champion, log, policy="dlb-h")
    for b, n_in in enumerate([300, 2500, 2500, 2500]):
        loads = np.full(24, n_in / 24)
        loads[:3] *= 3  # some skew for the balancer
        c.collect(b, loads, loads, engine_s=0.02 * loads.sum(), started=None)
        c.end_of_batch(b)
    by_batch: dict[int, list[dict]] = {}
    for r in log.decisions:
        by_batch.setdefault(r["batch_id"], []).append(r)
    scaled = [b for b, rs in by_batch.items()
              if any(r["component"] == "scaler" and r["plan_version"] is not None for r in rs)]
    assert scaled, [r["reason"] for r in log.decisions]
    for b, rs in by_batch.items():
        versions = [r["plan_version"] for r in rs if r["plan_version"] is not None]
        assert len(versions) <= 1  # one plan version per window
        assert rs[0]["component"] == "scaler"
        if b in scaled:
            assert [r["component"] for r in rs] == ["scaler"]  # the balancer waits a window
    b = scaled[0]
    assert c.plan_for(b + 1).parallelism == by_batch[b][0]["engines_after"]


def test_load_champions_reports_a_missing_alias(tmp_path) -> None:
    """A real MLflow SQLite store: models registered by the nightly job, alias removed."""
    from mlflow import MlflowClient

    from keyshift.models.registry import RegistryError, tracking
    from keyshift.models.training import train_and_register

    cfg = config(tmp_path)
    summary = train_and_register(synthetic_metrics(), cfg, min_rows=20, kernel="ard", iters=5)
    assert summary["models"]["latency"]["champion_moved"]
    loaded = load_champions(cfg)
    w = config_workload(cfg)
    assert loaded.label == f"champion GPs keyshift-input-rate.{w} v1, keyshift-latency.{w} v1"
    with tracking(cfg):
        MlflowClient().delete_registered_model_alias(f"keyshift-latency.{w}", "champion")
    with pytest.raises(RegistryError, match="has no alias 'champion'"):
        load_champions(cfg)
    rows, _ = run_windows(controller(cfg), [40])
    assert f"registered model 'keyshift-latency.{w}' has no alias 'champion'" in rows[0]["reason"]


def test_a_champion_of_another_workload_is_not_followed(tmp_path) -> None:
    """Champions are per workload: a job of another operator or topic finds none of its own
    and is told which there are; an alias moved by hand onto another workload's version is
    refused; naming that workload follows it on purpose."""
    from mlflow import MlflowClient

    from keyshift.models.registry import RegistryError, model_name, tracking
    from keyshift.models.training import train_and_register

    cfg = config(tmp_path)
    train_and_register(synthetic_metrics(), cfg, min_rows=20, kernel="ard", iters=5,
                       workload="fsd.payments")
    other = with_workload(cfg, "heavy", "clicks")
    with pytest.raises(RegistryError, match=r"no input_rate forecaster of workload "
                                            r"'heavy.clicks'.*holds champions of fsd.payments, "
                                            r"not followed"):
        load_champions(other)
    c = controller(other)
    assert c.forecaster.models is None and "fsd.payments" in c.forecaster.model_error
    asked = cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(
        update={"workload": "fsd.payments"})})
    assert load_champions(asked).versions == ("1", "1")
    # a version of fsd.payments registered under heavy.clicks's name by hand
    train_and_register(synthetic_metrics(), cfg, min_rows=20, kernel="ard", iters=5,
                       workload="heavy.clicks")
    with tracking(cfg):
        client = MlflowClient()
        for which in ("input_rate", "latency"):
            client.set_model_version_tag(model_name(other, which), "1", "workload",
                                         "fsd.payments")
    with pytest.raises(RegistryError, match="trained on workload 'fsd.payments', not "
                                            "'heavy.clicks': not followed"):
        load_champions(other)
