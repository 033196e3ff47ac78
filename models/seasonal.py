"""The seasonal slot profile a GP can model the residual of (issue 14, item 1).

Load series repeat a daily and weekly shape, and their spread follows the same shape: a
Friday 18:00 swings by thousands of taxi passengers, a Tuesday 04:00 by a few hundred. A GP
with one stationary kernel over (timestamp, time of day, day of week) has to rediscover that
shape from a few hundred rows and, far from its data, reverts to a constant — which is how it
lost to seasonal naive. Here the shape comes from ALL the history, cheaply (one mean and one
spread per slot of the cycle, O(n)), and the GP only models the standardised deviation
z = (y − m_slot) / s_slot: a short-memory, roughly homoscedastic signal that a GP of a few
thousand rows captures well. Back in the target's units, mean = m + s·μ_z and std = s·σ_z, so
the predictive interval widens at busy hours and narrows at quiet ones.

Which cycle (issue 27): ``none``, ``daily``, ``weekly`` or ``daily+weekly`` (a daily shape plus
one level per day of the week, 24 + 7 numbers an hourly series estimates from every day where
the weekly profile's 168 slots each see one hour a week), or a cycle of any period named by
it, a number and a unit: ``"300s"``, ``"5m"``, ``"15m"``, ``"1h"``, ``"2d"``
(:func:`cycle_period`; a job upstream that lands every five minutes, devices that report
every quarter of an hour). :func:`candidate_periods` finds such periods in a history by its
autocorrelation, and :func:`choose_profile` can put them beside the calendar's
(``detect``). :func:`choose_profile` picks among
those the history supports by forecasting its own last days with each (the GP's held-out
blocks), with the slot statistic and how far back the profile looks (its half-life);
without a choice the cycle is a week when the history covers two weeks (as seasonal
naive's), else a day when it covers ``MIN_CYCLES`` days, else there is no cycle: one slot,
whose mean is the current level of the series (simple exponential smoothing, its smoothing weight fitted on the
one-step errors of the history). Under a day of history (NASA's one day at 5-minute bins, the
Dublin AVL feed's hours) the all-history mean was the level the GP reverted to: it sat between
the morning ramp and the afternoon, and the GP lost to the last value (MASE 1.02, 1.14); the
smoothed level is where a noisy series without a cycle is best expected to stay. The slot
length is the median spacing of the timestamps. A slot's spread is smoothed over its
neighbours (few weekly cycles give noisy per-slot spreads) and floored, so z never divides by
a near-zero spread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from keyshift.models.gp_predictor import slot_index, to_target_units

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
MIN_CYCLES = 2
"""Days of history that give a daily profile. Three left the Apache log's first origins
(2.6 days of an hourly bot: 0 and ~115 requests in alternate half hours) without a cycle, and
the GP forecast the flat mean (MASE 7.2 against yesterday's value); with two it is 0.70."""
HALF_LIFE_CYCLES = 2.0
"""Weight halves per cycle of age: the profile is mostly the last three or four weeks (days),
between seasonal naive (the last cycle only) and the all-history mean (which lags level
shifts: a season, a holiday period). The default; :func:`choose_profile` can choose among
``HALF_LIVES``."""
HALF_LIVES = (0.1, 0.5, 1.0, 2.0, 4.0)
"""The half-lives a GP's profile chooses among (:func:`choose_profile`): 0.1 is the last cycle
alone (weights 1, 0.001, ...), seasonal naive's forecast; 4 averages about six cycles."""
NAIVE = 0.0
"""The half-life of the *naive* profile: each slot's mean is its latest value (last cycle's
value, seasonal naive's forecast) and the residual of a row is its difference from the row
one cycle earlier, so a GP on it is a GP whose mean is last cycle's value (issue 44).
:func:`choose_profile` offers the daily and the weekly naive when asked (``naive``, or 0
among the half-lives); the GP's final choice has seasonal naive among its candidates
whatever profile it sits on (``keyshift.models.gp.GPForecaster``, ``rivals``)."""
NAIVE_CYCLES = ("daily", "weekly")
_SMOOTH_SLOTS = 2  # the spread of a slot is pooled with this many neighbours on each side
CYCLES = ("none", "daily", "weekly", "daily+weekly")
"""The calendar's cycles; any other period is named by :func:`cycle_period`'s syntax."""
_CYCLE_PERIOD_S = {"none": 0.0, "daily": DAY_S, "weekly": WEEK_S, "daily+weekly": WEEK_S}
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S}
_PERIOD_NAME = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
CYCLE_SYNTAX = ("one of " + ", ".join(CYCLES) + ", or a period: a number and s, m, h or d "
                "('300s', '5m', '15m', '1h')")
