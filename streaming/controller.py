"""The online controller: collect → evaluate → decide → realize → record, once per window.

It follows the shape of the Flink Kubernetes autoscaler: a collector (per-batch group loads
from the engines), an evaluator (imbScore of the window), a decision step (the configured
policy through ``make_policy``), a realizer (a new plan version; the engines migrate in the
next batch) and an event log (``decisions``), with its state in Delta:

* the plan in force for batch b is the plan of the newest decision made at a batch < b
  (``decisions`` + ``plans``), so a restarted job routes a re-executed batch exactly as the
  first attempt did;
* a statistic window is ``batches_per_window`` consecutive batches (round(Δ / trigger)); a
  window's loads come from ``key_loads``, so a decision taken again after a crash sees the
  same histogram and, policies being deterministic, takes the same decision;
* migrations are complete within their batch or are redone by re-executing it (see
  :mod:`streaming.migration`), so nothing else is pending across a restart.

Fixed-plan policies (kg, and the batch layer's lptf / clb from ``plans`` scope
``baseline``) never decide; online ones (dlb-h, dlb-l, elb) decide every window.

With ``[planner] enabled`` the scaler (:mod:`streaming.scaling`) decides the engine count
first, at the same window end. Order, one plan version per window (so recovery needs only
"the newest decision before b"): if the scaler changes N, its plan is the window's plan
change and the balancer does not decide in that window (the scaled plan is already balanced
around the new mean by ELB's mechanics; the balancer sees it in the next window); otherwise
the balancer decides on the unchanged plan as before. Both rows of a window go to
``decisions`` in one append (one Delta commit, one transaction id per batch).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config
from keyshift.metrics import Balance, live_loads
from keyshift.plan import Plan
from keyshift.policies import Decision, Policy, Window, make_policy, policy_class

from .scaling import EngineScaler
from .txn import append

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ONLINE = ("dlb-h", "dlb-l", "elb")
FROM_PLANS = ("lptf", "clb", "uhlb")


class ControllerError(ValueError):
    """Bad controller configuration; the message starts with the config key."""


def policy_params(cfg: Config, name: str) -> dict[str, Any]:
    """The controller config keys this policy's constructor accepts (by parameter name)."""
    c = cfg.controller
    offered = {
        "theta": c.theta,
        # ELB's band in events per engine per window; unset = derived from the mean (no scaling)
        "band": (c.band_low, c.band_high) if c.band_high > 0 else None,
        "min_engines": cfg.engines.min,
        "max_engines": cfg.engines.max,
    }
    accepted = inspect.signature(policy_class(name).__init__).parameters
    return {k: v for k, v in offered.items() if k in accepted and v is not None}


@dataclass
class WindowStats:
    """What the collector accumulates over one statistic window."""

    first_batch: int
    loads: np.ndarray
    state: np.ndarray

    @classmethod
    def empty(cls, first_batch: int, groups: int) -> WindowStats:
        return cls(first_batch, np.zeros(groups), np.zeros(groups))


