"""The 80/40 threshold baseline (streammine3g §6) on single engines, not the mean."""

from __future__ import annotations

import pytest

from keyshift.elastic.baselines import (
    EngineObservation,
    ThresholdScaler,
    engine_utilisation,
)
from keyshift.elastic.decision import Observation
from keyshift.elastic.errors import ElasticInputError


def observed(loads, lat=0.1, window_s=10.0) -> EngineObservation:
    return EngineObservation(float(sum(loads)), lat, len(loads), window_s, engine_loads=loads)


def test_a_hot_engine_scales_out_while_the_mean_is_comfortable():
    # 4 engines, mean utilisation 50 %, one engine at 95 %: "if a node reaches 80 %"
    o = observed([95, 35, 35, 35])
    assert o.utilisation == pytest.approx(0.5)
    assert engine_utilisation(o)[:2] == (pytest.approx(0.95), pytest.approx(0.35))
    d = ThresholdScaler(max_engines=8).decide(1, 4, o)
    assert d.engines_after == 5 and "busiest engine 95%" in d.reason


def test_scale_in_on_an_idle_engine_unless_the_busiest_would_overflow():
    s = ThresholdScaler(max_engines=8)
    assert s.decide(1, 4, observed([30, 30, 30, 20])).engines_after == 3  # 30·4/3 = 40 %
    keep = s.decide(2, 4, observed([70, 30, 30, 20]))  # 70 % · 4/3 = 93 % ≥ 80 %
    assert keep.engines_after == 4 and "would reach" in keep.reason


def test_without_engine_loads_the_rule_is_the_mean_and_says_so():
    plain = Observation(180.0, 0.1, 2, 10.0)  # 90 %
    d = ThresholdScaler(max_engines=8).decide(1, 2, plain)
    assert d.engines_after == 3 and "mean: no per-engine loads" in d.reason
    assert ThresholdScaler(max_engines=8).decide(1, 2, Observation(60.0, 0.1, 2, 10.0)).engines_after == 1


@pytest.mark.parametrize("loads", [[1.0, 2.0, 3.0], [1.0, float("nan")], [-1.0, 2.0]])
def test_engine_loads_are_checked(loads):
    with pytest.raises(ElasticInputError, match="engine_loads"):
        EngineObservation(3.0, 0.1, 2, 10.0, engine_loads=loads)
