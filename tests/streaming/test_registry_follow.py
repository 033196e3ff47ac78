"""The running job follows the registry (issue 14 item 5, issue 16 item 1's registry faults),
without Spark or an MLflow store: a fake registry whose alias moves, whose loads fail and which is
down, behind the job's controller. Every check runs inside its window here
(``background=False``) except where the test is about the thread; the real store is in
tests/models/test_registry_follow_mlflow.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from engines_support import MemoryControlLog
from test_scaling_adapters import T0, Clock, config, run_windows, train_gps

from keyshift.control import WindowSample
from keyshift.errors import ConfigError
from keyshift.streaming.controller import Controller
from keyshift.streaming.scaling import ChampionForecast, JobForecaster

K = 3  # planner.registry_check_windows of these tests: checks before windows 3, 6, 9, ...


class FakeGP:
    """A registry version: a flat forecast (50 events/s, 2 ms per tuple) and a count of
    the rows it was conditioned on."""

    def __init__(self, name: str, version: str, value: float) -> None:
        self.name, self.version, self.value = name, version, value
        self.rows = 0

    def predict(self, X):
        n = np.asarray(X).shape[0]
        return np.full(n, self.value), np.full(n, self.value / 10)

    def add_observations(self, X, y) -> None:
        assert np.asarray(X).shape[0] == len(y)
        self.rows += len(y)


class FakeRegistry:
    """The alias's versions, a store that can be down, versions whose artifact is unreadable,
    and a log of what the job asked."""

    def __init__(self) -> None:
        self.rate, self.latency = "1", "1"
        self.down: str | None = None
        self.corrupt: set[str] = set()
        self.calls: list[str] = []
        self.loaded: list[ChampionForecast] = []

    def versions(self, cfg) -> tuple[str, str]:
        self.calls.append("versions")
        if self.down:
            raise RuntimeError(self.down)
        return self.rate, self.latency

    def load(self, cfg) -> ChampionForecast:
        self.calls.append("load")
        if self.down:
            raise RuntimeError(self.down)
        if self.rate in self.corrupt:
            raise RuntimeError(f"cannot load models:/keyshift-input-rate/{self.rate}: "
                               "not a stored GP")
        models = ChampionForecast(FakeGP("keyshift-input-rate", self.rate, 50.0),
                                  FakeGP("keyshift-latency", self.latency, 2e-3))
        self.loaded.append(models)
        return models


def follower(tmp_path, registry: FakeRegistry, background: bool = False,
             **planner) -> Controller:
    cfg = config(tmp_path, registry_check_windows=K, **planner)
    forecaster = JobForecaster(cfg, registry.load, registry.versions, background=background)
    c = Controller(cfg, "r", "kg", groups=24, initial_engines=2, windows=1,
                   log=MemoryControlLog(), forecaster=forecaster, clock=Clock())
    c.recover(0)
    return c


V1 = "champion GPs keyshift-input-rate v1, keyshift-latency v1"
V2 = "champion GPs keyshift-input-rate v2, keyshift-latency v1"


def test_alias_moves_the_next_check_loads_the_new_version(tmp_path) -> None:
    reg = FakeRegistry()
    c = follower(tmp_path, reg)
    rows, _ = run_windows(c, [300, 300])
    assert all(f"forecast: {V1}" in r["reason"] or f"planned from {V1}" in r["reason"]
               for r in rows)
    reg.rate = "2"  # the nightly retrain moved the alias
    more, _ = run_windows(c, [300] * 5, first_batch=2)
    # window 3 (batch 2) is a check: the new champion decides it, from a fresh plan
    assert more[0]["reason"].startswith(
        f"registry check at window 3: loaded {V2} (was {V1}); forecast: {V2}; planned ")
    assert all(V2 in r["reason"] and V1 not in r["reason"] for r in more[1:])
    # the new version caught up on the run's windows, as a restart would, then followed
    # them: each of the 7 windows once
    assert reg.loaded[-1].rate.rows == 7 and reg.loaded[-1].latency.rows == 7
    # an unmoved alias is a look, not a download: start, 3 (moved), 6 (not)
    assert reg.calls == ["load", "versions", "load", "versions"]


def test_failed_load_keeps_the_model_and_says_why(tmp_path) -> None:
    reg = FakeRegistry()
    c = follower(tmp_path, reg)
    kept = c.forecaster.models
    reg.rate = "2"
    reg.corrupt.add("2")  # the champion's artifact was overwritten with garbage
    rows, _ = run_windows(c, [300] * 7)
    why = ("registry check at window 3 failed, kept " + V1 +
           ": cannot load models:/keyshift-input-rate/2: not a stored GP")
    assert rows[2]["reason"].startswith(why), rows[2]["reason"]
    assert c.forecaster.models is kept
    # every decision names the version that made it; the failure is said once per check
    assert all(V1 in r["reason"] and V2 not in r["reason"] for r in rows)
    assert [i for i, r in enumerate(rows) if "failed, kept" in r["reason"]] == [2, 5]
    reg.corrupt.clear()  # the retrain registers a good version: the next check takes it
    rows, _ = run_windows(c, [300] * 3, first_batch=7)
    assert rows[1]["reason"].startswith(f"registry check at window 9: loaded {V2}")


def test_registry_down_at_start_is_retried_at_the_next_check(tmp_path) -> None:
    reg = FakeRegistry()
    reg.down = "MLflow tracking store http://127.0.0.1:9 is unreachable: refused"
    c = follower(tmp_path, reg)
    assert c.forecaster.models is None
    rows, _ = run_windows(c, [300, 300])
    assert all("no champion: MLflow tracking store http://127.0.0.1:9 is unreachable"
               in r["reason"] for r in rows)
    reg.down = None
    rows, _ = run_windows(c, [300, 300], first_batch=2)
    assert rows[0]["reason"].startswith(
        f"registry check at window 3: loaded {V1} (was the fallback); forecast: {V1}")
    assert "no champion" not in rows[1]["reason"] and V1 in rows[1]["reason"]
    assert reg.loaded[-1].rate.rows == 4  # the windows run on the fallback, and the next


def test_registry_down_mid_run_keeps_the_model_and_the_job_going(tmp_path) -> None:
    reg = FakeRegistry()
    c = follower(tmp_path, reg)
    reg.down = "MLflow tracking store sqlite:///x/mlflow.db is unreachable: unable to open"
    rows, plans = run_windows(c, [300] * 7)
    assert rows[2]["reason"].startswith(
        f"registry check at window 3 failed, kept {V1}: MLflow tracking store "
        "sqlite:///x/mlflow.db is unreachable")
    assert rows[5]["reason"].startswith(f"registry check at window 6 failed, kept {V1}")
    assert all(V1 in r["reason"] for r in rows) and len(rows) == 7
    # the kept champion still decides: its 500 tuples x 2 ms per window need one engine
    assert plans[-1].parallelism == 1


def test_still_down_the_fallback_says_when_it_was_last_tried(tmp_path) -> None:
    reg = FakeRegistry()
    reg.down = "unreachable: refused"
    c = follower(tmp_path, reg)
    rows, _ = run_windows(c, [300] * 4)
    assert "(registry check at window 3)" not in rows[1]["reason"]
    assert "no champion: unreachable: refused (registry check at window 3)" in rows[2]["reason"]
    assert reg.calls == ["load", "load"]  # nothing in use to compare: load straight away


def test_a_check_runs_beside_the_batches_and_lands_at_the_next_window(tmp_path) -> None:
    reg = FakeRegistry()
    c = follower(tmp_path, reg, background=True)
    slow = threading.Event()
    load = reg.load

    def slow_load(cfg):
        assert slow.wait(60), "the test never released the registry"
        return load(cfg)

    c.forecaster.loader = slow_load
    reg.rate = "2"
    rows, _ = run_windows(c, [300] * 4)  # window 3 starts the check; it hangs
    assert c.forecaster.checking
    assert all(V1 in r["reason"] for r in rows)  # the windows went on with v1
    slow.set()
    c.forecaster.join(60)
    rows, _ = run_windows(c, [300], first_batch=4)
    assert rows[0]["reason"].startswith(f"registry check at window 3: loaded {V2}")


def test_a_check_started_before_a_restart_is_dropped(tmp_path) -> None:
    reg = FakeRegistry()
    c = follower(tmp_path, reg, background=True)
    gate = threading.Event()
    load = reg.load
    c.forecaster.loader = lambda cfg: (gate.wait(60), load(cfg))[1]
    reg.rate = "2"
    run_windows(c, [300] * 3)
    assert c.forecaster.checking
    c.forecaster.reset()  # the loop restarts: the history the check conditioned on is gone
    gate.set()
    c.forecaster.join(60)
    assert c.forecaster.follow(4) is None
    assert c.forecaster.models.versions == ("1", "1")


def test_the_check_cadence_is_validated() -> None:
    from keyshift.config import load_config

    with pytest.raises(ConfigError, match="planner.registry_check_windows"):
        load_config(env={}, planner={"registry_check_windows": 0})
    assert load_config(env={}).planner.registry_check_windows == 10


def test_catching_up_at_once_forecasts_like_window_by_window() -> None:
    """A newly loaded champion is conditioned on the run's windows in one step; the GPs
    must end where one update per window (the running job's way) ends."""
    from keyshift.models.gp import GPForecaster
    from keyshift.models.registry import LoadedModel

    stored = train_gps()

    def fresh() -> ChampionForecast:
        rate, lat = (GPForecaster.from_bytes(b) for b in stored)
        return ChampionForecast(LoadedModel(rate, "keyshift-input-rate", "1"),
                                LoadedModel(lat, "keyshift-latency", "1"))

    samples = [WindowSample(T0 + 10.0 * i, 400.0 + 300.0 * i, None if i == 2 else 2e-3,
                            1 + i % 3) for i in range(6)]
    one, many = fresh(), fresh()
    for s in samples:
        one.observe(s, 10.0)
    many.observe_many(samples, 10.0)
    a, b = one.forecast(T0 + 60.0, 3, 4, 10.0), many.forecast(T0 + 60.0, 3, 4, 10.0)
    np.testing.assert_allclose(b.in_mean, a.in_mean, rtol=1e-6)
    np.testing.assert_allclose(b.lat_mean, a.lat_mean, rtol=1e-6)
    assert b.in_mean[0] > fresh().forecast(T0 + 60.0, 3, 4, 10.0).in_mean[0] * 2  # it moved


def test_a_path_restored_after_a_restart_names_the_models_of_its_later_windows(tmp_path) -> None:
    reg = FakeRegistry()
    first = follower(tmp_path, reg)
    rows, _ = run_windows(first, [300] * 4)
    planned = [i for i, r in enumerate(rows) if r["reason"].startswith(f"forecast: {V1}")]
    assert planned and any("following the path" in r["reason"] for r in rows), rows
    cut = next(i for i in range(1, 4) if "following the path" in rows[i]["reason"])
    log = MemoryControlLog()  # the store as a crash right after window `cut` left it
    for rec in first.log.records():
        if rec.batch_id < cut:
            log.write_record(rec)
    log.plans_written = list(first.log.plans_written)
    again = Controller(first.cfg, "r", "kg", groups=24, initial_engines=2, windows=1,
                       log=log, forecaster=JobForecaster(first.cfg, reg.load, reg.versions,
                                                         background=False), clock=Clock())
    again.recover(cut)
    rerun, _ = run_windows(again, [300], first_batch=cut)
    assert rerun[0]["reason"].startswith(
        f"following the path planned from a forecast made before a restart, later windows "
        f"from {V1}; "), rerun[0]["reason"]


def test_the_start_up_load_runs_beside_the_rest_and_the_first_use_waits(tmp_path) -> None:
    """The champions' load at start runs on its own thread (the model layer's import and
    the registry's answer took seconds of a cluster run's start-up); the controller's
    construction starts it, and the first forecast waits for it."""
    import threading

    reg, gate = FakeRegistry(), threading.Event()

    def slow_load(cfg):
        gate.wait(10)
        return reg.load(cfg)

    cfg = config(tmp_path, registry_check_windows=K)
    forecaster = JobForecaster(cfg, slow_load, reg.versions, background=True)
    c = Controller(cfg, "r", "kg", groups=24, initial_engines=2, windows=1,
                   log=MemoryControlLog(), forecaster=forecaster, clock=Clock())
    c.recover(0, fresh=True)  # returns while the load waits
    assert forecaster.loading and not reg.loaded
    gate.set()
    rows, _ = run_windows(c, [300, 300])
    assert reg.loaded and all(V1 in r["reason"] for r in rows)