class Controller:
    """Decides plans for one run; all durable state goes through :class:`ControlLog`."""

    def __init__(
        self, cfg: Config, run_id: str, policy: str, groups: int, engines: int,
        batches_per_window: int, log: ControlLog, params: dict[str, Any] | None = None,
        scaler: EngineScaler | None = None,
    ) -> None:
        if batches_per_window < 1:
            raise ControllerError(f"controller.window_s: gives {batches_per_window} batches")
        self.cfg = cfg
        self.run_id = run_id
        self.policy_name = policy
        self.groups = groups
        self.engines = engines
        self.batches_per_window = batches_per_window
        self.log = log
        self.params = dict(params or {})
        self._policy: Policy | None = None
        self._plans: dict[int, Plan] = {}
        self._decided: list[tuple[int, int]] = []  # (batch_id, plan_version), ascending
        self._window: WindowStats | None = None
        self.decide_s = 0.0
        self.scaler = scaler if scaler is not None else (
            EngineScaler(cfg) if cfg.planner.enabled else None)
        self._models_loaded = False

    # -- state ------------------------------------------------------------------------
    def recover(self, batch_id: int) -> None:
        """Load plans, decisions and the open window's loads from Delta (start / restart)."""
        if self.policy_name in ONLINE:
            self._policy = make_policy(
                self.policy_name, **{**policy_params(self.cfg, self.policy_name), **self.params})
        initial = self._initial_plan()
        if batch_id == 0:
            # nothing can have been decided before the first batch; the write is idempotent
            self._plans, self._decided = {}, []
        else:
            self._plans = {p.version: p for p in self.log.plans(self.groups)}
            self._decided = self.log.plan_changes(before=batch_id)
        if initial.version not in self._plans:
            self.log.write_plan(initial, self.policy_name, "initial plan", batch_id=-1)
            self._plans[initial.version] = initial
        start = batch_id - batch_id % self.batches_per_window
        w = WindowStats.empty(start, self.groups)
        if start < batch_id:
            loads, state = self.log.window_loads(start, batch_id, self.groups)
            w.loads += loads
            w.state = np.maximum(w.state, state)
        self._window = w
        if self.scaler is not None:
            if not self._models_loaded:  # once per process: the registry is slow to reach
                self.scaler.load_models()
                self._models_loaded = True
            self.scaler.recover(self.log.scaler_rows(), batch_id, open_in=float(w.loads.sum()))

    def _initial_plan(self) -> Plan:
        if self.policy_name in FROM_PLANS:
            plan = self.log.baseline_plan(self.policy_name, self.groups)
            if plan is None:
                raise ControllerError(
                    f"controller.policy: no '{self.policy_name}' plan with scope 'baseline' "
                    f"and {self.groups} groups in Delta plans; compute it with the batch layer "
                    "first (keyshift job baseline)"
                )
            return plan
        return Plan.hashed(self.groups, self.engines, version=0)

    def plan_for(self, batch_id: int) -> Plan:
        """The plan that routes batch ``batch_id``."""
        version = 0 if not self._plans else min(self._plans)
        for b, v in self._decided:
            if b < batch_id:
                version = v
        return self._plans[version]

    # -- the loop -------------------------------------------------------------------------
    def collect(self, batch_id: int, loads: np.ndarray, state: np.ndarray,
                engine_s: float | None = None, started: datetime | None = None) -> None:
        """One batch's per-group loads and state sizes; for the scaler also the seconds its
        engine tasks ran and the batch's start (the window's time for the forecasters)."""
        assert self._window is not None, "recover() first"
        self._window.loads += loads
        np.maximum(self._window.state, state, out=self._window.state, where=state > 0)
        if self.scaler is not None:
            self.scaler.collect(float(np.sum(loads)), engine_s, started)

    def end_of_batch(self, batch_id: int) -> Decision | None:
        """Evaluate and decide when ``batch_id`` closes a window; realize and record."""
        if (batch_id + 1) % self.batches_per_window:
            return None
        assert self._window is not None
        t0 = time.perf_counter()
        plan = self.plan_for(batch_id + 1)
        w, self._window = self._window, WindowStats.empty(batch_id + 1, self.groups)
        window = Window(loads=w.loads, state=np.where(w.state > 0, w.state, 0.0))
        rows, decision = [], None
        if self.scaler is not None:
            rows.append(self._scale(batch_id, plan, window))
        if not rows or rows[0]["plan_version"] is None:  # else the window's change is N's
            row, decision = self._balance(batch_id, plan, window, w.loads)
            rows.append(row)
        self.log.write_decisions(rows, batch_id)
        self.decide_s = time.perf_counter() - t0
        return decision

    def _balance(self, batch_id: int, plan: Plan, window: Window, loads: np.ndarray
                 ) -> tuple[dict, Decision | None]:
        """The balancer's row for this window and, when it changes the plan, its decision
        (the new plan version written)."""
        if self._policy is None:
            live = live_loads(plan.assignment, loads, plan.live)
            return self._row(batch_id, "none", f"{self.policy_name} is a fixed plan",
                             Balance.of(live), Balance.of(live), 0, 0.0, plan, plan, None), None
        decision = self._policy.decide(plan, window)
        declined = self._declined(plan, decision, loads)
        if declined:
            return self._row(batch_id, "none", f"declined: {_reason(decision)}; {declined}",
                             decision.before, decision.before, 0, 0.0, plan, plan, None), None
        new = decision.plan
        if decision.changed:
            new = Plan(new.assignment, new.engines, plan.version + 1, new.live)
            decision = Decision(new, decision.moves, decision.before, decision.after,
                                decision.elapsed_ms, decision.info)
            self.log.write_plan(new, self.policy_name, _reason(decision), batch_id)
            self._plans[new.version] = new
            self._decided.append((batch_id, new.version))
        action = _action(plan, new) if decision.changed else "none"
        row = self._row(batch_id, action, _reason(decision), decision.before, decision.after,
                        len(decision.moves), decision.moves.total_state, plan, new,
                        new.version if decision.changed else None)
        return row, decision

    def _declined(self, plan: Plan, decision: Decision, loads: np.ndarray) -> str:
        """Why a rebalance is not worth its migration ('' when it is).

        A micro-batch lasts as long as its most loaded engine, so a move pays only if it
        lowers that engine's load. When one group alone outweighs the mean (a hot key under
        Zipf 1.5), imbScore stays above θ whatever the plan, and the policy would shuffle
        the light engines' groups every window: each shuffle is a migration pause for no
        shorter batch. ``controller.min_gain`` (a fraction; 0 turns the check off) is the
        least relative drop of the maximum engine load a rebalance must promise. Changes of
        the engine count (ELB) are not rebalances and always pass.
        """
        gain = self.cfg.controller.min_gain
        new = decision.plan
        if not gain or not decision.changed or new.parallelism != plan.parallelism:
            return ""
        before = float(live_loads(plan.assignment, loads, plan.live).max(initial=0.0))
        after = float(live_loads(new.assignment, loads, new.live).max(initial=0.0))
        if before <= 0 or (before - after) >= gain * before:
            return ""
        return (f"the most loaded engine would go {before:.0f} -> {after:.0f} "
                f"({(before - after) / before:.1%} < controller.min_gain {gain:.0%})")

    def _scale(self, batch_id: int, plan: Plan, window: Window) -> dict:
        """The scaler's decision for the next window; realizes a change of N as a new plan."""
        assert self.scaler is not None
        index = (batch_id + 1) // self.batches_per_window
        out = self.scaler.end_of_window(batch_id, index, plan, window.loads, self.run_id)
        row = out.row
        if out.info.get("replayed"):  # recorded by an attempt of this batch that crashed
            v = row.get("plan_version")
            if v is not None and int(v) in self._plans:
                self._decided.append((batch_id, int(v)))
            elif v is not None:
                row = {**row, "plan_version": None}
            return row
        if out.plan is not None:
            new = Plan(out.plan.assignment, out.plan.engines, plan.version + 1, out.plan.live)
            self.log.write_plan(new, "scaler", row["reason"].split(" | ")[0], batch_id)
            self._plans[new.version] = new
            self._decided.append((batch_id, new.version))
            row.update(plan_version=new.version, engines_after=new.parallelism,
                       moved_state=float(window.state[plan.assignment != new.assignment].sum()))
        return row

    def _row(self, batch_id: int, action: str, reason: str, before: Balance, after: Balance,
             moved: int, psi: float, old: Plan, new: Plan, version: int | None) -> dict:
        return {
            "run_id": self.run_id, "batch_id": batch_id, "decided_at": datetime.now(UTC),
            "component": "balancer", "policy": self.policy_name, "action": action,
            "reason": reason, "rstd_before": before.rstd, "rstd_after": after.rstd,
            "moved_groups": moved, "moved_state": psi, "engines_before": old.parallelism,
            "engines_after": new.parallelism, "plan_version": version,
        }


