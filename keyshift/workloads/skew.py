"""Key skew that changes over time, and a vectorised sampler of skewed keys.

Schedule syntax (``--skew``)::

    uniform                      every key equally likely
    zipf:1.2                     Zipf exponent 1.2 all the time
    zipf:0.2@0,1.5@300,0.2@900   exponent 0.2 from 0 s, 1.5 from 300 s, 0.2 again from 900 s
    zipf:1.5@0,1.5@180+500       from 180 s the ranks move 500 keys on: other keys are hot

Times are seconds since the producer started; steps hold until the next one (the dlb paper's
experiments switch the exponent abruptly, which is what stresses a balancer). A step's
``+R`` rotates which key holds which rank by R places, so a hot set can move to other keys
(a new trend) instead of only growing and fading on the same ones. A schedule must
start at 0 s and its times must increase. ``zipf:0`` equals ``uniform``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from keyshift.errors import FieldError

_STEP = re.compile(r"^\s*(?P<v>[0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(?:@\s*(?P<t>[0-9]*\.?[0-9]+)\s*)?"
                   r"(?:\+\s*(?P<r>\d{1,9})\s*)?$")
MAX_EXPONENT = 10.0


class WorkloadInputError(FieldError):
    """Bad workload input; ``field`` names the option or parameter at fault."""


@dataclass(frozen=True)
class SkewSchedule:
    """Piecewise-constant Zipf exponent over time: ``steps`` are (start_s, exponent)."""

    steps: tuple[tuple[float, float], ...]
    rotations: tuple[int, ...] = ()  # per step: ranks moved this many keys on (none: 0)

    def __post_init__(self) -> None:
        if not self.steps:
            raise WorkloadInputError("skew", "needs at least one step")
        times = [t for t, _ in self.steps]
        if times[0] != 0.0:
            raise WorkloadInputError("skew", f"the first step must start at 0 s, got {times[0]}")
        if any(b <= a for a, b in zip(times, times[1:], strict=False)):
            raise WorkloadInputError("skew", f"step times must increase, got {times}")
        if self.rotations and len(self.rotations) != len(self.steps):
            raise WorkloadInputError("skew", "one rotation per step")
        for _, s in self.steps:
            if not 0.0 <= s <= MAX_EXPONENT:
                raise WorkloadInputError(
                    "skew", f"Zipf exponent must be in [0, {MAX_EXPONENT}], got {s}")

    @classmethod
    def parse(cls, text: str) -> SkewSchedule:
        """Parse the ``--skew`` syntax above; errors name ``skew`` and quote the bad part."""
        spec = (text or "").strip().lower()
        if spec == "uniform":
            return cls(((0.0, 0.0),))
        kind, sep, rest = spec.partition(":")
        if kind != "zipf" or not sep or not rest.strip():
            raise WorkloadInputError(
                "skew", f"expected 'uniform' or 'zipf:S[@T],S@T,...', got {text!r}")
        steps, rotations = [], []
        for i, part in enumerate(rest.split(",")):
            m = _STEP.match(part)
            if not m:
                raise WorkloadInputError("skew", f"step {part.strip()!r} is not EXPONENT@SECONDS[+ROTATION]")
            t = m.group("t")
            if t is None and i > 0:
                raise WorkloadInputError("skew", f"step {part.strip()!r} needs @SECONDS")
            steps.append((float(t) if t is not None else 0.0, float(m.group("v"))))
            rotations.append(int(m.group("r") or 0))
        return cls(tuple(steps), tuple(rotations) if any(rotations) else ())

    def _step(self, t_s: float) -> int:
        times = np.fromiter((t for t, _ in self.steps), dtype=float)
        return max(int(np.searchsorted(times, t_s, side="right")) - 1, 0)

    def exponent_at(self, t_s: float) -> float:
        return self.steps[self._step(t_s)][1]

    def rotation_at(self, t_s: float) -> int:
        return self.rotations[self._step(t_s)] if self.rotations else 0

    def __str__(self) -> str:
        if self.steps == ((0.0, 0.0),):
            return "uniform"
        rot = self.rotations or (0,) * len(self.steps)
        return "zipf:" + ",".join(f"{s:g}@{t:g}" + (f"+{r}" if r else "")
                                  for (t, s), r in zip(self.steps, rot, strict=True))


class KeySampler:
    """Draws key indices 0..n-1 with P(rank r) ∝ r^-s for the schedule's current exponent.

    Which key holds which rank is fixed by ``order`` (a seeded permutation by default), so
    the hot keys stay the same keys when the exponent changes: skew grows on the same keys,
    as it does when a topic trends. The CDF is cached per exponent and a batch is one
    ``searchsorted`` call.
    """

    def __init__(self, n: int, schedule: SkewSchedule, seed: int = 0,
                 order: np.ndarray | None = None) -> None:
        if n < 1:
            raise WorkloadInputError("keys", f"key domain must hold >= 1 key, got {n}")
        self.n = n
        self.schedule = schedule
        self.seed = seed
        self.order = order
        self._cdf: dict[tuple[float, int], np.ndarray] = {}

    def pmf(self, exponent: float, rotation: int = 0) -> np.ndarray:
        """Probability of each key index for one exponent (ranks rotated ``rotation`` keys on)."""
        order = self.order if self.order is not None else (
            np.random.default_rng(self.seed).permutation(self.n))
        ranks = np.empty(self.n)
        ranks[np.roll(order, -(rotation % self.n))] = np.arange(1, self.n + 1)
        w = ranks ** (-exponent)
        return w / w.sum()

    def sample(self, count: int, t_s: float, rng: np.random.Generator) -> np.ndarray:
        key = (self.schedule.exponent_at(t_s), self.schedule.rotation_at(t_s))
        cdf = self._cdf.get(key)
        if cdf is None:
            cdf = np.cumsum(self.pmf(*key))
            cdf /= cdf[-1]
            self._cdf[key] = cdf
        return np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), self.n - 1)
