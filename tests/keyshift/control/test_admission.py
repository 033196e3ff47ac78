"""Admission: batches that stay short under any load, from the measured cost per event."""

from __future__ import annotations

import pytest

from keyshift.control.admission import Admission, AdmissionSettings, BatchLoad


def spike(admission: Admission, rates: list[float], cost_s: float, engines: list[int],
          overhead_s: float = 1.0, adapt: bool = True) -> list[dict]:
    """A fluid job: each batch reads min(backlog, bound); its engine stage takes
    events · cost / engines, plus a fixed overhead; input arrives at ``rates[i]`` a second
    over the batch's duration. Returns each batch's events, duration and the bound."""
    backlog, t, out = 0.0, 0.0, []
    for i, rate in enumerate(rates):
        backlog += rate * 2.0  # a 2-s trigger's worth arrives before the batch is planned
        n = int(min(backlog, admission.limit))
        engine_s = n * cost_s / engines[i]
        duration = engine_s + overhead_s
        backlog += rate * duration - n
        t += duration
        # the model's batch time (computed from the cost, not measured): what the bound sets
        out.append({"events": n, "model_s": duration, "limit": admission.limit})
        if adapt:
            admission.next_limit(BatchLoad(n, engine_s, engines[i], duration, lag=backlog),
                                 engines[min(i + 1, len(engines) - 1)], t)
    return out


def test_a_spike_is_taken_in_batches_of_about_a_window() -> None:
    # an 8-ms operator, 20 -> 200 -> 20 events/s: the fixed 20,000 gives a 160-s batch
    fixed = Admission(AdmissionSettings(window_s=10.0, ceiling=20000, initial=20000))
    rates = [20.0] * 5 + [200.0] * 40 + [20.0] * 40
    worst = max(b["model_s"] for b in spike(fixed, rates, 0.008, [1] * len(rates),
                                             adapt=False))
    assert worst > 60
    auto = Admission(AdmissionSettings(window_s=10.0, ceiling=20000))
    batches = spike(auto, rates, 0.008, [1] * len(rates))
    assert max(b["model_s"] for b in batches[1:]) <= 2 * 10.0
    # ... and the bound follows the cost: about (0.8 · 10 − 1) s / 8 ms = 875 events
    assert 400 <= auto.wanted(1) <= 1000
    # with 2 engines the bound doubles
    assert auto.wanted(2) == pytest.approx(2 * auto.wanted(1), rel=0.01)


def test_a_light_operator_reads_up_to_the_users_ceiling() -> None:
    a = Admission(AdmissionSettings(window_s=10.0, ceiling=20000))
    assert a.limit == 1000
    # a process's first batch is cold (workers forked, imports): it does not grow the bound
    assert a.next_limit(BatchLoad(1000, 2.5, 2, 4.0, lag=50000.0), 2, 90.0) is None
    new = a.next_limit(BatchLoad(1000, 0.05, 2, 0.8, lag=50000.0), 2, 100.0)
    assert new == 20000 and a.limit == 20000
    # the ceiling is never passed, and a bound that moves little restarts nothing
    assert a.next_limit(BatchLoad(20000, 1.0, 2, 1.8, lag=1e6), 2, 200.0) is None


def test_at_most_one_restart_a_window_and_none_when_the_bound_does_not_hold_back() -> None:
    a = Admission(AdmissionSettings(window_s=10.0, ceiling=20000, initial=5000))
    a.observe(BatchLoad(5000, 60.0, 1, 62.0))  # a process's cold first batch: not counted
    assert a.cost_s is None
    # one batch over a window may be a pause or a cold executor: the second in a row shrinks
    assert a.next_limit(BatchLoad(5000, 40.0, 1, 41.0), 1, 0.0) is None
    assert a.next_limit(BatchLoad(5000, 40.0, 1, 41.0), 1, 0.0) is not None  # 41-s batches
    shrunk = a.limit
    assert shrunk < 5000
    # cheap batches now, but within the window of the last restart: none
    assert a.next_limit(BatchLoad(shrunk, 0.1, 1, 0.5, lag=1e5), 1, 5.0) is None
    # a quiet topic (the batch read less than its bound, nothing waits) keeps the bound
    quiet = Admission(AdmissionSettings(window_s=10.0, ceiling=20000))
    assert quiet.next_limit(BatchLoad(30, 0.01, 1, 0.4, lag=0.0), 1, 50.0) is None


