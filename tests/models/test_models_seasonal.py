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


# -- issue 27: which cycle -----------------------------------------------------------------

from keyshift.models.seasonal import (  # noqa: E402
    DAY_S,
    WEEK_S,
    ProfileChoice,
    choose_profile,
    regular_step,
    resample,
    supported_cycles,
)


def weekly_hours(weeks: int = 10, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Hours whose day differs by the day of the week: the peak moves from 09:00 on Monday
    to 21:00 on Sunday and the weekend runs at a third to a half of the weekdays' level."""
    rng = np.random.default_rng(seed)
    t = 1_700_006_400.0 + 3600.0 * np.arange(24 * 7 * weeks)
    hour = (t % DAY_S) / 3600.0
    dow = (((t // DAY_S) + 3) % 7).astype(int)
    peak = np.array([9, 10, 11, 12, 14, 19, 21])[dow]
    level = np.array([1.0, 1.05, 1.1, 1.0, 1.2, 0.5, 0.35])[dow]
    y = 200 * level * (0.4 + np.exp(-((hour - peak) ** 2) / 6)) + rng.normal(0, 6, t.size)
    return t, y


def test_a_weekly_rhythm_chooses_a_weekly_cycle_that_beats_daily_seasonal_naive():
    t, y = weekly_hours()
    cut = t.size - 24 * 7
    choice, errors = choose_profile(t[:cut], y[:cut])
    cycle = choice.cycle
    assert cycle == "weekly", errors
    assert set(errors) == {"none", "daily", "weekly", "daily+weekly"}
    profile = SlotProfile.fit(t[:cut], y[:cut], cycle=cycle)
    forecast = profile.mean[profile.slot(t[cut:])]
    daily_naive = np.resize(y[cut - 24:cut], t.size - cut)
    mase = np.abs(y[cut:] - forecast).mean() / np.abs(y[cut:] - daily_naive).mean()
    assert mase < 0.5


def test_one_day_repeated_chooses_a_daily_cycle():
    t, _ = weekly_hours(weeks=4)
    hour = (t % DAY_S) / 3600.0
    y = 100 + 50 * np.sin(2 * np.pi * hour / 24) + np.random.default_rng(3).normal(0, 5, t.size)
    assert choose_profile(t, y)[0].cycle in ("daily", "daily+weekly")
    assert choose_profile(t, y, cycles=["none", "weekly"])[0].cycle == "weekly"


def test_daily_plus_weekly_is_the_daily_shape_plus_a_level_per_day():
    t, _ = weekly_hours(weeks=3)
    hour = (t % DAY_S) / 3600.0
    weekday = ((t % WEEK_S) // DAY_S).astype(int)
    y = 10.0 * hour + 100.0 * weekday  # exactly additive
    profile = SlotProfile.fit(t, y, cycle="daily+weekly", half_life=None)
    assert profile.period_s == WEEK_S and profile.cycle == "daily+weekly"
    assert np.allclose(profile.mean[profile.slot(t)], y)


def test_short_histories_support_only_the_cycles_they_cover():
    t = 1_700_000_000.0 + 3600.0 * np.arange(24 * 10)
    assert supported_cycles(t) == ["none", "daily"]
    assert supported_cycles(t[:30]) == ["none"]
    assert choose_profile(t[:30], np.ones(30)) == (ProfileChoice("none"), {})


def test_irregular_timestamps_are_resampled_to_a_regular_grid():
    """Jittered, unevenly spaced rows (a row per 35-85 minutes): resampled to hours, the
    weekly rhythm is found and the profile has 168 hourly slots."""
    t, y = weekly_hours(weeks=8)
    rng = np.random.default_rng(5)
    t_irr = np.cumsum(rng.uniform(2100, 5100, int(t.size * 0.9))) + t[0]
    y_irr = np.interp(t_irr, t, y)
    step = regular_step(t_irr)
    assert step == 3600.0 and regular_step(t) is None
    grid, values = resample(t_irr, y_irr, step)
    assert np.all(np.diff(grid) == 3600.0) and np.isfinite(values).all()
    cycle = choose_profile(grid, values, slot_s=step)[0].cycle
    assert cycle == "weekly"
    assert SlotProfile.fit(grid, values, cycle=cycle, slot_s=step).mean.size == 168


def test_an_unknown_cycle_is_refused():
    import pytest

    with pytest.raises(ValueError, match="cycle"):
        SlotProfile.fit(np.arange(10.0), np.ones(10), cycle="monthly")


# -- how far back the profile looks ----------------------------------------------------------

def _daily_hours(days: int, peak: np.ndarray | float, noise: float, seed: int):
    rng = np.random.default_rng(seed)
    t = 1_700_006_400.0 + 3600.0 * np.arange(24 * days)
    hour = (t % DAY_S) / 3600.0
    y = 100 + 80 * np.exp(-((hour - peak) ** 2) / 4) + rng.normal(0, noise, t.size)
    return t, y


def test_a_shape_that_moved_four_days_ago_chooses_a_short_half_life():
    """The daily peak moved from 09:00 to 18:00 four days before the end: a profile that
    remembers the old weeks forecasts a peak where there is none, the last day alone does
    not. The short half-life is chosen and forecasts the next day better than the default."""
    days = 28
    t, _ = _daily_hours(days, 9.0, 0.0, 0)
    peak = np.where(t <= t[-1] - 4 * DAY_S, 9.0, 18.0)
    t, y = _daily_hours(days + 1, np.concatenate([peak, np.full(24, 18.0)]), 3.0, 4)
    cut = t.size - 24
    choice, errors = choose_profile(t[:cut], y[:cut], half_lives=(0.1, 0.5, 2.0, 4.0),
                                    cycles=["daily"])
    assert choice.half_life <= 0.5, errors
    assert set(errors) == {f"daily (half-life {h:g})" for h in (0.1, 0.5, 2.0, 4.0)}
    assert errors[choice.label(1, 4)] == min(errors.values())

    def next_day_mae(half_life):
        p = SlotProfile.fit(t[:cut], y[:cut], cycle="daily", half_life=half_life)
        assert p.half_life == half_life
        return np.abs(y[cut:] - p.mean[p.slot(t[cut:])]).mean()

    assert next_day_mae(choice.half_life) < 0.6 * next_day_mae(2.0)  # measured 0.51


def test_a_steady_noisy_shape_chooses_a_long_half_life():
    """The same shape every day under noise: the last day alone copies its noise, a profile
    over several days averages it away."""
    t, y = _daily_hours(28, 12.0, 15.0, 5)
    choice, errors = choose_profile(t, y, stats=("mean", "median"), half_lives=(0.1, 2.0, 4.0),
                                    cycles=["daily"])
    assert choice.half_life >= 2.0, errors
    assert "daily (median, half-life 0.1)" in errors
    assert errors["daily (mean, half-life 0.1)"] > 1.2 * min(errors.values())
