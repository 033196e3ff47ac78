"""Workloads for the simulator: how many tuples of each key group arrive in a tick.

The simulator only ever sees group-level arrival counts, one array of length p per tick.
That is what makes 10⁶ keys cheap: a synthetic key distribution is folded into a group
distribution once (sum of the keys' probabilities per group) and a tick then costs one
vectorised Poisson draw over p groups, never a per-key loop. A real trace hashes each
*distinct* key once (a dict cache), reads the CSV in chunks and never holds it whole.

Two kinds of source (``open_loop``):

* open loop: tuples arrive whether or not the engines keep up (Poisson arrivals, a replayed
  trace). Under back-pressure the tuples the engines refuse wait at the source.
* closed loop: the source emits as fast as the engines accept, up to ``rate`` (the dlb
  paper's "maximum possible speed"). Refused tuples are simply never produced.
"""

from __future__ import annotations

import csv
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from keyshift.errors import FieldError
from keyshift.groups import groups_of


class WorkloadError(FieldError):
    """Bad workload parameter or trace; ``field`` names it for the CLI's one-line message."""


@dataclass(frozen=True)
class Schedule:
    """A piecewise-constant value over time: ``steps`` are (start_s, value), sorted.

    ``period_s`` > 0 repeats the pattern (the dlb experiment's Zipf exponent cycle).
    """

    steps: tuple[tuple[float, float], ...]
    period_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.steps:
            raise WorkloadError("schedule", "needs at least one (time, value) step")
        starts = [s for s, _ in self.steps]
        if starts != sorted(starts) or starts[0] != 0.0:
            raise WorkloadError("schedule", "steps must start at 0 s and be in time order")

    @classmethod
    def constant(cls, value: float) -> Schedule:
        return cls(((0.0, float(value)),))

    def at(self, t: float) -> float:
        if self.period_s > 0:
            t = math.fmod(t, self.period_s)
        value = self.steps[0][1]
        for start, v in self.steps:
            if start > t:
                break
            value = v
        return value


class KeyDistribution(ABC):
    """Probability of each key, folded into a probability per key group (cached per param)."""

    def __init__(self, keys: int, groups: int, key_to_group: np.ndarray | None, seed: int) -> None:
        if keys < 1:
            raise WorkloadError("keys", f"must be >= 1, got {keys}")
        if groups < 1:
            raise WorkloadError("groups", f"must be >= 1, got {groups}")
        self.keys = keys
        self.groups = groups
        self._seed = seed
        self._key_to_group = key_to_group
        self._cache: dict[float, np.ndarray] = {}
        self._cdf: dict[float, np.ndarray] = {}
        self._keys_per_group: np.ndarray | None = None

    @property
    def key_to_group(self) -> np.ndarray:
        """Group of every key. Keys are named ``k<i>`` and hashed like real keys, unless the
        key domain is the group domain (one group per key, the dlb and elb-clb setups)."""
        if self._key_to_group is None:
            if self.keys == self.groups:
                self._key_to_group = np.arange(self.keys, dtype=np.int64)
            else:
                self._key_to_group = groups_of((f"k{i}" for i in range(self.keys)), self.groups)
        return self._key_to_group

    @property
    def keys_per_group(self) -> np.ndarray:
        if self._keys_per_group is None:
            self._keys_per_group = np.bincount(self.key_to_group, minlength=self.groups)
        return self._keys_per_group

    def group_pmf(self, param: float) -> np.ndarray:
        pmf = self._cache.get(param)
        if pmf is None:
            key_pmf = self.key_pmf(param)
            pmf = np.bincount(self.key_to_group, weights=key_pmf, minlength=self.groups)
            pmf /= pmf.sum()
            self._cache[param] = pmf
        return pmf

    def group_cdf(self, param: float) -> np.ndarray:
        cdf = self._cdf.get(param)
        if cdf is None:
            cdf = np.cumsum(self.group_pmf(param))
            cdf /= cdf[-1]
            self._cdf[param] = cdf
        return cdf

    @abstractmethod
    def key_pmf(self, param: float) -> np.ndarray:
        """Probability of each key for the scheduled parameter value."""


