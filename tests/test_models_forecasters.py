"""The GP forecaster plugs into the planner's forecaster protocol by name."""

import numpy as np
import pytest

from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.forecast import Forecaster, forecaster_names, make_forecaster


def test_gp_is_offered_by_name_and_follows_the_protocol():
    assert "gp" in forecaster_names()
    f = make_forecaster("gp")
    assert isinstance(f, Forecaster)
    t = np.arange(240) * 1800.0
    y = 100 + 50 * np.sin(2 * np.pi * t / 86_400)
    f.fit(t[:200], y[:200])
    mean, std = f.predict(t[200:])
    assert mean.shape == std.shape == (40,)
    assert np.all(std > 0)
    # a daily cycle seen for four days is forecast far better than by its mean
    assert np.abs(mean - y[200:]).mean() < 0.3 * np.abs(y[200:] - y[:200].mean()).mean()
    f.update(t[200:210], y[200:210])


def test_unknown_forecaster_names_the_field():
    with pytest.raises(ElasticInputError, match="forecaster"):
        make_forecaster("crystal-ball")
