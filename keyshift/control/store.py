"""The loop's durable state behind one narrow protocol, with typed records (as the Flink
autoscaler's ``AutoScalerStateStore``): plans, plan changes, window loads and the scaler's
state. The ``decisions`` audit log is written through the store too, but only written: the
loop never reads it back, so its wording can change freely.

Implementations: :class:`MemoryControlStore` here (simulator, replay, tests) and the Delta
one of the Spark job (``keyshift.streaming.control_store.ControlLog``, table ``control_state``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from keyshift.elastic.reconfiguration import MeasuredMigration
from keyshift.plan import Plan

from .window import WindowSample


@dataclass(frozen=True)
class ScalerState:
    """The scaler after a window's decision: its path over the horizon, the step reached,
    windows since the last change of N, the forecast (In, Lat) of the window just entered
    (the θ2 check of the next window compares against it), and the decision itself
    (proposed / applied engine count and its reason) so a re-executed batch takes it again
    instead of deciding on other timings."""

    path: tuple[int, ...]
    position: int
    since_change: int | None
    fc_in: float
    fc_lat: float
    proposed: int
    engines_after: int
    reason: str


@dataclass(frozen=True)
class ControlRecord:
    """What one window's end left behind (key: the batch that closed the window): the plan
    version it put in force (None: no change), and with a scaler its sample and state and
    the guardrails' state."""

    batch_id: int
    window: int
    plan_version: int | None = None
    sample: WindowSample | None = None
    scaler: ScalerState | None = None
    # the guardrails' state after the window (keyshift.control.guard.GuardState as JSON)
    guard: str | None = None


class ControlStore(Protocol):
    """Durable state of one run's control loop."""

    def plans(self, groups: int) -> list[Plan]:
        """Every plan version of this run with ``groups`` groups."""

    def baseline_plan(self, policy: str, groups: int) -> Plan | None:
        """The batch layer's newest plan of ``policy`` (lptf, clb, uhlb), if any."""

    def write_plan(self, plan: Plan, policy: str, reason: str, batch_id: int) -> None:
        """Store a plan version decided at ``batch_id`` (-1: the initial plan); idempotent."""

    def window_loads(self, start: int, end: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-group loads (summed) and state sizes (max) of batches [start, end)."""

    def records(self) -> list[ControlRecord]:
        """This run's control records, any order."""

    def write_record(self, record: ControlRecord) -> None:
        """Store a window's record; idempotent per ``record.batch_id``."""

    def write_decisions(self, rows: list[dict[str, Any]], batch_id: int) -> None:
        """Append a window's audit rows (``decisions``); idempotent per ``batch_id``."""

    def migration_costs(self) -> list[MeasuredMigration]:
        """This run's measured migrations (the learned reconfiguration cost's data)."""

    def write_migration_cost(self, m: MeasuredMigration) -> None:
        """Store a measured migration; idempotent per ``m.batch_id``."""


class MemoryControlStore:
    """The store in memory: the simulator's, the replay's and the tests'. ``loads`` holds
    per-batch group loads (what the job's executors write to ``key_loads``)."""

    def __init__(self) -> None:
        self.plans_written: list[Plan] = []
        self.decisions: list[dict[str, Any]] = []
        self.loads: dict[int, np.ndarray] = {}
        self.state: dict[int, np.ndarray] = {}
        self.baselines: dict[tuple[str, int], Plan] = {}
        self._records: dict[int, ControlRecord] = {}
        self._migrations: dict[int, MeasuredMigration] = {}

    def plans(self, groups: int) -> list[Plan]:
        return [p for p in self.plans_written if p.groups == groups]

    def baseline_plan(self, policy: str, groups: int) -> Plan | None:
        return self.baselines.get((policy, groups))

    def write_plan(self, plan: Plan, policy: str, reason: str, batch_id: int) -> None:
        if all(p.version != plan.version for p in self.plans_written):
            self.plans_written.append(plan)

    def window_loads(self, start: int, end: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
        loads, state = np.zeros(groups), np.zeros(groups)
        for b in range(start, end):
            if b in self.loads:
                loads += self.loads[b]
            if b in self.state:
                state = np.maximum(state, self.state[b])
        return loads, state

    def records(self) -> list[ControlRecord]:
        return list(self._records.values())

    def write_record(self, record: ControlRecord) -> None:
        self._records[record.batch_id] = record

    def write_decisions(self, rows: list[dict[str, Any]], batch_id: int) -> None:
        if all(r["batch_id"] != batch_id for r in self.decisions):  # Delta's txn skip
            self.decisions.extend(rows)

    def migration_costs(self) -> list[MeasuredMigration]:
        return [self._migrations[b] for b in sorted(self._migrations)]

    def write_migration_cost(self, m: MeasuredMigration) -> None:
        self._migrations[m.batch_id] = m
