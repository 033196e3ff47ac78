"""Evaluate: one named evaluation of a finished window against the plan that ran it.

Everything the decision and the audit log read about a window is computed here once:
the imbalance (dlb Eq. 2 RSTD, elb-clb Eq. 1 variance), the most loaded engine, the
floor no key-granular plan can beat (:mod:`keyshift.control.floor`), the
utilisation of the engines (elastic-cep Eq. 1: In over Δt·N/Lat, In at the rate measured
over the window's span), and the scaler's forecast
error for the window (the θ2 quantity of Algorithm 1), each with its threshold check.
"""

from __future__ import annotations

from dataclasses import dataclass

from keyshift.elastic.path_scaler import relative_error
from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan

from .floor import Floor, key_group_floor
from .window import WindowStats


@dataclass(frozen=True)
class Evaluation:
    """What the loop knows about a window before it decides."""

    window: int
    balance: Balance
    max_load: float
    tuples: float
    lat_s: float | None
    utilisation: float | None
    forecast_error: float | None
    theta: float
    theta2: float
    floor: Floor  # of the window's group loads on the plan's live engines
    input_rate: float = 0.0  # In per second over the window's measured span

    @property
    def over_theta(self) -> bool:
        """imbScore above the balancer's θ (dlb §3): DLB would act."""
        return self.theta > 0 and self.balance.rstd > self.theta

    @property
    def over_theta2(self) -> bool:
        """Forecast error above θ2 (elastic-cep Algorithm 1): the planner's path is rejected."""
        return self.theta2 > 0 and self.forecast_error is not None \
            and self.forecast_error > self.theta2

    def summary(self) -> str:
        util = "" if self.utilisation is None else f", utilisation {self.utilisation:.0%}"
        err = "" if self.forecast_error is None else f", forecast error {self.forecast_error:.2f}"
        return f"imbScore {self.balance.rstd:.1f}%{util}{err}"


def evaluate(window: WindowStats, plan: Plan, window_s: float, theta: float = 0.0,
             theta2: float = 0.0, expected: tuple[float, float] | None = None) -> Evaluation:
    """Evaluate ``window`` as run by ``plan``; ``expected`` is the scaler's forecast (In, Lat)
    for this window, when it planned one."""
    live = live_loads(plan.assignment, window.loads, plan.live)
    lat = window.lat_s
    n = plan.parallelism
    rate = window.input_rate(window_s)  # over the measured span, not Δ (a slow batch)
    util = rate * lat / n if lat is not None and window_s > 0 else None
    err = None
    if expected is not None and lat is not None and expected[1] > 0:
        err = relative_error(rate * window_s, expected[0], lat, expected[1])
    return Evaluation(window.index, Balance.of(live), float(live.max(initial=0.0)),
                      window.tuples, lat, util, err, float(theta), float(theta2),
                      key_group_floor(window.loads, n), rate)