_NICE_STEPS_S = (1.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0,
                 3600.0, 7200.0, 10_800.0, 14_400.0, 21_600.0, 43_200.0, DAY_S)
"""Steps an irregular series is resampled to (each divides a day, so slots line up with it)."""


def cycle_period(cycle: str) -> float:
    """The period in seconds of a cycle name: one of CYCLES, or a number and a unit (``s``,
    ``m``, ``h``, ``d``) such as ``"5m"``. A ValueError that quotes the name otherwise, so
    that a typo ("5 min", "hourly") is refused where it is given, not fitted as no cycle."""
    if cycle in _CYCLE_PERIOD_S:
        return _CYCLE_PERIOD_S[cycle]
    match = _PERIOD_NAME.fullmatch(str(cycle).strip())
    period = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if not period > 0:
        raise ValueError(f"cycle: {cycle!r} is not {CYCLE_SYNTAX}")
    return period


def period_cycle(period_s: float) -> str:
    """The one name of a period: ``daily`` and ``weekly`` for a day and a week (``"24h"`` is
    the daily cycle, whatever it was called), else the largest whole unit, ``"5m"`` for
    300 s, so that a stored or chosen cycle reads the same however it was written."""
    period_s = float(period_s)
    if period_s <= 0:
        return "none"
    named = {DAY_S: "daily", WEEK_S: "weekly"}.get(period_s)
    if named:
        return named
    for unit in ("h", "m", "s"):
        count = period_s / _UNIT_S[unit]
        if abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{period_s:g}s"


def canonical_cycle(cycle: str) -> str:
    """The cycle name as stored and compared: CYCLES' own, else :func:`period_cycle` of its
    period (``"300s"`` and ``"5m"`` are one cycle)."""
    return cycle if cycle in _CYCLE_PERIOD_S else period_cycle(cycle_period(cycle))


def cycle_supported(t: np.ndarray, cycle: str) -> bool:
    """Whether a history spanning ``t`` can estimate ``cycle``: :func:`supported_cycles` for
    the calendar's; a period needs ``MIN_CYCLES`` whole cycles and at least two slots of the
    history's spacing (a cycle of one slot is no shape)."""
    if cycle in _CYCLE_PERIOD_S:
        return cycle in supported_cycles(t)
    t = np.asarray(t, dtype=np.float64)
    span = float(t[-1] - t[0]) if t.size else 0.0
    slot = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    period = cycle_period(cycle)
    return span >= MIN_CYCLES * period and 0 < 2 * slot <= period


_ALPHAS = np.linspace(0.05, 1.0, 20)


def smoothed_level(y: np.ndarray) -> float:
    """The last level of simple exponential smoothing, l_t = a·y_t + (1 − a)·l_(t−1), with the
    weight a of the grid ``_ALPHAS`` whose one-step forecasts l_(t−1) erred least (squared) on
    ``y`` itself: a = 1 (the last value) for a series whose level jumps and stays, a small
    a for one whose points are noise about a level that moves slowly."""
    from scipy.signal import lfilter

    y = np.asarray(y, dtype=np.float64)
    if y.size < 3:
        return float(y[-1])
    best = (np.inf, float(y[-1]))
    for a in _ALPHAS:
        levels, _ = lfilter([a], [1.0, a - 1.0], y[1:], zi=[(1.0 - a) * y[0]])
        sse = float(np.sum((y[1:] - np.concatenate([[y[0]], levels[:-1]])) ** 2))
        if sse < best[0]:
            best = (sse, float(levels[-1]))
    return best[1]


PROFILE_STATS = ("mean", "median")


def _weighted_medians(idx: np.ndarray, y: np.ndarray, w: np.ndarray,
                      fallback: np.ndarray) -> np.ndarray:
    """Each slot's weighted median of ``y`` (weights ``w``); ``fallback`` for empty slots."""
    order = np.lexsort((y, idx))
    slots, values, weights = idx[order], y[order], w[order]
    out = fallback.copy()
    bounds = np.searchsorted(slots, np.arange(fallback.size + 1))
    for k, (lo, hi) in enumerate(pairwise(bounds)):
        if hi > lo:
            cum = np.cumsum(weights[lo:hi])
            out[k] = values[lo + int(np.searchsorted(cum, 0.5 * cum[-1]))]
    return out


