"""Arc costs of the elasticity graph (elastic-cep §III-C2, Eq. 9–13), vectorised over
(window, engine count).

For a vertex v_{i'j'} (i' engines during future window w_{j'}) the paper defines

    Out_{i'j'}  = sel · min{ Δt / Lat_{i'j'} · i',  In_{i'j'} }                (Eq. 9)
    Miss_{i'j'} = sel · In_{i'j'} − Out_{i'j'}                                 (Eq. 10)
    C(v_ij, v_i'j') = Miss_{i'j'} · MC + i' · EC · Δt + RC(i, i')              (Eq. 11)
    RC(i, i') = RC if i ≠ i' else 0                                            (Eq. 12)

so Miss = sel · max(In − Cap, 0) with the window capacity Cap = Δt · i' / Lat. Only the
first term is random (Eq. 13): In and Lat are Gaussian forecasts, the engine and
rebalancing terms are known. The cost's standard deviation comes from propagating the
forecast std through Miss: X = In − Cap is taken as Gaussian with

    Var X = σ_In² + (Cap · σ_Lat / Lat)²        (first-order, ∂Cap/∂Lat = −Cap/Lat)

and Miss = sel · max(X, 0) is a rectified Gaussian, whose mean and variance are closed
form. The paper plugs the means into Eq. 11; :data:`OBJECTIVES` also offers the expected
cost under the forecast distribution, which charges for the misses a forecast below the
truth would cause and therefore keeps headroom where the forecast is uncertain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from keyshift.elastic.errors import ElasticInputError

OBJECTIVES = ("mean", "expected")
"""``mean``: Eq. 11 evaluated on the forecast means (the paper). ``expected``: E[Eq. 11]."""

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


@dataclass(frozen=True)
class Costs:
    """The user's prices: MC per missed tuple, EC per engine-second, RC per reconfiguration."""

    mc: float = 1.0
    ec: float = 1.0
    rc: float = 10.0

    def __post_init__(self) -> None:
        for name in ("mc", "ec", "rc"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ElasticInputError(f"costs.{name}", f"must be a finite number >= 0, got {value}")


@dataclass(frozen=True)
class Forecast:
    """Per-window forecasts over the horizon: tuples in (mean, std) and the per-tuple latency
    in seconds for 1..K engines (mean, std). Shapes (H,), (H,), (H, K), (H, K).

    ``in_predictive`` False says the input's std is a spread for the expected cost but not
    a predictive distribution to size the forecast reserve on
    (:class:`~keyshift.elastic.reserve.ForecastQuantile` then falls back to the rises)."""

    in_mean: np.ndarray
    in_std: np.ndarray
    lat_mean: np.ndarray
    lat_std: np.ndarray
    in_predictive: bool = True

    def __post_init__(self) -> None:
        in_mean = _as_array("windows.in_mean", self.in_mean, 1)
        horizon = in_mean.shape[0]
        if horizon == 0:
            raise ElasticInputError("windows", "needs at least one window")
        in_std = _as_array("windows.in_std", self.in_std, 1)
        lat_mean = _as_array("windows.lat_mean", self.lat_mean, 2)
        lat_std = _as_array("windows.lat_std", self.lat_std, 2)
        if in_std.shape != in_mean.shape:
            raise ElasticInputError("windows.in_std", f"has {in_std.shape[0]} windows, in_mean {horizon}")
        if lat_mean.shape[0] != horizon or lat_mean.shape[1] == 0:
            raise ElasticInputError(
                "windows.lat_mean", f"needs one non-empty list per window, got shape {lat_mean.shape}"
            )
        if lat_std.shape != lat_mean.shape:
            raise ElasticInputError(
                "windows.lat_std", f"must have the shape of lat_mean {lat_mean.shape}, got {lat_std.shape}"
            )
        if (lat_mean <= 0).any():
            raise ElasticInputError("windows.lat_mean", "latencies must be > 0 seconds")
        object.__setattr__(self, "in_mean", in_mean)
        object.__setattr__(self, "in_std", in_std)
        object.__setattr__(self, "lat_mean", lat_mean)
        object.__setattr__(self, "lat_std", lat_std)

    @property
    def horizon(self) -> int:
        return int(self.in_mean.shape[0])

    @property
    def max_engines(self) -> int:
        return int(self.lat_mean.shape[1])

    def head(self, n: int) -> Forecast:
        return Forecast(self.in_mean[:n], self.in_std[:n], self.lat_mean[:n], self.lat_std[:n],
                        self.in_predictive)


def _as_array(name: str, value: object, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ElasticInputError(name, "must contain only numbers") from None
    if arr.ndim != ndim:
        shape = "a list of numbers per window" if ndim == 1 else "a list of lists of numbers"
        raise ElasticInputError(name, f"must be {shape}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ElasticInputError(name, "must be finite and >= 0")
    return arr


def capacity(lat: np.ndarray, engines: np.ndarray, window_s: float) -> np.ndarray:
    """Tuples i engines can process in one window: Δt · i / Lat (the first term of Eq. 9)."""
    return window_s * engines / lat


def rectified_gaussian(mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of max(X, 0) for X ~ N(mu, sigma²), elementwise; sigma = 0 is exact."""
    sigma = np.asarray(sigma, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    safe = np.where(sigma > 0, sigma, 1.0)
    z = mu / safe
    cdf = ndtr(z)
    pdf = np.exp(-0.5 * z * z) / _SQRT_2PI
    mean = mu * cdf + safe * pdf
    second = (mu * mu + safe * safe) * cdf + mu * safe * pdf
    var = np.maximum(second - mean * mean, 0.0)
    deterministic = sigma <= 0
    mean = np.where(deterministic, np.maximum(mu, 0.0), mean)
    std = np.where(deterministic, 0.0, np.sqrt(var))
    return mean, std


@dataclass(frozen=True)
class VertexCosts:
    """Cost of being at vertex v_{i'j'} excluding RC: shapes (H, K) for engines 1..K."""

    mean: np.ndarray
    std: np.ndarray
    miss: np.ndarray
    engine_cost: np.ndarray


def vertex_costs(
    forecast: Forecast,
    costs: Costs,
    window_s: float,
    sel: float = 1.0,
    objective: str = "mean",
) -> VertexCosts:
    """Eq. 9–11 without the RC term for every (window, engine count) at once.

    ``mean`` is the cost the shortest path minimises (Eq. 11 on the means, or its
    expectation for ``objective="expected"``); ``std`` is σ of Eq. 13, the same for both.
    """
    if objective not in OBJECTIVES:
        raise ElasticInputError("objective", f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not window_s > 0 or not np.isfinite(window_s):
        raise ElasticInputError("window_s", f"must be > 0 seconds, got {window_s}")
    if not 0 < sel <= 1e6 or not np.isfinite(sel):
        raise ElasticInputError("sel", f"must be > 0, got {sel}")
    engines = np.arange(1, forecast.max_engines + 1, dtype=np.float64)[None, :]
    cap = capacity(forecast.lat_mean, engines, window_s)
    gap = forecast.in_mean[:, None] - cap
    gap_std = np.sqrt(forecast.in_std[:, None] ** 2 + (cap * forecast.lat_std / forecast.lat_mean) ** 2)
    expected_miss, miss_std = rectified_gaussian(gap, gap_std)
    plug_in_miss = np.maximum(gap, 0.0)
    miss = sel * (plug_in_miss if objective == "mean" else expected_miss)
    engine_cost = np.broadcast_to(engines * costs.ec * window_s, miss.shape)
    return VertexCosts(
        mean=miss * costs.mc + engine_cost,
        std=sel * miss_std * costs.mc,
        miss=miss,
        engine_cost=np.array(engine_cost),
    )
