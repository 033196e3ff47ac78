"""The GP forecaster plugs into the planner's forecaster protocol by name."""

import numpy as np
import pytest

from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.forecast import SeriesModel, make_series_model, series_model_names


def test_gp_is_offered_by_name_and_follows_the_protocol():
    assert "gp" in series_model_names()
    f = make_series_model("gp")
    assert isinstance(f, SeriesModel)
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
        make_series_model("crystal-ball")


def test_online_updates_match_a_fresh_posterior_on_the_same_rows():
    """The Cholesky factor extended row by row (keyshift.models.gp._OnlinePosterior) gives the
    posterior GPyTorch computes from scratch on the same rows and hyper-parameters, also
    across the trim back to max_train."""
    import gpytorch
    import torch

    from keyshift.models.features import rate_features
    from keyshift.models.gp import _MAX_CHOLESKY, _ONLINE_SLACK, InputRateGP

    rng = np.random.default_rng(1)
    t = np.arange(200 + _ONLINE_SLACK + 20) * 1800.0
    y = 100 + 50 * np.sin(2 * np.pi * t / 86_400) + rng.normal(0, 5, t.size)
    gp = InputRateGP(kernel="ard+daily", mean="constant", iters=5, max_train=150).fit(rate_features(t[:150]), y[:150])
    x_star = rate_features(t[-10:] + 3600.0)

    def fresh():
        s = gp._scaling
        gp._model.set_train_data(torch.as_tensor(s.x(gp._X)), torch.as_tensor(s.y(gp._y)), strict=False)
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(_MAX_CHOLESKY):
            d = gp._likelihood(gp._model(torch.as_tensor(s.x(x_star))))
            return d.mean.numpy() * s.y_std + s.y_mean, np.sqrt(d.variance.numpy()) * s.y_std

    gp.predict(x_star)  # builds the factor
    gp.add_observations(rate_features(t[150:160]), y[150:160])  # ten rows in one call
    for j in range(160, 200):
        gp.add_observations(rate_features(t[j:j + 1]), y[j:j + 1])
    assert gp.n_train == 200
    mean, std = gp.predict(x_star)
    ref_mean, ref_std = fresh()
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(std, ref_std, rtol=1e-8, atol=1e-6)
    # Past max_train + slack the rows are trimmed back to the most recent max_train.
    gp.add_observations(rate_features(t[200:]), y[200:])
    assert gp.n_train == 150
    np.testing.assert_allclose(gp._X, rate_features(t[-150:]))
    mean, std = gp.predict(x_star)
    ref_mean, ref_std = fresh()
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-6)


def test_online_factor_grows_past_its_buffer():
    """Fitted on few rows, the factor's buffer (rows + slack) fills and doubles; the
    posterior still equals GPyTorch's on the same rows."""
    import gpytorch
    import torch

    from keyshift.models.features import rate_features
    from keyshift.models.gp import _MAX_CHOLESKY, _ONLINE_SLACK, InputRateGP

    rng = np.random.default_rng(2)
    n = 20 + _ONLINE_SLACK + 30
    t = np.arange(n) * 1800.0
    y = 100 + 50 * np.sin(2 * np.pi * t / 86_400) + rng.normal(0, 5, n)
    gp = InputRateGP(kernel="ard", mean="constant", iters=5, max_train=2 * n).fit(rate_features(t[:20]), y[:20])
    x_star = rate_features(t[-5:] + 3600.0)
    gp.predict(x_star)
    for j in range(20, n):
        gp.add_observations(rate_features(t[j:j + 1]), y[j:j + 1])
    assert gp.n_train == n and gp._posterior is not None
    mean, std = gp.predict(x_star)
    s = gp._scaling
    gp._model.set_train_data(torch.as_tensor(s.x(gp._X)), torch.as_tensor(s.y(gp._y)), strict=False)
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(_MAX_CHOLESKY):
        d = gp._likelihood(gp._model(torch.as_tensor(s.x(x_star))))
    np.testing.assert_allclose(mean, d.mean.numpy() * s.y_std + s.y_mean, rtol=1e-8, atol=1e-6)
    np.testing.assert_allclose(std, np.sqrt(d.variance.numpy()) * s.y_std, rtol=1e-8, atol=1e-6)
