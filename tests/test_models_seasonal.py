"""The seasonal slot profile's level when the history holds no cycle (issue 14)."""

from __future__ import annotations

import numpy as np

from keyshift.models.seasonal import SlotProfile, smoothed_level

STEP = 300.0  # 5-minute bins


def test_a_level_that_jumps_and_stays_is_the_last_value():
    y = np.r_[np.full(40, 10.0), np.full(40, 50.0)]
    assert smoothed_level(y) == 50.0


def test_noise_about_a_level_is_smoothed_not_copied():
    rng = np.random.default_rng(2)
    errors = {"smoothed": [], "last": []}
    for _ in range(20):
        y = 100.0 + rng.normal(0, 10, 150)
        errors["smoothed"].append(abs(smoothed_level(y) - 100.0))
        errors["last"].append(abs(y[-1] - 100.0))
    assert np.mean(errors["smoothed"]) < 0.5 * np.mean(errors["last"])


def test_without_a_cycle_the_profile_is_the_current_level_not_the_history_mean():
    """Half a day of 5-minute bins that ramps from 50 to 300 and then holds: the one slot's
    mean is where the series is now, not the average of the ramp."""
    rng = np.random.default_rng(0)
    y = np.r_[np.linspace(50, 300, 80), np.full(60, 300.0)] + rng.normal(0, 15, 140)
    t = 1_700_000_000.0 + STEP * np.arange(y.size)
    profile = SlotProfile.fit(t, y)
    assert profile.period_s == 0 and profile.mean.shape == (1,)
    assert abs(profile.mean[0] - 300.0) < 15.0
    assert abs(y.mean() - 300.0) > 40.0  # the mean it replaced


def test_two_days_still_give_a_daily_profile():
    t = 1_700_000_000.0 + 3600.0 * np.arange(49)  # a span of two days
    y = 10 + np.sin(2 * np.pi * t / 86_400.0)
    profile = SlotProfile.fit(t, y)
    assert profile.period_s == 86_400.0 and profile.mean.size == 24


def test_a_holiday_moves_the_slot_mean_but_not_the_slot_median():
    """Four weeks of an hourly weekly cycle, one of them with a holiday Thursday (a dip to a
    fifth): the weighted mean of that Thursday's slots falls, the weighted median stays."""
    t = 1_700_006_400.0 + 3600.0 * np.arange(4 * 168)
    y = 100 + 50 * np.sin(2 * np.pi * t / 86_400.0)
    holiday = slice(168 + 24, 168 + 48)  # the second week's second day
    y[holiday] *= 0.2
    mean, median = (SlotProfile.fit(t, y, stat=s) for s in ("mean", "median"))
    slots = mean.slot(t[holiday])
    ordinary = y[holiday.start + 2 * 168: holiday.stop + 2 * 168]  # the same day two weeks on
    assert median.stat == "median" and mean.stat == "mean"
    np.testing.assert_allclose(median.mean[slots], ordinary)
    assert (mean.mean[slots] < 0.95 * ordinary).all()


def test_an_unknown_statistic_is_refused():
    import pytest

    with pytest.raises(ValueError, match="stat"):
        SlotProfile.fit(np.arange(10.0), np.ones(10), stat="mode")
