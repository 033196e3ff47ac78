"""Which forecaster a fit keeps, from its errors on the held-out blocks of its own history
(issue 44).

The candidates range from seasonal naive (no parameter) through the seasonal profile alone to a
GP on either. Only candidates whose held-out error is no larger than the better seasonal
naive's are eligible, so whatever is kept has, on those blocks, never erred more than seasonal
naive: the guarantee the issue asks for, by construction rather than by tuning. Among the
eligible the one with the least error is kept; a tie goes to the simpler.

Not the one-standard-error rule of model selection (the simplest candidate within one paired
standard error of the best, Breiman et al. 1984), which was tried first: five held-out days
give a wide standard error, so it kept a naive on most origins, and at 20 rolling origins it
erred more than the least-error choice on all five series it was measured on (MASE against
the better naive: taxi 1.201 against 1.091, bikes 1.156 against 1.110, WorldCup98 1.379
against 1.351, GOOG 0.877 against 0.870, the synthetic timetable 0.866 against 0.860; log in
bench/results/forecast_issue44.md). Fourteen held-out days instead of five did not help
either: the older days described the test days less well (bikes 1.240, WorldCup98 1.796).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np


class Candidate(NamedTuple):
    """A forecaster as scored on the held-out blocks: its errors per block, how complex it is
    (0: seasonal naive; larger: more parameters), and whether it is a seasonal naive."""

    errors: Sequence[np.ndarray]
    complexity: float
    naive: bool = False

    @property
    def mae(self) -> float:
        return float(np.mean(np.abs(np.concatenate(list(self.errors)))))


def choose(candidates: Mapping[str, Candidate]) -> str:
    """The candidate with the least held-out error among those that erred no more than the
    best seasonal naive (all of them when none is a naive); a tie goes to the simpler."""
    if not candidates:
        raise ValueError("candidates: nothing to choose from")
    maes = {name: c.mae for name, c in candidates.items()}
    naives = [maes[n] for n, c in candidates.items() if c.naive]
    bar = min(naives) if naives else np.inf
    eligible = [n for n in candidates if maes[n] <= bar]
    return min(eligible, key=lambda n: (maes[n], candidates[n].complexity))
