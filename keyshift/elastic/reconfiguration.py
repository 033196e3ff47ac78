"""The reconfiguration cost RC learned from the job's own migrations (issue 27, point 2).

Eq. 11 prices a change of the engine count with one constant, ``planner.rc``, whatever a
change costs on this job. What a change really costs is the pause of its migration: the
moved key groups wait while their state moves (dlb §3.3, elastic-cep §III-D), and the
events that arrive meanwhile are late — pause seconds × events/s, priced at MC per missed
tuple like every other miss of Eq. 11. The job measures every migration (moved groups,
state bytes, pause); :class:`ReconfigurationCost` fits the pause per moved group and per
moved byte on those measurements and turns it into

- ``rc(rate)``: the planner's RC for a change of N at input rate ``rate`` (events/s), the
  pause of a typical change of N times the rate times MC;
- ``min_gain(window_s)``: the balancer's least relative gain, the share of a window a
  typical rebalance pauses (a rebalance that lowers the hottest engine's load by less than
  that share of the window costs more time than it saves).

The configured constants are the prior: with n measured changes the learned value weighs
n / (n + ``prior_changes``), so a first, odd migration (a cold cache, a slow disk) moves RC
only part of the way, and a job that never changed N plans exactly as configured. The Flink
Kubernetes operator's autoscaler does the same with its measured restart time
(``job.autoscaler.restart.time`` as the prior, the observed restarts once it has them).

The measurements are kept in the control store (:meth:`keyshift.control.ControlStore.migration_costs`),
so a restarted job plans with what it learned before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

MIN_GAIN_CAP = 0.5
"""The learned ``min_gain`` never exceeds this: LoopSettings requires < 1, and a balancer that
may only act on a halving of the hottest engine's load has stopped balancing."""


@dataclass(frozen=True)
class MeasuredMigration:
    """One realized plan change as the job measured it: moved key groups and state bytes, the
    seconds the migration added to its batch (the pause), the input rate while it ran
    (events/s), whether it changed the engine count (else it was a rebalance), and the
    events the pause made late (None: every event that arrived meanwhile, pause × rate, as
    in the job, where a moved group's events wait for its state; a model with slack, as
    the per-window replay, counts only those its engines could not catch up on)."""

    batch_id: int
    groups: int
    bytes: int
    pause_s: float
    rate: float
    scale: bool
    engines_before: int = 0
    engines_after: int = 0
    missed: float | None = None

    def __post_init__(self) -> None:
        if self.missed is None:
            object.__setattr__(self, "missed", self.pause_s * self.rate)
        for name in ("groups", "bytes", "pause_s", "rate", "missed"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"migration {name}: must be finite and >= 0, got {value!r}")

    def row(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, row: dict) -> MeasuredMigration:
        return cls(int(row["batch_id"]), int(row["groups"]), int(row["bytes"]),
                   float(row["pause_s"]), float(row["rate"]), bool(row["scale"]),
                   int(row.get("engines_before") or 0), int(row.get("engines_after") or 0),
                   None if row.get("missed") is None else float(row["missed"]))


@dataclass(frozen=True)
class PauseFit:
    """pause_s ≈ fixed_s + per_group_s · groups + per_mb_s · MB, each term >= 0."""

    fixed_s: float
    per_group_s: float
    per_mb_s: float

    def pause(self, groups: float, nbytes: float) -> float:
        return self.fixed_s + self.per_group_s * groups + self.per_mb_s * nbytes / 1e6


def fit_pause(migrations: Sequence[MeasuredMigration]) -> PauseFit | None:
    """Non-negative least squares of the pause on (1, moved groups, moved MB); with fewer
    than three migrations, or when groups and bytes do not vary, the mean pause as a fixed
    term. None without a migration."""
    if not migrations:
        return None
    pause = np.array([m.pause_s for m in migrations])
    a = np.array([[1.0, m.groups, m.bytes / 1e6] for m in migrations])
    if len(migrations) < 3 or np.linalg.matrix_rank(a) < 2:
        return PauseFit(float(pause.mean()), 0.0, 0.0)
    from scipy.optimize import nnls

    coef, _ = nnls(a, pause)
    return PauseFit(*(float(c) for c in coef))


