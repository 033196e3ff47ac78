"""What the monitor saw in a window (elastic-cep Eq. 1–2) and what a scaler decided, with
its reason: the record the streaming controller writes to the Delta ``decisions`` table."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np

from keyshift.elastic.errors import ElasticInputError
from keyshift.schemas import SCHEMA_VERSION, TABLES


@dataclass(frozen=True)
class Observation:
    """One window's monitor sample: tuples in, mean per-tuple latency, engines, Δt, sel."""

    in_tuples: float
    lat_s: float
    engines: int
    window_s: float
    sel: float = 1.0

    def __post_init__(self) -> None:
        if not np.isfinite(self.in_tuples) or self.in_tuples < 0:
            raise ElasticInputError("observed.in_tuples", f"must be >= 0, got {self.in_tuples}")
        if not np.isfinite(self.lat_s) or self.lat_s <= 0:
            raise ElasticInputError("observed.lat_s", f"must be > 0 seconds, got {self.lat_s}")
        if self.engines < 1:
            raise ElasticInputError("observed.engines", f"must be >= 1, got {self.engines}")
        if not self.window_s > 0:
            raise ElasticInputError("observed.window_s", f"must be > 0, got {self.window_s}")

    @property
    def capacity(self) -> float:
        """Tuples the engines could process in the window: Δt · ES / Lat (Eq. 1)."""
        return self.window_s * self.engines / self.lat_s

    @property
    def out(self) -> float:
        """Eq. 1: Out = sel · min{Δt / Lat · ES, In}."""
        return self.sel * min(self.capacity, self.in_tuples)

    @property
    def missed(self) -> float:
        """Eq. 2: Miss = In · sel − Out."""
        return self.in_tuples * self.sel - self.out

    @property
    def utilisation(self) -> float:
        """Offered load over capacity; above 1 the window misses tuples."""
        return self.in_tuples / self.capacity


@dataclass(frozen=True)
class ScalingDecision:
    """One window's decision. ``proposed`` is what the policy wanted, ``engines_after`` what
    runs (they differ only in dry-run mode); ``reason`` says why, in words."""

    window: int
    policy: str
    engines_before: int
    proposed: int
    engines_after: int
    reason: str
    dry_run: bool = False
    expected_cost: float | None = None
    cost_std: float | None = None
    planner_ms: float | None = None
    # why the control loop's guardrails kept N (keyshift.control.guard): a scale-out in the
    # cool-off after an ineffective one, a scale-in waiting out its delay; '' = not held
    held: str = ""

    @property
    def action(self) -> str:
        if self.held and self.proposed == self.engines_before:
            return "declined"
        if self.proposed > self.engines_before:
            return "scale_out"
        if self.proposed < self.engines_before:
            return "scale_in"
        return "none"

    def to_record(
        self, run_id: str, batch_id: int, decided_at: _dt.datetime | None = None,
        schema_version: int = SCHEMA_VERSION,
    ) -> dict:
        """A row of the ``decisions`` table (keyshift.schemas.TABLES['decisions'])."""
        reason = self.reason if not self.dry_run else f"dry run, not applied: {self.reason}"
        return {
            "schema_version": schema_version,
            "run_id": run_id,
            "batch_id": int(batch_id),
            "decided_at": decided_at or _dt.datetime.now(_dt.timezone.utc),
            "component": "planner",
            "policy": self.policy,
            "action": self.action,
            "reason": reason,
            "rstd_before": None,
            "rstd_after": None,
            "moved_groups": None,
            "moved_state": None,
            "engines_before": int(self.engines_before),
            "engines_after": int(self.engines_after),
            "plan_version": None,
            # the window's floor (keyshift.control.floor) is the control loop's to record
            **{c.name: None for c in TABLES["decisions"].added},
        }
