"""Cycles of any period: named ("5m", "1h"), found by autocorrelation, chosen on held-out
cycles, kept by the stored form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keyshift.models.features import rate_features
from keyshift.models.gp import GPForecaster, InputRateGP, ModelInputError
from keyshift.models.gp_predictor import GPPredictor
from keyshift.models.seasonal import (
    DAY_S,
    WEEK_S,
    SlotProfile,
    candidate_periods,
    canonical_cycle,
    choose_profile,
    cycle_blocks,
    cycle_period,
    cycle_supported,
    detected_cycles,
)

T0 = 1_700_000_000.0


def pulses(period_s: float, step_s: float, cycles: int, seed: int = 0, jitter: float = 0.01,
           ) -> tuple[np.ndarray, np.ndarray]:
    """A job landing once a cycle: a pulse whose time is jittered (``jitter`` of a period,
    a normal spread) and whose size varies by 15 % between cycles, over a sine of the same
    period, under noise of a tenth of the pulse."""
    rng = np.random.default_rng(seed)
    n = int(round(cycles * period_s / step_s))
    t = T0 + step_s * np.arange(n)
    k = np.arange(-1, cycles + 2)
    land = T0 + (k + 0.3) * period_s + rng.normal(0, jitter * period_s, k.size)
    size = 1 + rng.normal(0, 0.15, k.size)
    pulse = size * np.exp(-0.5 * ((t[:, None] - land) / (0.08 * period_s)) ** 2)
    y = 100 + 60 * pulse.sum(1) + 20 * np.sin(2 * np.pi * (t - T0) / period_s)
    return t, y + rng.normal(0, 6, n)


def _mae(model, X, y) -> float:
    return float(np.abs(model.predict(X)[0] - y).mean())


# -- names --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, period, canonical", [
    ("5m", 300.0, "5m"), ("300s", 300.0, "5m"), ("15m", 900.0, "15m"), ("1h", 3600.0, "1h"),
    ("90s", 90.0, "90s"), ("1.5h", 5400.0, "90m"), ("24h", DAY_S, "daily"),
    ("7d", WEEK_S, "weekly"), ("daily+weekly", WEEK_S, "daily+weekly"), ("none", 0.0, "none"),
])
def test_a_cycle_name_carries_its_period_and_has_one_spelling(name, period, canonical):
    assert cycle_period(name) == period
    assert canonical_cycle(name) == canonical


@pytest.mark.parametrize("bad", ["5 min", "hourly", "0m", "-5m", "5x", "m", ""])
def test_a_cycle_name_that_is_no_period_is_refused_naming_the_cycle(bad):
    with pytest.raises(ValueError, match="cycle"):
        cycle_period(bad)
    with pytest.raises(ValueError, match="cycle"):
        SlotProfile.fit(T0 + 10.0 * np.arange(100), np.ones(100), cycle=bad)


def test_a_five_minute_cycle_of_ten_second_windows_has_thirty_slots():
    t, y = pulses(300.0, 10.0, 12)
    profile = SlotProfile.fit(t, y, cycle="300s")
    assert profile.cycle_name == "5m" and profile.period_s == 300.0
    assert profile.slot_s == 10.0 and profile.mean.size == 30
    assert cycle_supported(t, "5m") and not cycle_supported(t, "1h")  # two whole cycles
    assert not cycle_supported(t, "15s")  # one slot and a half is no shape


# -- detection ----------------------------------------------------------------------------

@pytest.mark.parametrize("period, step, cycles", [
    (300.0, 10.0, 12),  # a job every five minutes, an hour of 10-second windows
    (3600.0, 60.0, 12),  # hourly, half a day of minutes
    (DAY_S, 300.0, 8),  # daily, 5-minute bins
    (WEEK_S, 3600.0, 6),  # weekly, hours
])
def test_the_autocorrelation_finds_the_period_within_a_slot(period, step, cycles):
    for seed in range(3):
        t, y = pulses(period, step, cycles, seed)
        found = candidate_periods(t, y)
        assert found and abs(found[0] - period) <= step, (seed, found)
    # the day and the week are the calendar's cycles already; shorter ones are proposed
    expected = [] if period >= DAY_S else [canonical_cycle(f"{period:g}s")]
    assert detected_cycles(t, y) == expected


def test_too_few_whole_cycles_propose_nothing():
    t, y = pulses(300.0, 10.0, 3)
    assert candidate_periods(t, y) == []


@pytest.mark.parametrize("kind", ["white noise", "random walk"])
def test_a_series_without_a_cycle_proposes_no_period(kind):
    for seed in range(5):
        rng = np.random.default_rng(seed)
        noise = rng.normal(0, 1, 720)
        y = 100 + (noise if kind == "white noise" else np.cumsum(noise))
        assert detected_cycles(T0 + 10.0 * np.arange(720), y) == [], seed


# -- validation ---------------------------------------------------------------------------

def test_a_short_history_holds_out_whole_cycles_of_the_shortest_period():
    t, _ = pulses(300.0, 10.0, 12)  # an hour: no day to hold out
    assert cycle_blocks(t) == []
    blocks = cycle_blocks(t, period_s=300.0)
    assert len(blocks) == 6  # never more than half of the history
    assert all(hi - lo == 30 for lo, hi in blocks)
    assert blocks[0][1] == t.size and min(lo for lo, _ in blocks) >= t.size // 2


def test_the_detected_period_is_compared_with_none_on_held_out_cycles():
    t, y = pulses(300.0, 10.0, 12)
    choice, errors = choose_profile(t, y, detect=True)
    assert choice.cycle == "5m", errors
    assert set(errors) == {"none", "5m"}
    assert errors["5m"] < 0.5 * errors["none"]
    assert choose_profile(t, y) == (choose_profile(t, y)[0], {})  # without detect: none only


@pytest.mark.parametrize("period, step", [(300.0, 10.0), (3600.0, 60.0)])
def test_the_gp_chooses_the_detected_cycle_and_forecasts_far_better_than_none(period, step):
    """Twelve cycles of history, the next two forecast."""
    t, y = pulses(period, step, 14, seed=3)
    X, cut = rate_features(t), int(round(12 * period / step))
    kw = dict(iters=15, hyper_points=200)
    gp = InputRateGP(**kw).fit(X[:cut], y[:cut])
    flat = InputRateGP(**kw, cycle="none").fit(X[:cut], y[:cut])
    name = canonical_cycle(f"{period:g}s")
    assert gp.cycle_ == name and gp._profile.period_s == period, gp.choice_errors_
    of = lambda cycle: min(e for k, e in gp.cycle_errors_.items()  # noqa: E731
                           if k.split(" (")[0] == cycle)  # "5m (median)"
    assert of(name) < 0.5 * of("none")
    assert f"{name} seasonal naive" in gp.choice_errors_  # the detected cycle's naive: a rival
    assert _mae(gp, X[cut:], y[cut:]) < 0.5 * _mae(flat, X[cut:], y[cut:])
    # its own held-out blocks are whole cycles
    blocks = gp._held_out_blocks(X[:cut], period)
    assert blocks and all((hi - lo) % round(period / step) == 0 for lo, hi in blocks)


@pytest.mark.parametrize("cycle", ["5m", "300s", "none|5m"])
def test_a_named_short_cycle_is_fitted(cycle):
    t, y = pulses(300.0, 10.0, 10)
    gp = InputRateGP(iters=10, hyper_points=150, cycle=cycle).fit(rate_features(t), y)
    assert gp.cycle_ == "5m" and gp._profile.mean.size == 30


@pytest.mark.parametrize("bad", ["5 min", "hourly", "daily|5x", "0m"])
def test_a_bad_cycle_name_is_a_model_input_error_naming_the_field(bad):
    t, y = pulses(300.0, 10.0, 6)
    with pytest.raises(ModelInputError, match="cycle") as caught:
        InputRateGP(cycle=bad).fit(rate_features(t), y)
    assert caught.value.field == "cycle"
    assert "'5m'" in str(caught.value)  # the message shows the syntax


@pytest.mark.parametrize("kind", ["white noise", "random walk"])
def test_without_a_cycle_the_gp_chooses_none_or_nothing_worse(kind):
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        noise = rng.normal(0, 5, 480)
        y = 100 + (noise if kind == "white noise" else np.cumsum(noise))
        X, cut = rate_features(T0 + 10.0 * np.arange(y.size)), 360
        kw = dict(iters=10, hyper_points=150)
        gp = InputRateGP(**kw).fit(X[:cut], y[:cut])
        if gp.cycle_ != "none":
            flat = InputRateGP(**kw, cycle="none").fit(X[:cut], y[:cut])
            assert _mae(gp, X[cut:], y[cut:]) <= 1.05 * _mae(flat, X[cut:], y[cut:]), seed


# -- the stored form ----------------------------------------------------------------------

def test_the_stored_form_keeps_a_short_cycle(tmp_path):
    t, y = pulses(300.0, 10.0, 12, seed=1)
    X, cut = rate_features(t), 300
    gp = InputRateGP(iters=10, hyper_points=150).fit(X[:cut], y[:cut])
    assert gp.cycle_ == "5m"
    mean = gp.predict(X[cut:])[0]
    clone = GPForecaster.load(gp.save(tmp_path / "gp"))
    assert clone._profile.cycle_name == "5m" and clone._profile.mean.size == 30
    np.testing.assert_allclose(clone.predict(X[cut:])[0], mean, rtol=1e-9)
    np.testing.assert_allclose(GPForecaster.from_bytes(gp.to_bytes()).predict(X[cut:])[0],
                               mean, rtol=1e-9)
    served = GPPredictor.load(gp.save_predictor(tmp_path / "predictor"))
    np.testing.assert_allclose(served.predict(X[cut:])[0], mean, rtol=1e-6)
    named = InputRateGP(iters=10, hyper_points=150, cycle="300s").fit(X[:cut], y[:cut])
    assert GPForecaster.from_bytes(named.to_bytes()).get_params()["cycle"] == "300s"


def test_an_older_stored_form_without_a_cycle_name_reads_it_from_the_period():
    t, y = pulses(300.0, 10.0, 10)
    gp = InputRateGP(iters=5, hyper_points=100, cycle="5m").fit(rate_features(t), y)
    parts = gp.to_parts()
    description = json.loads(parts["model.json"])
    del description["profile"]["cycle"]
    parts["model.json"] = json.dumps(description).encode()
    clone = GPForecaster.from_parts(parts)
    assert clone._profile.cycle_name == "5m"
    np.testing.assert_allclose(clone.predict(rate_features(t[-5:]))[0],
                               gp.predict(rate_features(t[-5:]))[0], rtol=1e-9)