class ReconfigurationCost:
    """RC and min_gain from measured migrations, the configured constants as the prior."""

    def __init__(self, prior_rc: float, mc: float, prior_min_gain: float = 0.0,
                 prior_changes: float = 3.0) -> None:
        if prior_rc < 0 or mc < 0 or not 0 <= prior_min_gain < 1 or prior_changes < 0:
            raise ValueError("reconfiguration cost: need prior_rc >= 0, mc >= 0, "
                             "0 <= prior_min_gain < 1, prior_changes >= 0")
        self.prior_rc = float(prior_rc)
        self.mc = float(mc)
        self.prior_min_gain = float(prior_min_gain)
        self.prior_changes = float(prior_changes)
        self.migrations: list[MeasuredMigration] = []
        self._fit: PauseFit | None = None

    def observe(self, migrations: Iterable[MeasuredMigration]) -> ReconfigurationCost:
        """Add measurements (a batch already seen is replaced, as a re-executed batch's) and
        refit the pause."""
        by_batch = {m.batch_id: m for m in self.migrations}
        by_batch.update({m.batch_id: m for m in migrations})
        self.migrations = [by_batch[b] for b in sorted(by_batch)]
        self._fit = fit_pause(self.migrations)
        return self

    @property
    def pause_fit(self) -> PauseFit | None:
        return self._fit

    def _weight(self, n: int) -> float:
        return n / (n + self.prior_changes) if n + self.prior_changes > 0 else 1.0

    def _typical(self, scale: bool) -> tuple[int, float, float]:
        """How many migrations of this kind, and their mean moved groups and bytes."""
        kind = [m for m in self.migrations if m.scale == scale]
        if not kind:
            return 0, 0.0, 0.0
        return (len(kind), float(np.mean([m.groups for m in kind])),
                float(np.mean([m.bytes for m in kind])))

    def miss_share(self) -> float:
        """Of the events that arrived during the pauses, the share the pauses made late (1 in
        the job; less where the engines catch up within the window)."""
        arrived = sum(m.pause_s * m.rate for m in self.migrations)
        if arrived <= 0:
            return 1.0
        return min(sum(m.missed for m in self.migrations) / arrived, 1.0)

    def learned_rc(self, rate: float) -> float | None:
        """MC × rate × the fitted pause of a typical change of N × the share of its events
        a pause makes late; None before a change of N was seen."""
        n, groups, nbytes = self._typical(scale=True)
        if n == 0 or self._fit is None:
            return None
        return self.mc * max(rate, 0.0) * self._fit.pause(groups, nbytes) * self.miss_share()

    def rc(self, rate: float) -> float:
        """The planner's RC at input rate ``rate`` (events/s): the prior until a change of N
        was measured, then shrunk towards it by n / (n + prior_changes)."""
        learned = self.learned_rc(rate)
        if learned is None:
            return self.prior_rc
        w = self._weight(self._typical(scale=True)[0])
        return (1.0 - w) * self.prior_rc + w * learned

    def min_gain(self, window_s: float) -> float:
        """The balancer's least relative gain: the share of a window a typical rebalance
        pauses its groups for, shrunk towards the configured value like RC."""
        n, groups, nbytes = self._typical(scale=False)
        if n == 0 or self._fit is None or window_s <= 0:
            return self.prior_min_gain
        learned = min(self._fit.pause(groups, nbytes) / window_s, MIN_GAIN_CAP)
        w = self._weight(n)
        return min((1.0 - w) * self.prior_min_gain + w * learned, MIN_GAIN_CAP)

    def summary(self, rate: float, window_s: float) -> dict:
        fit = self._fit
        return {"changes_seen": self._typical(scale=True)[0],
                "rebalances_seen": self._typical(scale=False)[0],
                "pause_fixed_s": fit.fixed_s if fit else None,
                "pause_per_group_s": fit.per_group_s if fit else None,
                "pause_per_mb_s": fit.per_mb_s if fit else None,
                "miss_share": self.miss_share(),
                "rc": self.rc(rate), "prior_rc": self.prior_rc,
                "min_gain": self.min_gain(window_s), "prior_min_gain": self.prior_min_gain}
