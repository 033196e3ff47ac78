"""Synthetic series of a kind no data set in data/ holds, for the forecasters' tests and
bench (issue 44): hourly counts of *scheduled* events.

A timetable is the hardest case for a smoothing forecaster: the count at an hour of the week
is set by the schedule, not by the recent level, so last week's value already is the best
forecast and any average over weeks (or any smoothing of the residual) can only add error.
The series has what such traffic has in practice: nothing at night, a weekday timetable with
two rush hours, lighter Saturdays and Sundays, a timetable change that adds services slowly
over the months, one daylight-saving shift (the whole timetable moves one hour earlier in
UTC), and a few cancellations and extras around the schedule.
"""

from __future__ import annotations

import numpy as np

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
WEEK_S = 7 * DAY_S
START_S = 1_700_438_400.0  # Monday 2023-11-20 00:00 UTC


def _timetable() -> np.ndarray:
    """Scheduled events per local hour of the week, shape (7, 24), Monday first."""
    weekday = np.zeros(24)
    weekday[5:23] = [2, 6, 10, 9, 5, 4, 4, 4, 4, 5, 6, 9, 10, 8, 5, 4, 3, 2]
    saturday = np.zeros(24)
    saturday[7:23] = [2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 4, 4, 3, 3, 2, 2]
    sunday = np.zeros(24)
    sunday[8:22] = [2, 2, 3, 3, 4, 4, 4, 4, 3, 3, 3, 2, 2, 2]
    return np.vstack([weekday] * 5 + [saturday, sunday])


def timetable_series(weeks: int = 17, seed: int = 44, dst_week: int = 10,
                     utc_offset_h: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(epoch seconds, counts) of ``weeks`` weeks of hours (17: four months).

    Local time is UTC + ``utc_offset_h`` until the Sunday 02:00 of week ``dst_week``, then one
    hour more (summer time): from then on every scheduled hour falls an hour earlier in UTC.
    The schedule adds services slowly (a level that grows by a fifth over the series, rounded
    to whole events), each scheduled event is cancelled with probability 0.04, and an
    unscheduled one arrives in a service hour with probability 0.1. Seeded."""
    rng = np.random.default_rng(seed)
    n = int(weeks * WEEK_S / HOUR_S)
    t = START_S + HOUR_S * np.arange(n)
    dst_at = START_S + dst_week * WEEK_S - WEEK_S + 6 * DAY_S + 2 * HOUR_S - utc_offset_h * HOUR_S
    offset = np.where(t >= dst_at, utc_offset_h + 1, utc_offset_h) * HOUR_S
    local = t + offset
    dow = ((local - START_S) // DAY_S).astype(np.int64) % 7
    hour = ((local % DAY_S) // HOUR_S).astype(np.int64)
    planned = _timetable()[dow, hour]
    growth = 1.0 + 0.2 * (t - t[0]) / (t[-1] - t[0])
    scheduled = np.round(planned * growth).astype(np.int64)
    kept = rng.binomial(scheduled, 0.96)
    extra = (rng.random(n) < 0.1) & (scheduled > 0)
    return t, (kept + extra).astype(np.float64)