def test_a_window_shorter_than_the_fixed_cost_is_not_chased_by_reading_less() -> None:
    # 0.2-s windows, batches with 0.8 s of fixed cost and 0.2 s of work for 100 records: a
    # bound of 10 would make every batch ~0.82 s for a tenth of the records
    a = Admission(AdmissionSettings(window_s=0.2, ceiling=100))
    a.observe(BatchLoad(100, 0.2, 2, 1.0))  # the cold first one
    for t in range(5):
        assert a.next_limit(BatchLoad(100, 0.2, 2, 1.0, lag=500.0), 2, 10.0 * t) is None
    assert a.wanted(2) >= 100


def test_batches_without_events_tell_nothing_and_bad_settings_are_refused() -> None:
    a = Admission(AdmissionSettings(window_s=10.0, ceiling=300))
    assert a.limit == 300  # the initial bound under the user's ceiling
    a.observe(BatchLoad(0, 0.0, 1, 0.2))
    assert a.cost_s is None and a.wanted(1) == 300
    assert "no cost measured" in a.describe()
    with pytest.raises(ValueError, match="admission_fill"):
        AdmissionSettings(window_s=10.0, ceiling=10, fill=0.0)
    with pytest.raises(ValueError, match="max_offsets_per_trigger"):
        AdmissionSettings(window_s=10.0, ceiling=0)


def test_a_task_fixed_cost_is_not_taken_for_a_cost_per_event() -> None:
    """A cheap operator on a cluster: 2 s of each engine task is fixed (a worker's dispatch,
    the state's fetch), 0.5 ms an event; 1-s windows; a backlog, so every batch reads its
    bound. The ratio of one size of batch calls it 20 ms an event; the probe of one step
    shows that half the events take about as long, and the bound goes back up."""
    a = Admission(AdmissionSettings(window_s=1.0, ceiling=100))
    bounds, changes = [], 0
    for t in range(12):
        n = a.limit
        critical = 2.0 + 0.0005 * n / 2
        changes += a.next_limit(BatchLoad(n, critical, 2, critical + 0.5, lag=1e4), 2,
                                10.0 * t) is not None
        bounds.append(a.limit)
    assert min(bounds) >= 50 and bounds[-1] == 100 and changes <= 2, bounds
    assert a.fitted and a.task_fixed_s == pytest.approx(2.0, rel=0.05)
    assert "fixed a task" in a.describe()


def test_with_one_size_of_batch_a_probe_halves_until_the_line_is_known() -> None:
    """Every batch at its bound from the start (a backlog at 20,000 a batch, 8 ms an event,
    10-s windows): the ratio is all there is, so each window halves the bound while the
    batches shorten in proportion; once four batches of different sizes lie on a line the
    bound jumps to what the line wants."""
    a = Admission(AdmissionSettings(window_s=10.0, ceiling=20000, initial=20000))
    bounds = []
    for t in range(8):
        n = a.limit
        a.next_limit(BatchLoad(n, 0.008 * n, 1, 0.008 * n + 1.0, lag=1e6), 1, 100.0 * t)
        bounds.append(a.limit)
    assert bounds[:4] == [20000, 20000, 10000, 5000], bounds
    assert a.fitted and 800 <= bounds[4] <= 900 and bounds[-1] == bounds[4], bounds


def test_a_migrations_batch_neither_costs_nor_counts_as_long() -> None:
    a = Admission(AdmissionSettings(window_s=1.0, ceiling=100))
    a.observe(BatchLoad(100, 0.2, 2, 0.5))  # cold
    for t in range(3):  # a scale-out's moves: long, but the state's fetch made them so
        assert a.next_limit(BatchLoad(100, 4.0, 2, 4.5, moved=True), 2, 10.0 * t) is None
    assert a.cost_s is None and a.limit == 100