class ZipfKeys(KeyDistribution):
    """Zipf over keys, P(rank r) ∝ r^-s. Which key holds which rank is a seeded permutation,
    so the hottest key does not always sit on engine 0 of a hash plan."""

    def key_pmf(self, param: float) -> np.ndarray:
        if param < 0:
            raise WorkloadError("zipf", f"exponent must be >= 0, got {param}")
        ranks = np.random.default_rng(self._seed).permutation(self.keys) + 1.0
        w = ranks ** (-float(param))
        return w / w.sum()


class GaussianKeys(KeyDistribution):
    """Keys 1..K with a discretised normal, mean at the middle; ``param`` is the std in keys
    (elb-clb S1: a₁ ∈ [1, 100] Gaussian, same mean as the Zipf stream)."""

    def key_pmf(self, param: float) -> np.ndarray:
        if param <= 0:
            raise WorkloadError("gaussian", f"std must be > 0, got {param}")
        x = np.arange(self.keys, dtype=np.float64)
        mu = (self.keys - 1) / 2.0
        w = np.exp(-0.5 * ((x - mu) / float(param)) ** 2)
        return w / w.sum()


class Workload(ABC):
    """Arrival counts per key group, tick by tick."""

    groups: int
    open_loop: bool = True

    @abstractmethod
    def arrivals(self, t: float, dt: float, rng: np.random.Generator) -> np.ndarray:
        """Tuples per group arriving in [t, t+dt) (float array, length p)."""

    def keys_per_group(self) -> np.ndarray:
        """Distinct keys per group (length-based state holds H tuples per key)."""
        return np.ones(self.groups)

    def exhausted(self, t: float) -> bool:
        """True when a finite source (a trace) has nothing left after time t."""
        return False


class SyntheticWorkload(Workload):
    """Poisson arrivals at ``rate`` tuples/s over a (possibly changing) key distribution.

    ``param`` schedules the distribution's parameter (Zipf exponent, Gaussian std);
    ``rate`` schedules the source rate.
    """

    def __init__(
        self,
        keys: KeyDistribution,
        param: Schedule,
        rate: Schedule,
        open_loop: bool = True,
    ) -> None:
        self.keys = keys
        self.param = param
        self.rate = rate
        self.open_loop = open_loop
        self.groups = keys.groups
        for _, r in rate.steps:
            if r < 0 or not math.isfinite(r):
                raise WorkloadError("rate", f"must be finite and >= 0, got {r}")

    def arrivals(self, t: float, dt: float, rng: np.random.Generator) -> np.ndarray:
        # A Poisson total split multinomially over groups is the same process as one Poisson
        # per group; the split by inverse CDF costs O(N log p) instead of O(p), which wins
        # whenever a tick carries fewer tuples than there are groups.
        total = self.rate.at(t) * dt
        param = self.param.at(t)
        p = self.groups
        if total < p / 8:
            n = int(rng.poisson(total))
            idx = np.searchsorted(self.keys.group_cdf(param), rng.random(n), side="right")
            return np.bincount(np.minimum(idx, p - 1), minlength=p).astype(np.float64)
        return rng.poisson(total * self.keys.group_pmf(param)).astype(np.float64)

    def keys_per_group(self) -> np.ndarray:
        return self.keys.keys_per_group.astype(np.float64)


