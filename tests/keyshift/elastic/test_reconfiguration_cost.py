"""The learned reconfiguration cost (issue 27, point 2): RC and min_gain fitted on measured
migrations with the configured constants as the prior, kept in the control store (memory
and Delta), fed to the planner by the control loop, and its effect in the elastic replay."""

from __future__ import annotations

import argparse
import uuid

import numpy as np
import pytest

from keyshift.config import load_config
from keyshift.control import MemoryControlStore, loop_from_config
from keyshift.drivers.elastic_replay import replay
from keyshift.elastic.capacity import LatencyModel
from keyshift.elastic.cost import Costs, Forecast
from keyshift.elastic.path_scaler import PathScaler
from keyshift.elastic.reconfiguration import (
    MIN_GAIN_CAP,
    MeasuredMigration,
    ReconfigurationCost,
    fit_pause,
)


def _change(b: int, groups: int = 1000, nbytes: int = 0, pause: float = 4.0,
            rate: float = 100.0, scale: bool = True) -> MeasuredMigration:
    return MeasuredMigration(b, groups, nbytes, pause, rate, scale)


def test_the_prior_holds_until_a_change_of_n_is_measured():
    cost = ReconfigurationCost(prior_rc=10.0, mc=2.0, prior_min_gain=0.05)
    assert cost.rc(500.0) == 10.0 and cost.min_gain(60.0) == 0.05
    cost.observe([_change(3, scale=False)])  # a rebalance says nothing about a change of N
    assert cost.rc(500.0) == 10.0
    assert cost.min_gain(60.0) != 0.05


def test_rc_moves_from_the_prior_to_pause_times_rate_times_mc_as_changes_are_seen():
    """Each change paused 4 s; at 100 events/s and MC 2 a change costs 800, not 10."""
    cost = ReconfigurationCost(prior_rc=10.0, mc=2.0, prior_changes=3)
    cost.observe([_change(1)])
    assert cost.rc(100.0) == pytest.approx(0.75 * 10.0 + 0.25 * 800.0)
    cost.observe([_change(b) for b in range(2, 31)])
    assert cost.rc(100.0) == pytest.approx((3 * 10.0 + 30 * 800.0) / 33)
    assert cost.rc(0.0) < 10.0  # no input, nothing a pause can delay


def test_a_re_executed_batch_replaces_its_measurement_instead_of_counting_twice():
    cost = ReconfigurationCost(prior_rc=10.0, mc=1.0)
    cost.observe([_change(7, pause=4.0)]).observe([_change(7, pause=2.0)])
    assert len(cost.migrations) == 1 and cost.pause_fit.fixed_s == 2.0


def test_the_pause_is_fitted_per_moved_group_and_byte():
    rng = np.random.default_rng(0)
    ms = []
    for b in range(40):
        g, nbytes = int(rng.integers(10, 2000)), int(rng.integers(0, 50_000_000))
        ms.append(_change(b, g, nbytes, 0.5 + 0.002 * g + 0.1 * nbytes / 1e6))
    fit = fit_pause(ms)
    assert fit.fixed_s == pytest.approx(0.5, abs=1e-6)
    assert fit.per_group_s == pytest.approx(0.002, rel=1e-6)
    assert fit.per_mb_s == pytest.approx(0.1, rel=1e-6)
    assert fit_pause([]) is None


def test_only_the_late_share_of_a_pause_is_a_cost():
    """The replay's engines catch up on part of a paused window: only what they missed counts."""
    cost = ReconfigurationCost(prior_rc=0.0, mc=1.0, prior_changes=0)
    cost.observe([MeasuredMigration(1, 100, 0, 10.0, 50.0, True, missed=125.0)])
    assert cost.miss_share() == 0.25
    assert cost.rc(50.0) == pytest.approx(10.0 * 50.0 * 0.25)


def test_min_gain_is_the_share_of_a_window_a_rebalance_pauses_and_is_capped():
    cost = ReconfigurationCost(prior_rc=10.0, mc=1.0, prior_min_gain=0.0, prior_changes=0)
    cost.observe([_change(b, pause=6.0, scale=False) for b in range(5)])
    assert cost.min_gain(60.0) == pytest.approx(0.1)
    assert cost.min_gain(1.0) == MIN_GAIN_CAP


@pytest.mark.parametrize("field, value", [("pause_s", -1.0), ("rate", float("nan")),
                                          ("groups", -3)])
