"""The pieces of bench/bench_forecast_blend.py that decide its verdict: the seasonal naive it
blends with and the weight its held-out days choose. Fast; the blend itself is a bench."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import import_bench

HOUR = 3600.0


@pytest.fixture(scope="module")
def bench():
    return import_bench("bench_forecast_blend")


def test_weekly_naive_is_offered_only_on_two_weeks_of_history(bench):
    day = 86_400.0
    assert bench.periods_for(13 * day) == ["daily"]
    assert bench.periods_for(14 * day) == ["daily", "weekly"]
    assert bench.periods_for(day) == ["daily"]  # the bar's fallback


def test_the_naive_is_the_projects_seasonal_naive_of_that_period(bench):
    from keyshift.models.features import rate_features

    t = np.arange(0, 72) * HOUR
    X, y = rate_features(t), t / HOUR  # the value is the hour index
    at = rate_features(t[-1] + np.array([1, 24, 30]) * HOUR)
    # an hour past the end (hour 72): a day back is hour 48; a day past it: hour 71; 30 h
    # past it needs two days back (one day back is still after the end): hour 53
    assert bench.naive(X, y, at, "daily").tolist() == [48.0, 71.0, 53.0]


def test_the_weight_goes_to_whichever_forecast_the_held_out_days_favour(bench):
    y = np.array([1.0, 2.0, 3.0])
    exact, off = y.copy(), y + 5
    assert bench.choose_weight([(y, exact, off)]) == 0.0  # the GP was right
    assert bench.choose_weight([(y, off, exact)]) == max(bench.WEIGHTS)  # the naive was
    assert bench.choose_weight([(y, y + 1, y - 1)]) == 0.5  # each off by one, opposite ways
    assert bench.choose_weight([]) == 0.0


def test_the_naive_partner_is_the_one_that_erred_least_on_the_held_out_days(bench):
    y = np.array([1.0, 2.0, 3.0])
    assert bench.choose_naive({"daily": [(y, y + 2)], "weekly": [(y, y - 1)]}) == "weekly"
    assert bench.choose_naive({"daily": [(y, y), (y, y + 9)],
                               "weekly": [(y, y + 1), (y, y + 1)]}) == "weekly"  # pooled
    assert bench.choose_naive({"daily": [], "weekly": []}) == "daily"
