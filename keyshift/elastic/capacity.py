"""How fast i engines really are: the ground truth the evaluation replays against.

Per-tuple latency grows with the engine count, Lat(i) = base · (1 + overhead · (i − 1)),
because every added engine adds routing, coordination and state-transfer work (the paper
saw latency differ with the number of Esper engines, which is why engines is a feature of
its latency GP). Capacity is therefore sub-linear, Cap(i) = Δt · i / Lat(i) — the effect
the QT and DS2 baselines ignore when they extrapolate one engine's rate linearly. Each
window's latency carries multiplicative log-normal noise of coefficient of variation ``cv``.
"""

from __future__ import annotations

import numpy as np

from keyshift.elastic.errors import ElasticInputError


class LatencyModel:
    """Lat(i) = ``base_s`` · (1 + ``overhead`` · (i − 1)) · noise, noise log-normal with ``cv``."""

    def __init__(self, base_s: float = 0.002, overhead: float = 0.02, cv: float = 0.05) -> None:
        self.base_s = base_s
        self.overhead = overhead
        self.cv = cv

    def _check(self) -> None:
        if not self.base_s > 0:
            raise ElasticInputError("base_s", f"must be > 0 seconds, got {self.base_s}")
        if not self.overhead >= 0:
            raise ElasticInputError("overhead", f"must be >= 0, got {self.overhead}")
        if not self.cv >= 0:
            raise ElasticInputError("cv", f"must be >= 0, got {self.cv}")

    def mean(self, engines: np.ndarray | int) -> np.ndarray:
        """Expected per-tuple latency in seconds for each engine count."""
        self._check()
        e = np.asarray(engines, dtype=np.float64)
        if (e < 1).any():
            raise ElasticInputError("engines", "must be >= 1")
        return self.base_s * (1.0 + self.overhead * (e - 1.0))

    def sample(self, engines: np.ndarray | int, rng: np.random.Generator) -> np.ndarray:
        """One window's observed latency: mean × log-normal noise with mean 1."""
        mean = self.mean(engines)
        if self.cv == 0:
            return mean
        s2 = np.log1p(self.cv**2)
        return mean * rng.lognormal(-0.5 * s2, np.sqrt(s2), size=np.shape(mean))

    def rate(self, engines: np.ndarray | int) -> np.ndarray:
        """Tuples per second the engines process together: i / Lat(i)."""
        return np.asarray(engines, dtype=np.float64) / self.mean(engines)