@dataclass(frozen=True)
class SlotProfile:
    """Mean and spread of each slot of a cycle; ``period_s == 0`` means no cycle."""

    period_s: float
    slot_s: float
    mean: np.ndarray
    spread: np.ndarray
    stat: str = "mean"
    cycle: str = ""  # a cycle name (CYCLES or a period); "" (an older stored form): period_s
    half_life: float | None = HALF_LIFE_CYCLES  # in cycles; None: every cycle weighs alike

    @property
    def cycle_name(self) -> str:
        return self.cycle or period_cycle(self.period_s)

    @property
    def naive(self) -> bool:
        """Whether this is the last cycle's values (seasonal naive), see :data:`NAIVE`."""
        return self.half_life == NAIVE and self.period_s > 0

    @classmethod
    def fit(cls, t: np.ndarray, y: np.ndarray, period_s: float | None = None,
            half_life: float | None = HALF_LIFE_CYCLES, stat: str = "mean",
            cycle: str | None = None, slot_s: float | None = None) -> SlotProfile:
        """Slot means and spreads of (t, y); with ``half_life`` (in cycles) a cycle's rows
        weigh 2^(−age / half_life), so the profile follows the level of the recent cycles.

        ``stat="median"`` takes each slot's weighted median instead of its weighted mean:
        one holiday among the four weeks that weigh most (New Year's Day, a blizzard) moves a
        mean by a quarter of its dip and leaves the median where the ordinary weeks are.
        Which of the two forecasts better depends on the series (the taxi's holidays are
        single days; the bikes' Christmas fortnight is a level the median ignores), so the
        GP chooses on held-out blocks (:class:`keyshift.models.gp.GPForecaster`).

        ``cycle`` (one of CYCLES, or a period such as ``"5m"``, :func:`cycle_period`) sets the
        period; ``daily+weekly`` is a weekly profile whose slot means are the daily slot's
        plus the day of the week's level. ``slot_s`` pins the slot length (default: the median
        spacing, so a five-minute cycle of 10-second windows has 30 slots)."""
        if stat not in PROFILE_STATS:
            raise ValueError(f"stat: {stat!r} is not one of {PROFILE_STATS}")
        if cycle is not None:
            cycle = canonical_cycle(cycle)
            period_s = cycle_period(cycle)
        t = np.asarray(t, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        span = float(t[-1] - t[0]) if t.size else 0.0
        slot = float(slot_s) if slot_s else (float(np.median(np.diff(t))) if t.size > 1 else 1.0)
        slot = slot if slot > 0 else 1.0
        if period_s is None:
            period_s = next((p for p, cycles in ((WEEK_S, 2), (DAY_S, MIN_CYCLES))
                             if span >= cycles * p and p >= slot), 0.0)
        if cycle is None:
            cycle = period_cycle(period_s)
        n_slots = max(int(round(period_s / slot)), 1) if period_s > 0 else 1
        probe = cls(float(period_s), slot, np.zeros(n_slots), np.ones(n_slots))
        idx = probe.slot(t)
        if period_s == 0 and t.size:
            level = smoothed_level(y)
            var = float(np.mean((y - level) ** 2))
            floor = max(float(y.std()) * 0.05, 1e-9)
            return cls(0.0, slot, np.array([level]), np.array([max(np.sqrt(var), floor)]),
                       stat, "none", half_life)
        if half_life == NAIVE and period_s > 0 and t.size:
            return cls._naive(t, y, float(period_s), slot, n_slots, stat, cycle)
        if half_life is not None and period_s > 0 and t.size:
            age = np.floor((t[-1] - t) / period_s)
            w = np.power(0.5, age / half_life)
        else:
            w = np.ones(t.size)
        count = np.bincount(idx, weights=w, minlength=n_slots)
        total = np.bincount(idx, weights=w * y, minlength=n_slots)
        overall = float(y.mean()) if y.size else 0.0
        mean = np.where(count > 0, total / np.where(count > 0, count, 1.0), overall)
        if stat == "median":
            mean = _weighted_medians(idx, y, w, mean)
        if cycle == "daily+weekly" and n_slots > 1:
            mean = _daily_plus_weekly(t, y, w, slot, n_slots, stat)
        sq = np.bincount(idx, weights=w * (y - mean[idx]) ** 2, minlength=n_slots)
        seen = np.bincount(idx, minlength=n_slots).astype(np.float64)
        if n_slots > 1:
            # circular pooling with the neighbouring slots: a spread from 3 values is noise
            width = 2 * _SMOOTH_SLOTS + 1
            kernel = np.ones(width)
            pad = lambda a: np.concatenate([a[-_SMOOTH_SLOTS:], a, a[:_SMOOTH_SLOTS]])
            sq = np.convolve(pad(sq), kernel, "valid")
            count = np.convolve(pad(count), kernel, "valid")
            seen = np.convolve(pad(seen), kernel, "valid")
        var = np.where(seen > 1, sq / np.where(count > 0, count, 1.0) * seen / np.maximum(seen - 1, 1.0),
                       float(y.var()) if y.size else 1.0)
        floor = max(float(y.std()) * 0.05, 1e-9) if y.size else 1e-9
        return cls(float(period_s), slot, mean, np.maximum(np.sqrt(var), floor), stat, cycle,
                   half_life)

    @classmethod
    def _naive(cls, t: np.ndarray, y: np.ndarray, period_s: float, slot: float, n_slots: int,
               stat: str, cycle: str) -> SlotProfile:
        """The naive profile: each slot's latest value, and as its spread the slot's std of
        the seasonal differences y_t − y_(t−period) (recent cycles weighing more, half-life
        ``HALF_LIFE_CYCLES``, pooled with the neighbouring slots): the error the naive makes,
        which is what its forecast interval must cover."""
        probe = cls(period_s, slot, np.zeros(n_slots), np.ones(n_slots))
        idx = probe.slot(t)
        latest = _with_latest(np.full(n_slots, float(y.mean())), idx, t, y)
        diff = y - lagged(t, y, period_s, slot)
        seen = np.isfinite(diff)
        if not seen.any():
            spread = np.full(n_slots, max(float(y.std()), 1e-9))
            return cls(period_s, slot, latest, spread, stat, cycle, NAIVE)
        w = np.power(0.5, np.floor((t[-1] - t) / period_s) / HALF_LIFE_CYCLES) * seen
        d = np.where(seen, diff, 0.0)
        sq = np.bincount(idx, weights=w * d ** 2, minlength=n_slots)
        weight = np.bincount(idx, weights=w, minlength=n_slots)
        if n_slots > 1:
            pad = lambda a: np.concatenate([a[-_SMOOTH_SLOTS:], a, a[:_SMOOTH_SLOTS]])  # noqa: E731
            pool = np.ones(2 * _SMOOTH_SLOTS + 1)
            sq, weight = (np.convolve(pad(a), pool, "valid") for a in (sq, weight))
        overall = float(np.sqrt(np.mean(d[seen] ** 2)))
        spread = np.where(weight > 0, np.sqrt(sq / np.where(weight > 0, weight, 1.0)), overall)
        floor = max(overall * 0.05, float(y.std()) * 0.05, 1e-9)
        return cls(period_s, slot, latest, np.maximum(spread, floor), stat, cycle, NAIVE)

    def slot(self, t: np.ndarray) -> np.ndarray:
        return slot_index(t, self.period_s, self.slot_s, self.mean.size)

    def standardise(self, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        """z = (y − m_slot) / s_slot; for the naive profile m is the value one cycle earlier,
        from the rows given when one of them is, else the profile's (the last cycle it saw):
        what new windows after a fit are measured against."""
        i = self.slot(t)
        if not self.naive:
            return (y - self.mean[i]) / self.spread[i]
        before = lagged(t, y, self.period_s, self.slot_s)
        before = np.where(np.isfinite(before), before, self.mean[i])
        return (y - before) / self.spread[i]

    def residuals(self, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The standardised residual of history rows (what a GP on this profile is fitted
        and conditioned on): :meth:`standardise`, except that for the naive profile a row
        without a row one cycle before it among (t, y) (the history's first cycle) gets 0,
        no deviation, rather than its difference from the profile's last cycle, which is a
        season away from it."""
        if not self.naive:
            return self.standardise(t, y)
        before = lagged(t, y, self.period_s, self.slot_s)
        z = (y - before) / self.spread[self.slot(t)]
        return np.where(np.isfinite(z), z, 0.0)

    def observed(self, t: np.ndarray, y: np.ndarray) -> SlotProfile:
        """This profile after new rows: the naive profile's slots take their latest values
        (it *is* the last cycle, and stays so online); any other profile is as fitted."""
        if not self.naive or np.size(t) == 0:
            return self
        t = np.asarray(t, dtype=np.float64)
        mean = _with_latest(self.mean.copy(), self.slot(t), t, np.asarray(y, dtype=np.float64))
        return SlotProfile(self.period_s, self.slot_s, mean, self.spread, self.stat,
                           self.cycle, self.half_life)

    def restore(self, t: np.ndarray, z_mean: np.ndarray, z_std: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std in the target's units from those of z."""
        return to_target_units(t, z_mean, z_std, self.as_tuple(), log_target=False)

    def as_tuple(self) -> tuple[float, float, np.ndarray, np.ndarray]:
        return self.period_s, self.slot_s, self.mean, self.spread


def _with_latest(values: np.ndarray, idx: np.ndarray, t: np.ndarray, y: np.ndarray
                 ) -> np.ndarray:
    """``values`` with each slot in ``idx`` set to its latest row's ``y`` (by ``t``): an
    assignment with repeated indices keeps no promised one, so each slot's last row is
    picked explicitly."""
    order = np.argsort(t, kind="stable")
    slots, ys = idx[order][::-1], y[order][::-1]
    _, first = np.unique(slots, return_index=True)  # the first of the reversed: the latest
    values[slots[first]] = ys[first]
    return values


def lagged(t: np.ndarray, y: np.ndarray, period_s: float, slot_s: float) -> np.ndarray:
    """For each row, the value of the row one ``period_s`` earlier (the nearest in time to
    t − period_s, if within half a slot of it), NaN where (t, y) holds none: seasonal naive's
    forecast of each row, irregular rows included."""
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    out = np.full(t.shape, np.nan)
    if t.size == 0 or period_s <= 0:
        return out
    order = np.argsort(t, kind="stable")
    ts, ys = t[order], y[order]
    target = t - period_s
    j = np.clip(np.searchsorted(ts, target), 1, ts.size - 1) if ts.size > 1 else np.zeros(
        t.shape, dtype=np.int64)
    if ts.size > 1:
        j = np.where(np.abs(ts[j - 1] - target) <= np.abs(ts[j] - target), j - 1, j)
    ok = np.abs(ts[j] - target) <= 0.5 * slot_s
    out[ok] = ys[j[ok]]
    return out


def _slot_stat(idx: np.ndarray, y: np.ndarray, w: np.ndarray, n: int, stat: str,
               empty: float) -> np.ndarray:
    """Each of ``n`` slots' weighted mean (or median) of ``y``; ``empty`` where none fell."""
    count = np.bincount(idx, weights=w, minlength=n)
    total = np.bincount(idx, weights=w * y, minlength=n)
    out = np.where(count > 0, total / np.where(count > 0, count, 1.0), empty)
    return _weighted_medians(idx, y, w, out) if stat == "median" else out


def _daily_plus_weekly(t: np.ndarray, y: np.ndarray, w: np.ndarray, slot: float,
                       n_slots: int, stat: str) -> np.ndarray:
    """Weekly slot means as the daily shape plus a level per day of the week (additive):
    the day's shape from every day, the weekday's level from all of that weekday's slots."""
    n_day = max(int(round(DAY_S / slot)), 1)
    day_idx = np.floor(np.mod(t, DAY_S) / slot).astype(np.int64) % n_day
    daily = _slot_stat(day_idx, y, w, n_day, stat, float(y.mean()))
    resid = y - daily[day_idx]
    weekday = np.floor(np.mod(t, WEEK_S) / DAY_S).astype(np.int64) % 7
    level = _slot_stat(weekday, resid, w, 7, stat, 0.0)
    start = np.arange(n_slots) * slot
    return (daily[np.floor(np.mod(start, DAY_S) / slot).astype(np.int64) % n_day]
            + level[np.floor(start / DAY_S).astype(np.int64) % 7])


def supported_cycles(t: np.ndarray) -> list[str]:
    """The cycles a history spanning ``t`` can estimate: a day needs ``MIN_CYCLES`` days, a
    week two weeks (as seasonal naive's), each at least one slot long."""
    t = np.asarray(t, dtype=np.float64)
    span = float(t[-1] - t[0]) if t.size else 0.0
    slot = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    out = ["none"]
    if span >= MIN_CYCLES * DAY_S and slot <= DAY_S:
        out.append("daily")
    if span >= 2 * WEEK_S and slot <= DAY_S:
        out += ["weekly", "daily+weekly"]
    return out


def cycle_blocks(t: np.ndarray, days: int = 7, period_s: float | None = None
                 ) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of the last ``days`` whole days of ``t``, most recent first, each
    forecast from the rows before it; fewer when they would take over half the history.
    A week of them: five weekdays cannot tell a daily cycle from a weekly one.

    A history too short for one day block (under two days) holds out whole cycles of
    ``period_s`` instead (the shortest cycle compared), as many as ``days`` and again never
    more than half of it: hours of history still have minutes-long cycles to forecast."""
    out = _tail_blocks(np.asarray(t, dtype=np.float64), DAY_S, days)
    if out or not period_s or not 0 < period_s < DAY_S:
        return out
    return _tail_blocks(np.asarray(t, dtype=np.float64), float(period_s), days)


def _tail_blocks(t: np.ndarray, length_s: float, count: int) -> list[tuple[int, int]]:
    """The last ``count`` spans of ``length_s`` seconds of ``t`` as row ranges, most recent
    first, none starting in the history's first half."""
    if t.size < 4:
        return []
    end = t[-1]
    out = []
    for d in range(count):
        hi_t, lo_t = end - d * length_s, end - (d + 1) * length_s
        lo = int(np.searchsorted(t, lo_t, side="right"))
        hi = int(np.searchsorted(t, hi_t, side="right"))
        if lo < t.size // 2 or hi - lo < 1:
            break
        out.append((lo, hi))
    return out


DETECT_MIN_CYCLES = 4
"""Whole cycles a history must hold for its autocorrelation to propose the period: twice
MIN_CYCLES, so that half of it (the most :func:`cycle_blocks` holds out) still has two."""
DETECT_MIN_ACF = 0.3
"""The least autocorrelation at a proposed period (of the detrended series): below it the
shape repeats too faintly for a profile to forecast it."""
DETECT_MIN_SLOTS = 4
"""The fewest rows a proposed cycle spans: below it a "cycle" is alternation, not a shape."""
_DETECT_PROMINENCE = 0.1
_HARMONIC_MARGIN = 0.1  # a multiple of a period is a period of its own only this much higher


def _acf(x: np.ndarray) -> np.ndarray:
    """The autocorrelation of ``x`` at every lag (the unbiased one: each lag's sum over its
    own count of pairs, so that long lags are not shrunk towards zero)."""
    from scipy.signal import correlate

    n = x.size
    acov = correlate(x, x, mode="full", method="fft")[n - 1:] / np.arange(n, 0, -1)
    return acov / acov[0]


def _refined_lag(acf: np.ndarray, lag: int) -> float:
    """The period in rows behind an autocorrelation peak at ``lag``, from the peaks at its
    multiples: each located to a fraction of a row (a parabola through its three highest
    values), the period their least-squares slope. The k-th multiple pins the period k times
    more finely than the first, which one noisy peak would leave a row off."""
    ks, lags = [], []
    for k in range(1, 9):
        centre, reach = k * lag, max(1, k // 2 + 1)
        lo, hi = centre - reach, centre + reach + 1
        if hi + 1 >= acf.size // 2:
            break
        j = lo + int(np.argmax(acf[lo:hi]))
        a, b, c = acf[j - 1], acf[j], acf[j + 1]
        curve = a - 2 * b + c
        shift = 0.5 * (a - c) / curve if curve < 0 else 0.0
        ks.append(k)
        lags.append(j + float(np.clip(shift, -0.5, 0.5)))
    if not ks:
        return float(lag)
    ks, lags = np.array(ks, dtype=np.float64), np.array(lags)
    return float(ks @ lags / (ks @ ks))


def _round_period(period_s: float, step_s: float) -> float:
    """``period_s`` rounded to the coarsest of ``_NICE_STEPS_S`` (or the step) that moves it
    by at most half a row or 0.5 %: estimates of 299.4 s and 300.8 s are both "5m", so a
    refit does not rename the cycle, and no rounding shifts the phase by more than a slot
    over the cycles a profile averages."""
    tol = max(0.5 * step_s, 0.005 * period_s)
    units = sorted({step_s, *(u for u in (*_NICE_STEPS_S, WEEK_S) if u >= step_s)},
                   reverse=True)
    for unit in units:
        rounded = round(period_s / unit) * unit
        if rounded > 0 and abs(rounded - period_s) <= tol:
            return float(rounded)
    return float(max(round(period_s / step_s), 1) * step_s)


def candidate_periods(t: np.ndarray, y: np.ndarray, count: int = 3,
                      min_cycles: int = DETECT_MIN_CYCLES) -> list[float]:
    """Up to ``count`` periods (seconds) the history repeats, the strongest first: peaks of
    the autocorrelation of the regularised, linearly detrended series of at least
    DETECT_MIN_ACF, with ``min_cycles`` whole cycles in the history, rounded
    (:func:`_round_period`). A peak at a multiple of a shorter one is that one's echo and is
    dropped, unless it is clearly higher (a week over its days). A day and a week are found
    like any period; :func:`detected_cycles` leaves them to the calendar's cycles."""
    from scipy.signal import detrend, find_peaks

    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if t.size < 2 * DETECT_MIN_SLOTS * min_cycles:
        return []
    step = regular_step(t)
    if step is not None:
        t, y = resample(t, y, step)
    else:
        step = float(np.median(np.diff(t)))
    x = detrend(y)
    if step <= 0 or not np.isfinite(x).all() or float(np.std(x)) <= 1e-12 * (1 + abs(y).max()):
        return []
    acf = _acf(x)
    max_lag = (y.size - 1) // min_cycles
    if max_lag < DETECT_MIN_SLOTS:
        return []
    peaks, props = find_peaks(acf[:max_lag + 1], height=DETECT_MIN_ACF,
                              prominence=_DETECT_PROMINENCE)
    keep = peaks >= DETECT_MIN_SLOTS
    peaks, heights = peaks[keep], props["peak_heights"][keep]
    accepted: list[tuple[int, float]] = []
    for lag, height in zip(peaks, heights):  # ascending lag: fundamentals come first
        echo = any(abs(lag - round(lag / f) * f) <= max(1, 0.02 * lag) and round(lag / f) >= 2
                   and height < h + _HARMONIC_MARGIN for f, h in accepted)
        if not echo:
            accepted.append((int(lag), float(height)))
    accepted.sort(key=lambda a: -a[1])
    out: list[float] = []
    for lag, _ in accepted:
        period = _round_period(_refined_lag(acf, lag) * step, step)
        if all(abs(period - p) > 0.02 * p for p in out):
            out.append(period)
    return out[:count]


def detected_cycles(t: np.ndarray, y: np.ndarray, count: int = 3) -> list[str]:
    """The names of :func:`candidate_periods` of at most half a day that the history supports
    (:func:`cycle_supported`); when a day is among the candidates, only those that divide it.

    From half a day up the calendar's cycles are what a load series has, and the other
    peaks there are their echoes or a misplaced daily peak: a weekly rhythm whose peak hour
    moves by an hour a day peaks at 25 h and 143 h, tweets over a few days at 23.5 h. Beside
    a daily cycle, a period that does not divide the day is its shape's echo (a morning and
    an evening peak nine hours apart), while one that does (an hour, five minutes) is a
    cycle the daily profile holds too, estimated from far fewer rows per slot."""
    periods = candidate_periods(t, y, count + 1)
    daily = any(abs(p - DAY_S) <= 0.02 * DAY_S for p in periods)
    names = []
    for period in periods:
        turns = DAY_S / period
        if period > DAY_S / 2 or (daily and abs(turns - round(turns)) > 0.02 * turns):
            continue
        name = period_cycle(period)
        if name not in names and cycle_supported(t, name):
            names.append(name)
    return names[:count]


class ProfileChoice(NamedTuple):
    """A seasonal profile's settings: its cycle, slot statistic and half-life (in cycles)."""

    cycle: str
    stat: str = "mean"
    half_life: float | None = HALF_LIFE_CYCLES

    def label(self, stats: int = 1, half_lives: int = 1) -> str:
        """"weekly", "weekly (median)", "weekly (median, half-life 0.5)": the settings that
        were chosen between (``stats``, ``half_lives``: how many were), the cycle always.
        ``none`` (one slot, the smoothed level) has neither a statistic nor a half-life."""
        if self.half_life == NAIVE:
            return f"{self.cycle} (last cycle)"
        parts = []
        if self.cycle != "none":
            parts += [self.stat] if stats > 1 else []
            parts += [f"half-life {self.half_life:g}"] if half_lives > 1 else []
        return f"{self.cycle} ({', '.join(parts)})" if parts else self.cycle


def choose_profile(t: np.ndarray, y: np.ndarray, stats: tuple[str, ...] | list[str] = ("mean",),
                   cycles: list[str] | None = None,
                   half_lives: tuple[float, ...] | list[float] = (HALF_LIFE_CYCLES,),
                   slot_s: float | None = None, naive: bool = False, detect: bool = False
                   ) -> tuple[ProfileChoice, dict[str, float]]:
    """The profile (cycle × statistic × half-life) that, fitted on the rows before each of
    the last days (:func:`cycle_blocks`), forecast those days with the least mean absolute
    error; with each setting's error under :meth:`ProfileChoice.label`. Cycles among
    ``cycles`` (default: :func:`supported_cycles`) the history supports. When no day can be
    held out: the longest plain cycle the history supports, the first statistic and the
    default half-life (if offered).

    The half-life is the trade-off between seasonal naive (the last cycle alone, a
    half-life of 0.1) and a profile averaged over weeks: the first follows a level or a
    shape that moved (the bikes' Christmas fortnight, the WorldCup98 match days), the second
    ignores one odd day. Which one forecasts better depends on the series and the season
    (bench/results/forecast_before_issue44.md, "How far back the profile looks"). With
    ``naive`` the naive profile (:data:`NAIVE`) of each periodic cycle compared is a setting
    too.

    With ``detect`` (and no ``cycles``) the periods the history's autocorrelation proposes
    (:func:`detected_cycles`) join the calendar's and are judged the same way; a history
    under two days holds out whole cycles of the shortest of them (:func:`cycle_blocks`)."""
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    stats, half_lives = list(dict.fromkeys(stats)), list(dict.fromkeys(half_lives))
    possible = supported_cycles(t) + (detected_cycles(t, y) if detect and not cycles else [])
    asked = [canonical_cycle(c) for c in cycles] if cycles else possible
    names = list(dict.fromkeys(c for c in asked if cycle_supported(t, c))) or ["none"]
    periods = [cycle_period(c) for c in names if cycle_period(c) > 0]
    blocks = cycle_blocks(t, period_s=min(periods, default=None))
    default_hl = HALF_LIFE_CYCLES if HALF_LIFE_CYCLES in half_lives else next(
        (h for h in half_lives if h != NAIVE), HALF_LIFE_CYCLES)
    # "none" is one slot, the smoothed level: neither a statistic nor a half-life to vary
    settings = [ProfileChoice(c, st, hl) for c in names
                for st, hl in ([(stats[0], default_hl)] if c == "none"
                               else [(st, hl) for st in stats for hl in half_lives
                                     if hl != NAIVE])]
    if naive or NAIVE in half_lives:  # the naive profile of each cycle (see NAIVE)
        settings += [ProfileChoice(c, stats[0], NAIVE) for c in names
                     if c not in ("none", "daily+weekly")]
    if len(settings) == 1 or not blocks:
        cycle = next((c for c in ("weekly", "daily") if c in names), names[0])
        return ProfileChoice(cycle, stats[0], default_hl), {}
    errors: dict[ProfileChoice, float] = {}
    for choice in settings:
        err = []
        for lo, hi in blocks:
            p = SlotProfile.fit(t[:lo], y[:lo], stat=choice.stat, cycle=choice.cycle,
                                slot_s=slot_s, half_life=choice.half_life)
            err.append(np.abs(y[lo:hi] - p.mean[p.slot(t[lo:hi])]))
        errors[choice] = float(np.mean(np.concatenate(err)))
    best = min(errors, key=errors.get)
    return best, {k.label(len(stats), len(half_lives)): e for k, e in errors.items()}


def regular_step(t: np.ndarray) -> float | None:
    """None when ``t`` is evenly spaced (within 1 % of its median spacing); else the step of
    ``_NICE_STEPS_S`` nearest (in ratio) to the median spacing, to resample to."""
    t = np.asarray(t, dtype=np.float64)
    if t.size < 3:
        return None
    d = np.diff(t)
    med = float(np.median(d))
    if med > 0 and np.all(np.abs(d - med) <= 0.01 * med):
        return None
    med = med if med > 0 else float(np.mean(d[d > 0])) if (d > 0).any() else 1.0
    return min(_NICE_STEPS_S, key=lambda s: abs(np.log(s / med)))


def resample(t: np.ndarray, y: np.ndarray, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, y) on the regular grid of ``step_s`` (aligned to the epoch, so slots line up with
    the day): the mean of the rows in each bin, bins without rows interpolated linearly.
    An irregular history (a row per event batch, gaps, jitter) thus gives every slot of the
    cycle its share of the history instead of the slot length its median spacing happens
    to be."""
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    start = np.floor(t[0] / step_s) * step_s
    idx = np.floor((t - start) / step_s).astype(np.int64)
    n = int(idx[-1]) + 1
    count = np.bincount(idx, minlength=n)
    total = np.bincount(idx, weights=y, minlength=n)
    grid = start + step_s * np.arange(n)
    seen = count > 0
    values = np.interp(grid, grid[seen], total[seen] / count[seen])
    return grid, values
