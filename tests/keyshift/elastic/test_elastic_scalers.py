"""Scalers: the baselines' rules, the shared limits with their reasons, Algorithm 1's
re-planning (θ1, θ2), decision records for the Delta ``decisions`` table."""

from __future__ import annotations

import numpy as np
import pytest

from keyshift.elastic.baselines import (
    QueueingScaler,
    RateScaler,
    StaticMax,
    ThresholdScaler,
    erlang_c,
    mmc_response_time,
)
from keyshift.elastic.cost import Forecast
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.path_scaler import PathScaler, prediction_error
from keyshift.schemas import TABLES


def obs(in_tuples, engines, lat=0.1, window_s=10.0):
    return Observation(in_tuples, lat, engines, window_s)


def test_observation_follows_eq_1_and_2():
    o = Observation(in_tuples=250, lat_s=0.1, engines=2, window_s=10.0, sel=0.5)
    assert o.capacity == pytest.approx(200)
    assert o.out == pytest.approx(0.5 * 200)
    assert o.missed == pytest.approx(0.5 * 250 - 100)
    assert o.utilisation == pytest.approx(1.25)


@pytest.mark.parametrize("kwargs, field", [
    ({"in_tuples": -1}, "observed.in_tuples"),
    ({"lat_s": 0}, "observed.lat_s"),
    ({"engines": 0}, "observed.engines"),
])
def test_bad_observation_names_the_field(kwargs, field):
    base = {"in_tuples": 1.0, "lat_s": 0.1, "engines": 1, "window_s": 10.0}
    base.update(kwargs)
    with pytest.raises(ElasticInputError) as err:
        Observation(**base)
    assert err.value.field == field


def test_erlang_c_known_values():
    # a = 2 Erlang on 3 servers: C = 4/9 (textbook value 0.4444).
    assert erlang_c(np.array([3]), 2.0)[0] == pytest.approx(4 / 9)
    # Single server: P(wait) = ρ.
    assert erlang_c(np.array([1]), 0.6)[0] == pytest.approx(0.6)
    assert erlang_c(np.array([2]), 2.5)[0] == 1.0


def test_mmc_response_time_of_mm1():
    w = mmc_response_time(np.array([1]), arrival=0.5, service=1.0)
    assert w[0] == pytest.approx(1 / (1.0 - 0.5))
    assert np.isinf(mmc_response_time(np.array([1]), arrival=2.0, service=1.0)[0])


def test_static_max_always_uses_the_maximum():
    d = StaticMax(max_engines=8).decide(0, 3)
    assert d.engines_after == 8 and d.action == "scale_out" and "static" in d.reason


def test_qt_picks_the_fewest_engines_meeting_the_response_target():
    # λ = 100/s, μ = 10/s per engine: ≥ 11 engines for stability; response ≤ 2/μ.
    d = QueueingScaler(max_engines=32).decide(1, 4, obs(1000, 4, lat=0.1))
    w = mmc_response_time(np.arange(1, 33), 100.0, 10.0)
    assert d.engines_after == int(np.flatnonzero(w <= 0.2)[0] + 1)
    assert 11 <= d.engines_after <= 14
    assert "M/M/c" in d.reason


def test_thresholds_scale_out_above_80_and_in_below_40_percent():
    s = ThresholdScaler(max_engines=10)
    assert s.decide(1, 2, obs(180, 2)).engines_after == 3  # 90 %
    assert s.decide(2, 2, obs(60, 2)).engines_after == 1  # 30 %
    assert s.decide(3, 2, obs(120, 2)).engines_after == 2  # 60 %
    assert s.decide(4, 2, None).engines_after == 2


def test_ds2_jumps_to_the_rate_based_count_in_one_step():
    d = RateScaler(max_engines=64).decide(1, 2, obs(in_tuples=2_500, engines=2, lat=0.1))
    # 250 tuples/s at 10 tuples/s per engine → 25 engines in one step.
    assert d.engines_after == 25


def test_limits_clamp_step_and_cooldown_and_say_so():
    s = RateScaler(max_engines=64, max_step=2, cooldown_windows=2)
    d1 = s.decide(1, 2, obs(2_500, 2))
    assert d1.engines_after == 4 and "max_step 2" in d1.reason
    d2 = s.decide(2, 4, obs(2_500, 4))
    assert d2.engines_after == 4 and "cooldown" in d2.reason
    s.decide(3, 4, obs(2_500, 4))
    assert s.decide(4, 4, obs(2_500, 4)).engines_after == 6
    bounded = RateScaler(max_engines=10, min_engines=3)
    d = bounded.decide(1, 4, obs(10, 4))
    assert d.engines_after == 3 and "clamped 1 to [3, 10]" in d.reason


def test_dry_run_records_but_does_not_apply():
    s = StaticMax(max_engines=8, dry_run=True)
    d = s.decide(0, 3)
    assert d.proposed == 8 and d.engines_after == 3 and d.action == "scale_out"
    rec = d.to_record(run_id="r1", batch_id=7)
    assert rec["reason"].startswith("dry run, not applied")
    assert rec["engines_before"] == 3 and rec["engines_after"] == 3