def _action(old: Plan, new: Plan) -> str:
    if new.parallelism > old.parallelism:
        return "scale_out"
    if new.parallelism < old.parallelism:
        return "scale_in"
    return "rebalance"


def _reason(d: Decision) -> str:
    why = d.info.get("reason") or d.info.get("stop") or ""
    text = (f"imbScore {d.before.rstd:.1f}% -> {d.after.rstd:.1f}%, "
            f"{len(d.moves)} groups moved, psi={d.moves.total_state:.0f}")
    return f"{text}; {why}" if why else text


class ControlLog:
    """The controller's durable state in Delta: ``plans`` (scope = run id) and ``decisions``."""

    def __init__(self, spark: SparkSession, cfg: Config, run_id: str) -> None:
        self.spark = spark
        self.cfg = cfg
        self.run_id = run_id

    def _read(self, name: str):
        return self.spark.read.format("delta").load(self.cfg.table_path(name))

    def plans(self, groups: int) -> list[Plan]:
        from pyspark.sql import functions as F

        rows = self._read("plans").where(F.col("scope") == self.run_id).collect()
        return [_plan(r) for r in rows if r.groups == groups]

    def baseline_plan(self, policy: str, groups: int) -> Plan | None:
        from pyspark.sql import functions as F

        rows = (
            self._read("plans")
            .where((F.col("scope") == "baseline") & (F.col("policy") == policy)
                   & (F.col("groups") == groups))
            .orderBy(F.col("version").desc(), F.col("created_at").desc()).limit(1).collect()
        )
        return _plan(rows[0]) if rows else None

    def plan_changes(self, before: int) -> list[tuple[int, int]]:
        from pyspark.sql import functions as F

        rows = (
            self._read("decisions")
            .where((F.col("run_id") == self.run_id) & (F.col("batch_id") < before)
                   & F.col("plan_version").isNotNull())
            .select("batch_id", "plan_version").collect()
        )
        return sorted((int(r.batch_id), int(r.plan_version)) for r in rows)

    def window_loads(self, start: int, end: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
        from pyspark.sql import functions as F

        rows = (
            self._read("key_loads")
            .where((F.col("run_id") == self.run_id) & (F.col("batch_id") >= start)
                   & (F.col("batch_id") < end))
            .groupBy("group").agg(F.sum("load").alias("load"), F.max("state_bytes").alias("s"))
            .collect()
        )
        loads, state = np.zeros(groups), np.zeros(groups)
        for r in rows:
            if 0 <= r.group < groups:
                loads[r.group] = r.load
                state[r.group] = r.s or 0
        return loads, state

    def write_plan(self, plan: Plan, policy: str, reason: str, batch_id: int) -> None:
        row = {
            "version": plan.version, "scope": self.run_id, "created_at": datetime.now(UTC),
            "policy": policy, "groups": plan.groups, "engines": plan.engines,
            "live": plan.live.tolist(), "assignment": plan.assignment.tolist(),
            "reason": reason,
        }
        append(self.spark, self.cfg, "plans", [row], f"{self.run_id}/plans", batch_id + 1)

    def write_decisions(self, rows: list[dict], batch_id: int) -> None:
        """A window's rows (scaler, balancer) in one idempotent append."""
        append(self.spark, self.cfg, "decisions", rows, f"{self.run_id}/decisions", batch_id)

    def scaler_rows(self) -> list[dict]:
        """This run's scaler rows of ``decisions``: the scaler's durable state."""
        from pyspark.sql import functions as F

        rows = (
            self._read("decisions")
            .where((F.col("run_id") == self.run_id) & (F.col("component") == "scaler"))
            .collect()
        )
        return [r.asDict() for r in rows]


def _plan(r: Any) -> Plan:
    return Plan(np.asarray(r.assignment, dtype=np.int64), int(r.engines), int(r.version),
                np.asarray(r.live, dtype=bool))
