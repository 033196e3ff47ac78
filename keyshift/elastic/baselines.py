"""The baselines the planner is measured against (elastic-cep §IV, streammine3g §6, DS2).

- :class:`StaticMax`: always the maximum engines; the fewest misses at the highest bill.
- :class:`QueueingScaler` (QT): M/M/c with Poisson arrivals at the last window's measured
  rate and exponential service at the measured per-engine rate; the fewest engines whose
  mean response time stays under ``target_factor`` service times. Like the QT-algorithm
  the paper compares with, it takes the per-engine service rate as independent of the
  engine count and reacts to the past window, which is where it loses tuples.
- :class:`ThresholdScaler`: streammine3g's reactive rule, one engine out when the busiest
  engine is above 80 % utilisation, one in when an engine is below 40 %.
- :class:`RateScaler`: DS2-style one step: engines = ⌈observed rate / true processing rate
  per engine⌉, the true rate being 1 / (per-tuple busy time), aiming at ``target_utilisation``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from keyshift.elastic.decision import Observation
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.scaler import ForecastFn, Scaler


class StaticMax(Scaler):
    """Always ``max_engines``."""

    name = "static-max"

    def _propose(self, window, engines_now, observed, forecast):
        hi = self.bounds()[1]
        return hi, f"static: always {hi} engines", {}


def erlang_c(servers: np.ndarray, offered: float) -> np.ndarray:
    """P(wait) in M/M/c for each c in ``servers`` at offered load a = λ/μ (Erlang C).

    Uses the stable Erlang-B recursion B(k) = a·B(k−1) / (k + a·B(k−1)); c ≤ a gives 1
    (the queue grows without bound)."""
    servers = np.asarray(servers, dtype=np.int64)
    top = int(servers.max())
    b = np.empty(top + 1)
    b[0] = 1.0
    for k in range(1, top + 1):
        b[k] = offered * b[k - 1] / (k + offered * b[k - 1])
    bc = b[servers]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = servers * bc / (servers - offered * (1.0 - bc))
    return np.where(servers > offered, np.clip(c, 0.0, 1.0), 1.0)


def mmc_response_time(servers: np.ndarray, arrival: float, service: float) -> np.ndarray:
    """Mean time in system W = C(c, a) / (cμ − λ) + 1/μ; infinite where cμ ≤ λ."""
    servers = np.asarray(servers, dtype=np.float64)
    pw = erlang_c(servers.astype(np.int64), arrival / service)
    slack = servers * service - arrival
    with np.errstate(divide="ignore"):
        wq = np.where(slack > 0, pw / np.where(slack > 0, slack, 1.0), np.inf)
    return wq + 1.0 / service


class QueueingScaler(Scaler):
    """QT: the fewest engines whose M/M/c response time ≤ ``target_factor`` / μ."""

    name = "qt"

    def __init__(self, max_engines=0, min_engines=0, cooldown_windows=0, max_step=0,
                 dry_run=False, target_factor: float = 2.0) -> None:
        super().__init__(max_engines, min_engines, cooldown_windows, max_step, dry_run)
        self.target_factor = target_factor

    def _propose(self, window, engines_now, observed: Observation | None, forecast: ForecastFn | None):
        if not self.target_factor > 1:
            raise ElasticInputError("target_factor", f"must be > 1, got {self.target_factor}")
        if observed is None:
            return engines_now, "qt: no measurement yet, keep", {}
        hi = self.bounds()[1]
        arrival = observed.in_tuples / observed.window_s
        service = 1.0 / observed.lat_s
        if arrival <= 0:
            return 1, "qt: no arrivals, 1 engine", {}
        servers = np.arange(1, hi + 1)
        w = mmc_response_time(servers, arrival, service)
        ok = np.flatnonzero(w <= self.target_factor / service)
        target = int(servers[ok[0]]) if ok.size else hi
        return target, (
            f"qt: λ={arrival:.4g}/s μ={service:.4g}/s per engine → {target} engines "
            f"(M/M/c response ≤ {self.target_factor:g}/μ)"
        ), {}


@dataclass(frozen=True)
class EngineObservation(Observation):
    """An :class:`Observation` with the window's tuples per live engine (L_e), for the
    scalers that look at single engines (the threshold rule's "if a node reaches 80 %")."""

    engine_loads: tuple[float, ...] | np.ndarray | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.engine_loads is not None:
            loads = np.asarray(self.engine_loads, dtype=np.float64)
            if loads.ndim != 1 or loads.size != self.engines:
                raise ElasticInputError(
                    "observed.engine_loads", f"needs one load per live engine ({self.engines})")
            if not np.isfinite(loads).all() or (loads < 0).any():
                raise ElasticInputError("observed.engine_loads", "must be finite and >= 0")
            object.__setattr__(self, "engine_loads", loads)


def engine_utilisation(observed: Observation) -> tuple[float, float, bool]:
    """(busiest, least loaded) engine utilisation L_e·Lat/Δt, and whether per-engine loads
    were known. Without them (the per-window replay has no key groups, its engines are
    interchangeable) every engine carries In/N and both equal the mean utilisation."""
    loads = getattr(observed, "engine_loads", None)
    if loads is None or len(loads) == 0:
        u = observed.utilisation
        return u, u, False
    scale = observed.lat_s / observed.window_s
    loads = np.asarray(loads, dtype=np.float64)
    return float(loads.max()) * scale, float(loads.min()) * scale, True


class ThresholdScaler(Scaler):
    """Reactive thresholds (streammine3g §6): "if a node reaches an upper threshold of 80 %
    of the CPU utilization, the manager allocates a new spare node"; below 40 % its slices
    move to other nodes.

    Utilisation is per engine, L_e·Lat/Δt (busy seconds over the window), from
    ``observed.engine_loads`` (:class:`EngineObservation`). +1 engine when the *busiest*
    engine is above ``high``: the mean hides a hot engine that misses tuples while the
    cluster average looks comfortable. −1 engine when the least loaded engine is below
    ``low`` (the node the paper drains), unless the busiest engine would then exceed
    ``high`` with its load spread over one engine fewer (busiest·N/(N−1) ≥ high): without
    that guard a skewed window scales in and out in turn. Without per-engine loads both
    rules fall back to the mean utilisation, which is then also the busiest engine's.
    """

    name = "threshold"

    def __init__(self, max_engines=0, min_engines=0, cooldown_windows=0, max_step=0,
                 dry_run=False, high: float = 0.8, low: float = 0.4) -> None:
        super().__init__(max_engines, min_engines, cooldown_windows, max_step, dry_run)
        self.high = high
        self.low = low

    def _propose(self, window, engines_now, observed, forecast):
        if not 0 <= self.low < self.high:
            raise ElasticInputError("low", f"need 0 <= low < high, got {self.low}, {self.high}")
        if observed is None:
            return engines_now, "threshold: no measurement yet, keep", {}
        busiest, least, known = engine_utilisation(observed)
        what = "busiest engine" if known else "utilisation (mean: no per-engine loads)"
        if busiest > self.high:
            return engines_now + 1, f"threshold: {what} {busiest:.0%} > {self.high:.0%}, scale out", {}
        if engines_now > 1 and least < self.low:
            spread = busiest * engines_now / (engines_now - 1)
            if spread < self.high:
                low_what = "least loaded engine" if known else what
                return engines_now - 1, (
                    f"threshold: {low_what} {least:.0%} < {self.low:.0%}, scale in"), {}
            return engines_now, (
                f"threshold: an engine at {least:.0%} < {self.low:.0%}, but the busiest "
                f"({busiest:.0%}) would reach {spread:.0%} on one engine fewer, keep"), {}
        return engines_now, f"threshold: {what} {busiest:.0%} within band", {}


class RateScaler(Scaler):
    """DS2-style: jump in one step to ⌈λ · busy time per tuple / target_utilisation⌉."""

    name = "ds2"

    def __init__(self, max_engines=0, min_engines=0, cooldown_windows=0, max_step=0,
                 dry_run=False, target_utilisation: float = 1.0) -> None:
        super().__init__(max_engines, min_engines, cooldown_windows, max_step, dry_run)
        self.target_utilisation = target_utilisation

    def _propose(self, window, engines_now, observed, forecast):
        if not 0 < self.target_utilisation <= 1:
            raise ElasticInputError(
                "target_utilisation", f"must be in (0, 1], got {self.target_utilisation}"
            )
        if observed is None:
            return engines_now, "ds2: no measurement yet, keep", {}
        rate = observed.in_tuples / observed.window_s
        true_rate = 1.0 / observed.lat_s
        target = max(1, math.ceil(rate / (true_rate * self.target_utilisation) - 1e-9))
        return target, (
            f"ds2: source {rate:.4g}/s ÷ true rate {true_rate:.4g}/s per engine → {target}"
        ), {}


BASELINES: dict[str, type[Scaler]] = {
    "static-max": StaticMax,
    "qt": QueueingScaler,
    "threshold": ThresholdScaler,
    "ds2": RateScaler,
}
