"""Statistic windows in seconds: a window closes after Δ of input however long the batches
are, a batch longer than Δ closes the windows it spans once, and a restart closes where the
crashed attempt closed."""

from __future__ import annotations

import pytest

from keyshift.control.window_clock import BatchWindows, Close, TimedWindows, window_clock


def run(clock, batches: list[tuple[float, float]], first: int = 0) -> list[Close | None]:
    """(start, end) of each batch from batch ``first`` on through the clock; their closes."""
    out = []
    for b, (start, end) in enumerate(batches, start=first):
        clock.opened(b, start)
        out.append(clock.close_at(b, end))
    return out


def test_short_batches_close_a_window_every_delta() -> None:
    # a 2-s trigger, batches of 0.5 s: window boundaries at 10, 20, 30 from the first start
    batches = [(100.0 + 2 * i, 100.5 + 2 * i) for i in range(15)]
    closes = run(TimedWindows(10.0), batches)
    assert [b for b, c in enumerate(closes) if c] == [5, 10]
    assert all(c.spanned == 1 for c in closes if c)


def test_boundaries_do_not_drift_with_each_windows_overrun() -> None:
    # batches every 3 s: the closes are the first batch ends past 10, 20, 30, 40 ...
    batches = [(3.0 * i, 3.0 * i + 2.9) for i in range(30)]
    ends = [batches[b][1] for b, c in enumerate(run(TimedWindows(10.0), batches)) if c]
    assert ends == pytest.approx([11.9, 20.9, 32.9, 41.9, 50.9, 62.9, 71.9, 80.9])


def test_growing_batches_still_close_a_window_each_delta_of_input() -> None:
    # the spike: batches of 30 s, 110 s and 208 s; counting 5 batches a window would
    # have decided after 350 s, the timed clock decides at the end of every batch
    batches = [(0.0, 3.0), (3.0, 33.0), (33.0, 143.0), (143.0, 351.0)]
    closes = run(TimedWindows(10.0), batches)
    assert closes[0] is None
    assert [c.spanned for c in closes[1:]] == [3, 11, 21]
    assert BatchWindows(5).close_at(3, 351.0) is None


def test_a_restart_closes_where_the_crashed_attempt_closed() -> None:
    clock = TimedWindows(10.0)
    clock.replay([4, 7])  # the crashed attempt closed windows at batches 4 and 7
    batches = [(float(i), i + 30.0) for i in range(4, 9)] + [(9.0, 60.0)]
    closes = run(clock, batches, first=4)
    # batches 4..7 as recorded (5 and 6 do not close, though they are long), then by time,
    # Δ on from the last replayed close (37 s): 38 does not close, 60 crosses 47 and 57
    assert [c is not None for c in closes] == [True, False, False, True, False, True]
    assert closes[0].replayed and closes[3].replayed
    assert not closes[5].replayed and closes[5].spanned == 2
    assert clock.first_batch(12, last_closed=9) == 10
    assert clock.first_batch(12, last_closed=None) == 0


def test_batch_windows_keep_the_count_and_bad_values_are_refused() -> None:
    closes = run(BatchWindows(3), [(0.0, 500.0)] * 7)
    assert [b for b, c in enumerate(closes) if c] == [2, 5]
    assert BatchWindows(3).first_batch(7, None) == 6
    assert isinstance(window_clock(10.0), TimedWindows)
    assert isinstance(window_clock(10.0, per_window=2), BatchWindows)
    with pytest.raises(ValueError, match="controller.window_s"):
        TimedWindows(0.0)
    with pytest.raises(ValueError, match="controller.window_s"):
        BatchWindows(0)


def test_batches_on_time_close_a_window_every_delta_over_trigger_batches() -> None:
    # the trigger's ticks: a window holds the batches that start in it
    on_time = [(2.0 * i, 2.0 * i + 0.5) for i in range(15)]
    closes = run(TimedWindows(10.0, trigger_s=2.0), on_time)
    assert [b for b, c in enumerate(closes) if c] == [4, 9, 14]
    # a window of one trigger closes at every batch, the first included
    every = run(TimedWindows(1.0, trigger_s=1.0), [(1.0 * i, i + 0.3) for i in range(4)])
    assert all(c is not None and c.spanned == 1 for c in every)
    # a window shorter than the trigger is one trigger long: no batch "spans" 100 of them
    tiny = run(TimedWindows(0.01, trigger_s=1.0), [(1.0 * i, i + 0.3) for i in range(4)])
    assert [c.spanned for c in tiny] == [1, 1, 1, 1]
    # a batch of 35 s on the 2-s trigger closes the boundaries it crossed, once
    long = run(TimedWindows(10.0, trigger_s=2.0), [(0.0, 0.5), (2.0, 37.0), (37.0, 37.5),
                                                   (39.0, 39.5)])
    assert long[0] is None and long[1].spanned == 3
    # the next batch can start at 39, within half a trigger of the boundary at 40: it closes
    assert long[2] is not None and long[2].spanned == 1 and long[3] is None
    # Spark's call comes a little later for some batches than others: no window misses
    # its last batch by that
    late = [(0.30, 0.8), (1.02, 1.5), (2.05, 2.4), (3.01, 3.3)]
    assert all(run(TimedWindows(1.0, trigger_s=1.0), late))


def test_a_window_of_one_trigger_is_every_batch_however_they_are_spaced() -> None:
    # back-to-back batches behind a backlog, then on ticks again: each one decides
    spaced = [(0.0, 1.5), (1.55, 2.0), (2.02, 2.3), (3.0, 3.2), (4.4, 7.6)]
    closes = run(TimedWindows(1.0, trigger_s=1.0), spaced)
    assert all(c is not None for c in closes)
    assert [c.spanned for c in closes] == [1, 1, 1, 1, 3]
