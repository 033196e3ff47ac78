"""The coverage verdict of bench/bench_forecast.py: a coverage outside 85–95 % measured on a
few dozen points is not evidence of a bad interval unless its binomial interval also stays out
of the band. Fast; the backtest itself is a bench."""

from __future__ import annotations

import pytest
from conftest import import_bench


@pytest.fixture(scope="module")
def bench():
    return import_bench("bench_forecast")


def test_inside_the_band_is_met(bench):
    assert bench.coverage_verdict(0.90, 40) == "met"
    assert bench.coverage_verdict(0.85, 1000) == "met"


def test_a_few_points_over_the_band_are_noise_but_many_are_a_miss(bench):
    # 43 of 45 (Dublin's 95.6 %): the Wilson interval reaches down to ~85 %
    assert bench.coverage_verdict(43 / 45, 45) == "noise"
    # 97.8 % of 45 points is noise too; of 4,500 points the interval is ~97.3–98.2 %: a miss
    assert bench.coverage_verdict(44 / 45, 45) == "noise"
    assert bench.coverage_verdict(4400 / 4500, 4500) == "missed"


def test_far_under_the_band_is_a_miss_even_on_few_points(bench):
    assert bench.coverage_verdict(23 / 35, 35) == "missed"  # NASA's 65.7 %


def test_interval_contains_the_share_and_narrows_with_more_points(bench):
    lo_small, hi_small = bench.coverage_interval(0.9, 50)
    lo_big, hi_big = bench.coverage_interval(0.9, 5000)
    assert lo_small < lo_big <= 0.9 <= hi_big < hi_small


@pytest.mark.slow
@pytest.mark.parametrize("series", ["taxi", "aapl", "goog", "elb", "bike", "tweets", "apache",
                                    "nasa", "dublin", "wc98", "syn-timetable"])
def test_on_every_series_the_kept_forecaster_erred_no_more_than_seasonal_naive_there(
        bench, series):
    """Issue 44 item 2, on every series of data/ and the synthetic timetable: whatever the
    fit keeps erred, on the held-out blocks it was chosen on, no more than the better of
    daily and weekly seasonal naive (where the history holds a block to hold out)."""
    from keyshift.models.features import rate_features
    from keyshift.models.gp import InputRateGP

    t, y = bench.SERIES[series][1]()
    X = rate_features(t[-1000:])
    gp = InputRateGP(kernel="ard|ard+local", iters=10, hyper_points=150).fit(X, y[-1000:])
    naive = [e for label, e in gp.choice_errors_.items()
             if "seasonal naive" in label and not label.startswith("GP ")]
    kept = gp.choice_errors_[gp.choice_]
    assert kept == min(gp.choice_errors_.values())
    if naive:  # under two days of history there is no seasonal naive to compare with
        assert kept <= min(naive), gp.choice_errors_
    assert gp.choice_reason_.startswith(gp.choice_)
