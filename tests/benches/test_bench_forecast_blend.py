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


def test_naive_repeats_the_period_before_and_reaches_back_whole_periods(bench):
    t = np.arange(0, 72) * HOUR
    y = t / HOUR  # the value is the hour index
    tau = t[-1] + np.array([1, 24, 30]) * HOUR
    # an hour past the end (hour 72): a day back is hour 48; a day past it: hour 71; 30 h
    # past it needs two days back (one day back is still after the end): hour 53
    assert bench.naive_at(t, y, tau, 86_400.0).tolist() == [48.0, 71.0, 53.0]
    assert bench.naive_at(t, y, np.array([t[-1] + HOUR]), 7 * 86_400.0).tolist() == [0.0]  # clamped


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