class TraceWorkload(Workload):
    """Replay a CSV trace with columns ``ts`` (seconds, float) and ``key`` (string).

    The file is streamed twice: one pass counts rows and the time span (needed to scale to
    an average ``rate``), the replay pass reads rows tick by tick. Each distinct key is
    hashed once. ``speedup`` compresses time; ``rate`` (tuples/s on average, after speedup)
    thins or multiplies the counts with a seeded Poisson, so a small trace can stress many
    engines. Rows must be in time order (a trace out of order by more than one tick is
    reported, naming the line).
    """

    def __init__(
        self,
        path: str | Path,
        groups: int,
        speedup: float = 1.0,
        rate: float | None = None,
    ) -> None:
        self.path = Path(path)
        self.groups = groups
        self.speedup = speedup
        self.rate = rate
        if speedup <= 0 or not math.isfinite(speedup):
            raise WorkloadError("speedup", f"must be > 0, got {speedup}")
        if rate is not None and (rate <= 0 or not math.isfinite(rate)):
            raise WorkloadError("rate", f"must be > 0, got {rate}")
        self._rows: Iterator[tuple[int, float, str]] | None = None
        self._pending: tuple[float, str] | None = None
        self._group_cache: dict[str, int] = {}
        self._done = False
        self._last_ts = -math.inf
        self.t0, self.span_s, self.rows = self._scan()
        avg = self.rows / max(self.span_s / speedup, 1e-9)
        self.scale = 1.0 if rate is None else rate / avg

    def _reader(self) -> Iterator[tuple[int, float, str]]:
        if not self.path.is_file():
            raise WorkloadError("trace", f"{self.path} does not exist")
        with self.path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise WorkloadError("trace", f"{self.path} is empty")
            names = [h.strip() for h in header]
            if "ts" not in names or "key" not in names:
                raise WorkloadError(
                    "trace", f"{self.path} needs a header with columns ts and key, got {names}"
                )
            i_ts, i_key = names.index("ts"), names.index("key")
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                try:
                    ts = float(row[i_ts])
                    key = row[i_key]
                except (ValueError, IndexError):
                    raise WorkloadError(
                        "trace", f"{self.path} line {line}: bad row {row!r}"
                    ) from None
                if not math.isfinite(ts):
                    raise WorkloadError("trace", f"{self.path} line {line}: ts is not finite")
                yield line, ts, key

    def _scan(self) -> tuple[float, float, int]:
        n, t_min, t_max = 0, math.inf, -math.inf
        for _, ts, _ in self._reader():
            n += 1
            t_min = min(t_min, ts)
            t_max = max(t_max, ts)
        if n == 0:
            raise WorkloadError("trace", f"{self.path} has a header but no rows")
        return t_min, max(t_max - t_min, 1.0), n

    @property
    def duration_s(self) -> float:
        """Simulated seconds the replay lasts (after speedup)."""
        return self.span_s / self.speedup

    def _group(self, key: str) -> int:
        g = self._group_cache.get(key)
        if g is None:
            g = int(groups_of([key], self.groups)[0])
            self._group_cache[key] = g
        return g

    def arrivals(self, t: float, dt: float, rng: np.random.Generator) -> np.ndarray:
        if self._rows is None:
            self._rows = self._reader()
        end = self.t0 + (t + dt) * self.speedup
        out: list[int] = []
        if self._pending is not None:
            if self._pending[0] >= end:
                return self._scaled(np.zeros(self.groups), rng)
            out.append(self._group(self._pending[1]))
            self._pending = None
        slack = dt * self.speedup
        for line, ts, key in self._rows:
            if ts < self._last_ts - slack:
                raise WorkloadError(
                    "trace", f"{self.path} line {line}: ts {ts} is out of time order"
                )
            self._last_ts = max(self._last_ts, ts)
            if ts >= end:
                self._pending = (ts, key)
                break
            out.append(self._group(key))
        else:
            self._done = True
        counts = np.bincount(np.asarray(out, dtype=np.int64), minlength=self.groups)
        return self._scaled(counts.astype(np.float64), rng)

    def _scaled(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.scale == 1.0:
            return counts
        return rng.poisson(counts * self.scale).astype(np.float64)

    def keys_per_group(self) -> np.ndarray:
        if not self._group_cache:
            return np.ones(self.groups)
        seen = np.fromiter(self._group_cache.values(), dtype=np.int64)
        return np.maximum(np.bincount(seen, minlength=self.groups), 1).astype(np.float64)

    def exhausted(self, t: float) -> bool:
        return self._done and self._pending is None


def zipf_cycle(low: float, high: float, low_s: float, high_s: float) -> Schedule:
    """The dlb §4 exponent cycle: ``low`` for low_s, ``high`` for high_s, repeating."""
    return Schedule(((0.0, low), (low_s, high)), period_s=low_s + high_s)


def piecewise(values: Sequence[tuple[float, float]], period_s: float = 0.0) -> Schedule:
    return Schedule(tuple((float(a), float(b)) for a, b in values), period_s)
