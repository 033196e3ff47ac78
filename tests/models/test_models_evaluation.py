"""The rolling-origin backtest fits each model on the past of its origin only: the kernel a
GP picks on the held-out tail of its training window cannot depend on the points it is then
scored on (issue 14: the choice must come from the training data)."""

from __future__ import annotations

import numpy as np

from keyshift.models.evaluation import backtest
from keyshift.models.gp import InputRateGP


def _series(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = 1_700_000_000.0 + 3600.0 * np.arange(24 * 9)
    return t, 50 + 20 * np.sin(2 * np.pi * t / 86_400.0) + rng.normal(0, 3, t.size)


def test_the_kernel_choice_does_not_see_the_points_it_is_scored_on():
    fitted: list[InputRateGP] = []

    def factory() -> InputRateGP:
        fitted.append(InputRateGP(kernel="ard|ard+local|ard+daily", iters=10))
        return fitted[-1]

    t, y = _series()
    runs = []
    for future in (0.0, 500.0):  # the one origin's forecast block: as it was, or far off
        changed = y.copy()
        changed[-24:] += future
        fitted.clear()
        result = backtest(t, changed, origins=1, horizon=24, models={"gp": factory},
                          names=["gp"])
        runs.append((fitted[0].kernel_, fitted[0].kernel_errors_, result["models"]["gp"]))
    (kernel_a, errors_a, scores_a), (kernel_b, errors_b, scores_b) = runs
    assert len(errors_a) == 3  # 3 kernels chosen on the held-out tail (the profile statistic
    # is chosen with its cycle, on the profile's own forecasts: models/seasonal.py)
    assert kernel_a == kernel_b and errors_a == errors_b
    assert scores_b["mae"] > 50 * scores_a["mae"]  # the future did change, and was scored
