"""The Delta implementation of the control loop's store: typed records round-trip through
``control_state``, and a re-executed batch writes nothing twice (Spark, no Kafka)."""

from __future__ import annotations

import uuid

import numpy as np

from keyshift.control import ControlRecord, GuardState, ScalerState, WindowSample
from keyshift.plan import Plan


def test_records_and_plans_round_trip_once_per_batch(spark, spark_config) -> None:
    from keyshift.lakehouse.delta import ensure_tables
    from keyshift.streaming.control_store import ControlLog

    ensure_tables(spark, spark_config, ["plans"])
    log = ControlLog(spark, spark_config, f"store-{uuid.uuid4().hex[:6]}")
    assert log.records() == []  # control_state is made on first use
    full = ControlRecord(4, 2, 1, WindowSample(1.5e9, 1234.0, 0.002, 3),
                         ScalerState((3, 4, 4), 1, 0, 1500.0, 0.0021, 4, 4, "forecast: x"),
                         GuardState(hold_until=9, held_by="ineffective", strikes=1).to_json())
    idle = ControlRecord(5, 3, None, WindowSample(1.5e9 + 10, 0.0, None, 4),
                         ScalerState((), 0, None, 0.0, 0.0, 4, 4, "kept 4 engines"))
    plain = ControlRecord(7, 4, 2)  # a balancer's plan change, no scaler
    for r in (full, idle, plain, full):  # the last: a re-executed batch 4
        log.write_record(r)
    # (full's guardrails' state, control_state.guard, comes back with it)
    assert sorted(log.records(), key=lambda r: r.batch_id) == [full, idle, plain]
    plan = Plan(np.array([0, 2, 2, 0]), 3, 1, np.array([True, False, True]))
    log.write_plan(plan, "scaler", "why", 4)
    log.write_plan(plan, "scaler", "why", 4)
    (back,) = log.plans(4)
    assert back.version == 1 and back.live.tolist() == [True, False, True]
    assert back.assignment.tolist() == [0, 2, 2, 0]
