"""The control loop's store in Delta (:class:`keyshift.control.ControlStore` for the job).

* ``plans`` (scope = run id): every plan version of the run; ``scope = 'baseline'`` holds
  the batch layer's plans a fixed-plan policy starts from;
* ``key_loads``: the executors' per-batch group loads, read back for a window that a
  restart cut in two;
* ``control_state``: one typed row per window end that changed the plan or ran the scaler
  (plan version put in force, the scaler's sample and state). This is what a restart reads;
* ``decisions``: the audit log, appended once per window and never read here;
* ``migration_costs``: each realized migration as measured (groups, bytes, pause, input
  rate), what the learned reconfiguration cost is fitted on
  (:mod:`keyshift.elastic.reconfiguration`), read back on restart.

Every write goes to the :class:`keyshift.lakehouse.delta.Stager` the log is built with. The
job gives it its staged bookkeeping, which the job flushes explicitly, once per
``warehouse.commit_interval_s`` and before a restart reads (:mod:`keyshift.streaming.staging`;
Flink's autoscaler state store buffers and flushes the same way); alone, the log appends
each write at once. Either way a re-executed batch writes nothing twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config
from keyshift.control import ControlRecord, ScalerState, WindowSample
from keyshift.elastic.reconfiguration import MeasuredMigration
from keyshift.lakehouse.delta import (
    RunAppends,
    Stager,
    ensure_tables,
    plan_of,
    plan_row,
    read_run,
    read_table,
)
from keyshift.plan import Plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_TABLE = "control_state"
COST_TABLE = "migration_costs"


class ControlLog:
    """The Delta implementation of :class:`keyshift.control.ControlStore` for one run."""

    def __init__(self, spark: SparkSession, cfg: Config, run_id: str,
                 stager: Stager | None = None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id
        # the job's staged bookkeeping; alone, an appender that looks before every append,
        # so each row still lands once
        self.stager = stager if stager is not None else RunAppends(spark, cfg, run_id)
        self._state_ready = False
        self._costs_ready = False

    def _ensure_state(self) -> None:
        """``control_state`` is the loop's own table: made on first use, whoever runs it."""
        if not self._state_ready:
            ensure_tables(self.spark, self.cfg, [STATE_TABLE])
            self._state_ready = True

    # -- plans --------------------------------------------------------------------------------
    def plans(self, groups: int) -> list[Plan]:
        from pyspark.sql import functions as F

        rows = read_table(self.spark, self.cfg, "plans").where(
            F.col("scope") == self.run_id).collect()
        return [plan_of(r) for r in rows if r.groups == groups]

    def baseline_plan(self, policy: str, groups: int) -> Plan | None:
        from pyspark.sql import functions as F

        rows = (
            read_table(self.spark, self.cfg, "plans")
            .where((F.col("scope") == "baseline") & (F.col("policy") == policy)
                   & (F.col("groups") == groups))
            .orderBy(F.col("version").desc(), F.col("created_at").desc()).limit(1).collect()
        )
        return plan_of(rows[0]) if rows else None

    def write_plan(self, plan: Plan, policy: str, reason: str, batch_id: int) -> None:
        row = [plan_row(plan, self.run_id, policy, reason)]
        self.stager.put("plans", row, batch_id,
                        match={"scope": self.run_id, "version": plan.version})

    # -- window loads -------------------------------------------------------------------------
    def window_loads(self, start: int, end: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
        from pyspark.sql import functions as F

        rows = (
            read_run(self.spark, self.cfg, "key_loads", self.run_id)
            .where((F.col("batch_id") >= start) & (F.col("batch_id") < end))
            .groupBy("group").agg(F.sum("load").alias("load"), F.max("state_bytes").alias("s"))
            .collect()
        )
        loads, state = np.zeros(groups), np.zeros(groups)
        for r in rows:
            if 0 <= r.group < groups:
                loads[r.group] = r.load
                state[r.group] = r.s or 0
        return loads, state

    # -- typed control state ------------------------------------------------------------------
    def records(self) -> list[ControlRecord]:
        self._ensure_state()
        rows = read_run(self.spark, self.cfg, STATE_TABLE, self.run_id).collect()
        return [record_of(r.asDict()) for r in rows]

    def write_record(self, record: ControlRecord) -> None:
        self._ensure_state()
        row = [row_of(self.run_id, record)]
        self.stager.put(STATE_TABLE, row, record.batch_id)

    def write_decisions(self, rows: list[dict], batch_id: int) -> None:
        """A window's rows (scaler, balancer) in one idempotent append; in the job, staged
        and committed with the run's other bookkeeping (keyshift.streaming.staging)."""
        self.stager.put("decisions", rows, batch_id)

    # -- measured migrations ------------------------------------------------------------------
    def _ensure_costs(self) -> None:
        if not self._costs_ready:
            ensure_tables(self.spark, self.cfg, [COST_TABLE])
            self._costs_ready = True

    def migration_costs(self) -> list[MeasuredMigration]:
        self._ensure_costs()
        rows = read_run(self.spark, self.cfg, COST_TABLE, self.run_id).collect()
        # a batch re-executed after a crash may have staged its row again: one per batch
        by_batch = {int(r.batch_id): MeasuredMigration.of(r.asDict()) for r in rows}
        return [by_batch[b] for b in sorted(by_batch)]

    def write_migration_cost(self, m: MeasuredMigration) -> None:
        self._ensure_costs()
        row = {"run_id": self.run_id, **m.row(), "written_at": datetime.now(UTC)}
        # staged with the batch's other bookkeeping (a restart commits it before the loop
        # reads the costs back): appended here, it held its batch 0.5-3.5 s for one commit
        self.stager.put(COST_TABLE, [row], m.batch_id)


def row_of(run_id: str, r: ControlRecord) -> dict[str, Any]:
    """A ``control_state`` row (keyshift.schemas.TABLES['control_state'])."""
    s, st = r.sample, r.scaler
    return {
        "run_id": run_id, "batch_id": r.batch_id, "window": r.window,
        "plan_version": r.plan_version,
        "obs_t": s.t if s else None, "obs_in": s.in_tuples if s else None,
        "obs_lat_s": s.lat_s if s else None, "obs_engines": s.engines if s else None,
        "path": list(st.path) if st else None, "position": st.position if st else None,
        "since_change": st.since_change if st else None,
        "fc_in": st.fc_in if st else None, "fc_lat": st.fc_lat if st else None,
        "proposed": st.proposed if st else None,
        "engines_after": st.engines_after if st else None,
        "reason": st.reason if st else None, "written_at": datetime.now(UTC),
        "guard": r.guard,
    }


def record_of(d: dict[str, Any]) -> ControlRecord:
    """The typed record of a ``control_state`` row."""
    sample = None if d.get("obs_engines") is None else WindowSample(
        float(d["obs_t"]), float(d["obs_in"]),
        None if d.get("obs_lat_s") is None else float(d["obs_lat_s"]), int(d["obs_engines"]))
    scaler = None if d.get("proposed") is None else ScalerState(
        tuple(int(e) for e in d.get("path") or ()), int(d["position"] or 0),
        None if d.get("since_change") is None else int(d["since_change"]),
        float(d["fc_in"] or 0.0), float(d["fc_lat"] or 0.0), int(d["proposed"]),
        int(d["engines_after"]), d.get("reason") or "")
    version = d.get("plan_version")
    return ControlRecord(int(d["batch_id"]), int(d["window"]),
                         None if version is None else int(version), sample, scaler,
                         d.get("guard"))