def test_a_bad_measurement_is_refused_naming_the_field(field, value):
    kwargs = dict(batch_id=1, groups=1, bytes=0, pause_s=1.0, rate=1.0, scale=True)
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        MeasuredMigration(**kwargs)


def test_the_memory_store_keeps_one_measurement_per_batch():
    store = MemoryControlStore()
    store.write_migration_cost(_change(5, pause=1.0))
    store.write_migration_cost(_change(2))
    store.write_migration_cost(_change(5, pause=3.0))
    assert [(m.batch_id, m.pause_s) for m in store.migration_costs()] == [(2, 4.0), (5, 3.0)]
    assert MeasuredMigration.of(store.migration_costs()[0].row()) == _change(2)


def _config(**planner):
    over = {"planner": {"enabled": True, "rc": 10.0, "mc": 1.0, **planner}}
    return load_config(env={}, **over)


def test_the_config_turns_the_learned_cost_on_and_a_restart_reads_what_was_measured():
    assert loop_from_config(_config(), MemoryControlStore(), "dlb-h").reconfiguration is None
    store = MemoryControlStore()
    loop = loop_from_config(_config(rc_source="learned"), store, "dlb-h")
    from keyshift.plan import Plan

    loop.start(Plan.hashed(16, 2))
    loop.measured_migration(_change(1, pause=5.0))
    assert store.migration_costs() == [_change(1, pause=5.0)]
    again = loop_from_config(_config(rc_source="learned"), store, "dlb-h")
    again.start(Plan.hashed(16, 2), batch_id=2)
    assert again.reconfiguration.migrations == [_change(1, pause=5.0)]


def test_the_replay_measures_each_change_and_the_planner_plans_with_the_learned_rc():
    """A load that swings between two levels every few windows: with a fixed RC of 1 the
    planner follows every swing; pricing each change at the misses its 20-s pause caused,
    it changes N less often."""
    window_s = 60.0
    truth = LatencyModel(base_s=0.002, overhead=0.0, cv=0.0)
    load = np.tile(np.r_[np.full(3, 20_000.0), np.full(3, 90_000.0)], 20)
    costs = Costs(mc=1.0, ec=1.0, rc=1.0)

    def run(reconfiguration):
        ctl = PathScaler(max_engines=8, min_engines=1, horizon=4, window_s=window_s,
                             mc=1.0, ec=1.0, rc=1.0, theta2=0.0)
        # the forecast of window j is the load itself (a perfect forecaster)
        def forecast(j: int, horizon: int) -> Forecast:
            k = np.arange(1, 9)
            mean = np.r_[load[j:j + horizon], np.full(max(0, j + horizon - load.size), load[-1])]
            return Forecast(mean[:horizon], np.zeros(horizon),
                            np.tile(0.002 * np.ones(k.size), (horizon, 1)),
                            np.zeros((horizon, k.size)))
        res = replay(load, ctl, truth, window_s, costs, initial_engines=2, forecast=forecast,
                     pause_s=20.0, reconfiguration=reconfiguration)
        return res, ctl

    fixed, _ = run(None)
    learned_cost = ReconfigurationCost(prior_rc=1.0, mc=1.0, prior_changes=1)
    learned, ctl = run(learned_cost)
    assert len(learned_cost.migrations) == int(learned.changes.sum()) > 0
    assert all(m.scale and m.pause_s == 20.0 for m in learned_cost.migrations)
    assert ctl.rc > 1.0  # the planner's RC is no longer the configured one
    assert learned.changes.sum() < fixed.changes.sum()


def test_the_elastic_scenario_refuses_a_learned_rc_in_the_simulator():
    from keyshift.elastic.errors import ElasticInputError
    from keyshift.experiments import elastic

    args = argparse.Namespace(rc_source="learned", engine_model="sim", series="taxi")
    with pytest.raises(ElasticInputError, match="rc_source"):
        elastic.run(args)


@pytest.mark.integration
def test_the_delta_store_keeps_measured_migrations_once_per_batch(spark, spark_config):
    from keyshift.streaming.control_store import ControlLog

    log = ControlLog(spark, spark_config, f"rc-{uuid.uuid4().hex[:6]}")
    assert log.migration_costs() == []  # migration_costs is made on first use
    late = MeasuredMigration(9, 12, 4096, 0.75, 250.0, False, 3, 3, missed=10.0)
    for m in (_change(4), late, _change(4)):  # the last: a re-executed batch 4
        log.write_migration_cost(m)
    assert log.migration_costs() == [_change(4), late]