def test_decision_record_matches_the_decisions_table():
    d = ScalingDecision(window=3, policy="planner", engines_before=2, proposed=4,
                        engines_after=4, reason="r")
    rec = d.to_record(run_id="run", batch_id=3)
    cols = [c.name for c in TABLES["decisions"].columns]
    assert set(rec) == set(cols)
    assert rec["action"] == "scale_out" and rec["component"] == "planner"


def test_bad_baseline_parameters_name_the_field():
    with pytest.raises(ElasticInputError, match="max_engines"):
        StaticMax().decide(0, 1)
    with pytest.raises(ElasticInputError, match="low"):
        ThresholdScaler(max_engines=4, low=0.9, high=0.8).decide(1, 1, obs(1, 1))
    with pytest.raises(ElasticInputError, match="target_factor"):
        QueueingScaler(max_engines=4, target_factor=1.0).decide(1, 1, obs(1, 1))
    with pytest.raises(ElasticInputError, match="target_utilisation"):
        RateScaler(max_engines=4, target_utilisation=0).decide(1, 1, obs(1, 1))


# -- Algorithm 1 ------------------------------------------------------------------------


class Scripted:
    """A forecast function over a fixed series of tuples per window (known latency)."""

    def __init__(self, ins, k=6, lat=0.1, in_std=0.0):
        self.ins = np.asarray(ins, float)
        self.k, self.lat, self.in_std = k, lat, in_std
        self.calls = []

    def __call__(self, start, horizon):
        self.calls.append(start)
        idx = np.minimum(np.arange(start, start + horizon), self.ins.size - 1)
        std = np.full(horizon, self.in_std)
        std[2:] *= 100  # later windows far less certain, for θ1
        return Forecast(self.ins[idx], std, np.full((horizon, self.k), self.lat),
                        np.zeros((horizon, self.k)))


def run_controller(ctl, fc, actual):
    engines, out = 1, []
    o = None
    for j in range(len(actual)):
        d = ctl.decide(j, engines, o, fc)
        engines = d.engines_after
        out.append(d)
        o = obs(actual[j], engines)
    return out


def test_controller_follows_the_path_and_replans_when_it_runs_out():
    ins = [100, 300, 300, 100, 100, 400, 400, 100]
    fc = Scripted(ins)
    ctl = PathScaler(max_engines=6, horizon=4, window_s=10, rc=1)
    ds = run_controller(ctl, fc, ins)
    assert [d.engines_after for d in ds] == [1, 3, 3, 1, 1, 4, 4, 1]
    assert fc.calls == [0, 4]
    assert "planned 4 windows" in ds[0].reason and ds[0].expected_cost is not None


def test_theta2_rejects_the_path_after_a_surprise():
    planned = [100] * 8
    actual = [100, 100, 500, 100, 100, 100, 100, 100]
    fc = Scripted(planned)
    ctl = PathScaler(max_engines=6, horizon=8, window_s=10, rc=1, theta2=0.5)
    ds = run_controller(ctl, fc, actual)
    assert fc.calls == [0, 3]
    assert "prediction error 4.00 > θ2 0.5" in ds[3].reason


def test_theta1_cuts_the_path_where_the_arc_cost_is_uncertain():
    fc = Scripted([300] * 10, in_std=1.0)
    ctl = PathScaler(max_engines=6, horizon=6, window_s=10, rc=1, theta1=50)
    ds = run_controller(ctl, fc, [300] * 6)
    assert "path rejected at window 2" in ds[0].reason
    assert fc.calls == [0, 3]


def test_prediction_error_is_relative_on_input_and_latency():
    fc = Scripted([100, 100]).__call__(0, 2)
    assert prediction_error(fc, 0, obs(150, 2, lat=0.1)) == pytest.approx(0.5)
    assert prediction_error(fc, 0, obs(100, 2, lat=0.3)) == pytest.approx(2.0)


def test_controller_needs_a_forecast():
    with pytest.raises(ElasticInputError, match="forecast"):
        PathScaler(max_engines=4).decide(0, 1, None, None)


def test_controller_limits_come_from_the_graph():
    ins = [100, 600, 600, 600]
    ctl = PathScaler(max_engines=6, horizon=4, window_s=10, rc=1, max_step=2)
    ds = run_controller(ctl, Scripted(ins), ins)
    # Steps of at most 2 from 1 engine: the planner starts ramping before the load arrives.
    assert [d.engines_after for d in ds] == [3, 5, 6, 6]
    assert all("max_step" not in d.reason for d in ds)


def test_path_scaler_from_config_uses_the_planner_section():
    from keyshift.config import load_config
    from keyshift.elastic.path_scaler import path_scaler_from_config

    cfg = load_config(env={"KEYSHIFT_PLANNER__HORIZON": "7", "KEYSHIFT_PLANNER__MAX_STEP": "2",
                           "KEYSHIFT_PLANNER__DRY_RUN": "true",
                           "KEYSHIFT_PLANNER__OBJECTIVE": "expected"})
    ctl = path_scaler_from_config(cfg)
    assert (ctl.horizon, ctl.max_step, ctl.dry_run, ctl.objective) == (7, 2, True, "expected")
    assert ctl.max_engines == cfg.engines.max and ctl.min_engines == cfg.engines.min
    assert ctl.window_s == cfg.controller.window_s
