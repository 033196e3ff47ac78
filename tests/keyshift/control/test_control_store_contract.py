"""The control store's contract (keyshift.control.store.ControlStore), run against both
implementations: the memory store of the simulator and replay, and the Delta one of the job
(``ControlLog``, Spark, no Kafka). The loop only ever sees the protocol, so whatever one
implementation does here the other must do too: typed records round-trip, a re-executed batch
writes nothing twice, plans are per group count, window loads sum loads and keep the largest
state."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from keyshift.control import (ControlRecord, GuardState, MemoryControlStore, ScalerState,
                              WindowSample)
from keyshift.control.decision import audit_row
from keyshift.plan import Plan


class MemoryImpl:
    """The memory store, with what a test needs to feed and read beside the protocol."""

    def __init__(self) -> None:
        self.store = MemoryControlStore()

    def put_loads(self, batch_id: int, loads: np.ndarray, state: np.ndarray) -> None:
        self.store.loads[batch_id] = loads.astype(float)
        self.store.state[batch_id] = state.astype(float)

    def decisions(self) -> list[dict[str, Any]]:
        return self.store.decisions


class DeltaImpl:
    """``ControlLog``: loads come from ``key_loads`` rows, as the job's executors write them."""

    def __init__(self, spark, cfg) -> None:
        from keyshift.lakehouse.delta import ensure_tables
        from keyshift.streaming.control_store import ControlLog

        ensure_tables(spark, cfg, ["plans", "key_loads", "decisions"])
        self.spark, self.cfg = spark, cfg
        self.run_id = f"contract-{uuid.uuid4().hex[:6]}"
        self.store = ControlLog(spark, cfg, self.run_id)

    def put_loads(self, batch_id: int, loads: np.ndarray, state: np.ndarray) -> None:
        now = datetime.now(UTC)
        rows = [{"run_id": self.run_id, "batch_id": batch_id, "window_start": now, "group": int(g),
                 "engine": 0, "load": int(loads[g]), "state_bytes": int(state[g]),
                 "plan_version": 0} for g in np.flatnonzero(loads)]
        self.store.stager.put("key_loads", rows, batch_id)

    def decisions(self) -> list[dict[str, Any]]:
        from keyshift.lakehouse.delta import read_run

        return [r.asDict() for r in read_run(self.spark, self.cfg, "decisions",
                                             self.run_id).collect()]


@pytest.fixture(params=["memory", pytest.param("delta", marks=pytest.mark.integration)])
def impl(request):
    if request.param == "memory":
        return MemoryImpl()
    return DeltaImpl(request.getfixturevalue("spark"), request.getfixturevalue("spark_config"))


def test_records_round_trip_once_per_batch(impl) -> None:
    store = impl.store
    assert store.records() == []
    full = ControlRecord(4, 2, 1, WindowSample(1.5e9, 1234.0, 0.002, 3),
                         ScalerState((3, 4, 4), 1, 0, 1500.0, 0.0021, 4, 4, "forecast: x"),
                         GuardState(hold_until=9, held_by="ineffective", strikes=1).to_json())
    idle = ControlRecord(5, 3, None, WindowSample(1.5e9 + 10, 0.0, None, 4),
                         ScalerState((), 0, None, 0.0, 0.0, 4, 4, "kept 4 engines"))
    plain = ControlRecord(7, 4, 2)  # a balancer's plan change, no scaler
    for r in (full, idle, plain, full):  # the last: a re-executed batch 4
        store.write_record(r)
    assert sorted(store.records(), key=lambda r: r.batch_id) == [full, idle, plain]


def test_plans_are_kept_once_per_version_and_per_group_count(impl) -> None:
    store = impl.store
    first = Plan(np.array([0, 2, 2, 0]), 3, 1, np.array([True, False, True]))
    second = Plan(np.array([0, 1, 2, 0]), 3, 2, np.array([True, True, True]))
    other = Plan(np.array([0, 1]), 2, 3, np.array([True, True]))  # another group count
    for plan, batch in ((first, 4), (first, 4), (second, 9), (other, 11)):
        store.write_plan(plan, "dlb-h", "why", batch)
    back = sorted(store.plans(4), key=lambda p: p.version)
    assert [p.version for p in back] == [1, 2]
    assert back[0].assignment.tolist() == [0, 2, 2, 0]
    assert back[0].live.tolist() == [True, False, True]
    assert [p.version for p in store.plans(2)] == [3]
    assert store.baseline_plan("lptf", 4) is None  # the batch layer wrote none for this run


def test_window_loads_sum_loads_and_keep_the_largest_state(impl) -> None:
    impl.put_loads(3, np.array([5, 0, 2, 0]), np.array([100, 0, 40, 0]))
    impl.put_loads(4, np.array([1, 7, 0, 0]), np.array([60, 10, 0, 0]))
    impl.put_loads(6, np.array([9, 9, 9, 9]), np.array([1, 1, 1, 1]))  # outside [3, 5)
    loads, state = impl.store.window_loads(3, 5, 4)
    assert loads.tolist() == [6, 7, 2, 0]
    assert state.tolist() == [100, 10, 40, 0]


def test_decisions_are_appended_once_per_batch(impl) -> None:
    store = impl.store
    run_id = getattr(impl, "run_id", "memory")
    row = audit_row(run_id, 7, "balancer", "dlb-h", "rebalance", "imbalance 31% > 10%",
                    0.31, 0.12, 5, 1.5, 4, 4, 2)
    store.write_decisions([row], 7)
    store.write_decisions([row], 7)  # a re-executed batch
    got = impl.decisions()
    assert [(d["batch_id"], d["action"], d["moved_groups"]) for d in got] == [(7, "rebalance", 5)]


def test_measured_migrations_come_back_once_per_batch_in_order(impl) -> None:
    from keyshift.elastic.reconfiguration import MeasuredMigration

    store = impl.store
    assert store.migration_costs() == []
    scale = MeasuredMigration(12, 40, 3_000_000, 1.8, 900.0, True, 2, 3)
    rebalance = MeasuredMigration(5, 6, 120_000, 0.2, 850.0, False, 3, 3, missed=12.0)
    for m in (scale, rebalance, scale):  # the last: a re-executed batch 12
        store.write_migration_cost(m)
    assert store.migration_costs() == [rebalance, scale]
