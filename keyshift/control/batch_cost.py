"""Where a micro-batch's time goes, how long an event waits, and what the balancer bought
(issue 45), from the job's per-batch records (``batches.jsonl``) and Spark's own progress
(``progress.jsonl``): pure, so ``keyshift run --json``, ``status``, the report and the
benches read a run alike.

Why here and not in Spark's UI: a batch's cost that matters for a stateful keyed job is
split between Spark (the Kafka read, the shuffle, scheduling, the Delta commit) and the
engine tasks (the operator, its state, the Python worker), and only the two clocks together
say which part a policy or a trigger setting can move. The stages are additive, on the
batch's critical path (the engine task that ended last, with the tasks its worker ran
before it in the batch: more engine slots than cores run in turns, and an empty slot that
ran last after the one holding every event would otherwise hide that work as ``input``),
so they stack to the batch's wall time:

* ``prepare``: recovery, the plan, a scale-out's wait for its executors, building the job;
* ``input``: from the engine job's submission to the start of the critical engine task: the
  Kafka read, parse and route, the shuffle write, scheduling the two stages;
* ``worker_start``: a Python worker forked for this batch, from its fork to the task's body
  (0 when Spark reused a worker);
* ``shuffle_fetch``: the engine task waiting for its first routed row;
* ``state``: opening the engine's store, the arriving groups' state, loading and saving;
* ``operator``: the operator's own work over the events (``process_many``, summaries);
* ``engine_other``: the rest of the task (reading rows, ordering, handing records back);
* ``collect``: the task's end to the driver holding the small rows (per-group loads);
* ``commit``: the outputs' Delta commits (the control step runs beside them);
* ``bookkeeping``: the metrics row and the staged bookkeeping;
* ``spark``: Spark's own work around ``foreachBatch`` (offsets, WAL, planning, the offset
  commit: ``triggerExecution - addBatch`` of the query's progress);
* ``trigger_wait``: the idle time before the batch started (the trigger's interval).

``control`` (the controller's step) overlaps ``commit`` and is reported beside the stack.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.quantiles import merged_quantiles, merged_sketch, waits

from .floor import key_group_floor

STAGES = ("prepare", "input", "worker_start", "shuffle_fetch", "state", "operator",
          "engine_other", "collect", "commit", "bookkeeping", "spark", "trigger_wait")
ENGINE_WORK = ("state", "operator", "engine_other")  # what a balancer can move
MIN_WINDOWS = 3  # a verdict on fewer statistic windows would be noise


# --- reading the run folder ------------------------------------------------------------------
def read_jsonl(path: Path, key: str = "batch_id") -> list[dict[str, Any]]:
    """A run folder's JSON lines, one per ``key`` (a batch run again after a restart: its
    last line), in ``key`` order; [] when the file is missing. A torn last line (a kill
    mid-write) is skipped."""
    if not path.exists():
        return []
    by: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if key in rec:
            by[int(rec[key])] = rec
    return [by[k] for k in sorted(by)]


# --- one batch -------------------------------------------------------------------------------
def critical_task(rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The engine task that ended last (the batch's critical path), or None without the
    tasks' wall clocks (records before issue 45)."""
    tasks = [t for t in rec.get("tasks") or [] if t.get("started_at") is not None]
    if not tasks:
        return None
    return max(tasks, key=lambda t: t["started_at"] + t.get("duration_s", 0.0))


def critical_chain(rec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The critical task and the tasks of the batch its Python worker ran before it, in
    order: where engine slots outnumber the cores, one worker runs several engines in turn
    and the batch waits on all of them. A task without a ``pid`` is a chain of one."""
    last = critical_task(rec)
    if last is None:
        return []
    pid = last.get("pid")
    if pid is None:
        return [last]
    chain = [t for t in rec.get("tasks") or [] if t.get("pid") == pid
             and t.get("started_at") is not None and t["started_at"] <= last["started_at"]]
    return sorted(chain, key=lambda t: t["started_at"])


def batch_stages(rec: Mapping[str, Any], progress: Mapping[str, Any] | None = None,
                 prev_ended_at: float | None = None) -> dict[str, float] | None:
    """The batch's seconds per stage (:data:`STAGES`, additive; ``control`` beside them);
    None for a record without the clocks they need."""
    chain = critical_chain(rec)
    t_eng = rec.get("engines_started_at")
    if not chain or t_eng is None:
        return None
    first, last = chain[0], chain[-1]
    forked = first.get("worker_forked_at")  # a worker forked for this batch (not reused)
    worker = (max(float(first["started_at"]) - float(forked), 0.0)
              if forked is not None and float(forked) >= float(t_eng) else 0.0)

    def total(*keys: str) -> float:
        return sum(float(t.get(k) or 0.0) for t in chain for k in keys)

    state = total("open_s", "fetch_s", "load_s", "save_s")
    fetch, operator = total("input_wait_s"), total("operator_s")
    last_dur = float(last.get("duration_s", 0.0))
    task_end = float(last["started_at"]) + last_dur
    # the chain's tasks and the turns between them
    busy = float(last["started_at"]) - float(first["started_at"]) + last_dur
    out = {
        "prepare": float(rec.get("prep_s", 0.0)),
        "input": max(float(first["started_at"]) - float(t_eng) - worker, 0.0),
        "worker_start": worker,
        "shuffle_fetch": fetch,
        "state": state,
        "operator": operator,
        "engine_other": max(busy - fetch - state - operator, 0.0),
        "collect": max(float(rec.get("engines_s", 0.0)) - (task_end - float(t_eng)), 0.0),
        "commit": float(rec.get("writes_s", 0.0)),
        "bookkeeping": float(rec.get("metrics_s", 0.0)),
        "spark": 0.0,
        "trigger_wait": 0.0,
        "control": float(rec.get("controller_s", 0.0)),
    }
    if progress is not None:
        out["spark"] = max(float(progress.get("trigger_s", 0.0))
                           - float(progress.get("add_batch_s", 0.0)), 0.0)
    if prev_ended_at is not None and rec.get("started_at") is not None:
        gap = float(rec["started_at"]) - float(prev_ended_at)
        out["trigger_wait"] = max(gap - out["spark"], 0.0)
    return out


def batch_e2e(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A sketch of the batch's end-to-end latencies: the outputs' Delta commit minus the
    Kafka append time of each event that produced a complex event."""
    done = rec.get("outputs_committed_at")
    if done is None:
        return None
    kts = merged_sketch([t.get("out_kts") for t in rec.get("tasks") or []])
    return waits(kts, float(done))


# --- a run -----------------------------------------------------------------------------------
def per_batch_stages(records: Sequence[Mapping[str, Any]],
                     progress: Sequence[Mapping[str, Any]] = ()
                     ) -> list[tuple[int, dict[str, float]]]:
    """(batch id, stages) of every timed batch that took events, in order (the report's
    stacked plot)."""
    by_batch = {int(p["batch_id"]): p for p in progress}
    out = []
    prev_end = None
    for rec in records:
        stages = batch_stages(rec, by_batch.get(int(rec["batch_id"])), prev_end)
        prev_end = rec.get("ended_at")
        if stages is not None and _events(rec) > 0:
            out.append((int(rec["batch_id"]), stages))
    return out


def run_stages(records: Sequence[Mapping[str, Any]],
               progress: Sequence[Mapping[str, Any]] = ()) -> dict[str, float]:
    """Median seconds per batch of every stage over the batches that took events (a batch
    of no input is all fixed cost and would hide what events cost); {} without clocks."""
    rows = [stages for _, stages in per_batch_stages(records, progress)]
    if not rows:
        return {}
    return {k: float(np.median([r[k] for r in rows])) for k in (*STAGES, "control")}


def run_e2e(records: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """``e2e_p50_s``, ``e2e_p95_s`` over every complex event of the run (None: none timed)."""
    q = merged_quantiles([r.get("e2e") or batch_e2e(r) for r in records], (0.5, 0.95))
    return {"e2e_p50_s": q[0] if q else None, "e2e_p95_s": q[1] if q else None}


def _events(rec: Mapping[str, Any]) -> int:
    return int(sum(int(t.get("events", 0)) for t in rec.get("tasks") or [])
               or sum(rec.get("load_counts") or []))


# --- what the balancer bought ----------------------------------------------------------------
def kg_counterfactual(records: Iterable[Mapping[str, Any]], groups: int, per_window: int,
                      plan_for: Callable[[int], Any] | None = None) -> dict[str, Any] | None:
    """The busiest engine's load against KG's on the same measured input, and the floor.

    Per statistic window (``per_window`` consecutive batches): the busiest engine's load as
    the run routed it (the records' ``engine_loads``, else ``plan_for``'s plan over the
    batch's ``load_groups`` / ``load_counts``), KG's plan on the same live engines
    (:meth:`keyshift.plan.Plan.hashed`) and the floor no key-granular plan can beat
    (:func:`keyshift.control.key_group_floor`), each summed over the windows. ``busiest_vs_kg``
    0.8: the run's busiest engines carried 20 % less than KG's would have. A counterfactual
    (the same input, KG's timings not measured); None without load.
    """
    
    windows: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
    for r in records:
        b = int(r["batch_id"])
        loads = np.zeros(groups)
        np.add.at(loads, np.asarray(r.get("load_groups") or [], dtype=np.int64),
                  np.asarray(r.get("load_counts") or [], dtype=np.float64))
        if r.get("engine_loads") is not None and r.get("engines") is not None:
            per_slot, n = np.asarray(r["engine_loads"], dtype=float), int(r["engines"])
        elif plan_for is not None:
            plan = plan_for(b)
            per_slot, n = plan.engine_loads(loads), plan.parallelism
        else:
            continue
        w = int(r.get("window", b // per_window))
        total, slots, n0 = windows.get(w, (np.zeros(groups), np.zeros(0), n))
        if per_slot.size > slots.size:
            slots = np.concatenate([slots, np.zeros(per_slot.size - slots.size)])
        slots[:per_slot.size] += per_slot
        windows[w] = (total + loads, slots, n0)
    run = kg = floor = 0.0
    for total, slots, n in windows.values():
        run += float(slots.max(initial=0.0))
        kg += float(Plan.hashed(groups, n).engine_loads(total).max(initial=0.0))
        floor += key_group_floor(total, n).load
    if kg <= 0:
        return None
    return {"busiest_vs_kg": run / kg, "floor_vs_kg": floor / kg, "windows": len(windows),
            "basis": "a counterfactual from the run's measured per-group loads, not a timed "
                     "KG run"}


def balancer_verdict(vs_kg: Mapping[str, Any] | None, stages: Mapping[str, float],
                     policy: str, min_windows: int = MIN_WINDOWS) -> dict[str, Any]:
    """What balancing bought (or could buy, for a KG run) in batch time, in words.

    With E the critical engine task's work (:data:`ENGINE_WORK`) and B the batch's stacked
    time, KG's busiest engine would have taken E / b (b = ``busiest_vs_kg``), so KG's batch
    is B - E + E / b; balancing saved (E / b - E) of it and any key-granular plan could save
    at most E / b x (1 - floor_vs_kg). Assumes the engines run in one wave (a core per
    engine), as keyshift sizes them.
    """
    base = {"policy": policy, "busiest_vs_kg": None, "floor": None,
            "engine_share": None, "batch_time_saved": None, "batch_time_saved_at_most": None}
    windows = int(vs_kg["windows"]) if vs_kg else 0
    if not vs_kg or windows < min_windows or not stages:
        return {**base, "verdict": (
            f"too short to judge: {windows} statistic window{'s' * (windows != 1)} with "
            f"measured loads and stage clocks ({min_windows} needed)")}
    b, fl = float(vs_kg["busiest_vs_kg"]), float(vs_kg["floor_vs_kg"])
    work = sum(float(stages.get(k, 0.0)) for k in ENGINE_WORK)
    batch = sum(float(stages.get(k, 0.0)) for k in STAGES if k != "trigger_wait")
    if batch <= 0 or b <= 0:
        return {**base, "verdict": "no engine work was timed: nothing to judge"}
    kg_work = work / b
    kg_batch = batch - work + kg_work
    saved = (kg_work - work) / kg_batch
    at_most = kg_work * (1.0 - fl) / kg_batch
    share = work / batch
    kg_run = policy == "kg"
    head = (f"the engines' work is {share:.0%} of a batch here"
            + ("" if kg_run else f" (the busiest engine carried {b:.2f}x KG's load)"))
    if kg_run:
        body = f"a balancing policy could save at most {at_most:.0%} of batch time"
    else:
        body = (f"balancing saved ~{saved:.0%} of KG's batch time and could save at most "
                f"{at_most:.0%}")
    if at_most < 0.10:
        tail = ("Spark's per-batch fixed cost dominates: larger batches or a heavier "
                "operator is where balancing pays")
    elif fl >= 0.95:
        tail = ("the hottest key holds more than an engine's share: only splitting it "
                "(dc, wc with a mergeable operator) goes lower")
    else:
        tail = "balancing pays here"
    return {**base, "busiest_vs_kg": b, "floor": fl, "engine_share": share,
            "batch_time_saved": saved if not kg_run else 0.0,
            "batch_time_saved_at_most": at_most, "verdict": f"{head}: {body}; {tail}"}


def run_cost(run_dir: Path, groups: int, per_window: int, policy: str,
             plan_for: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """The run folder's account for ``keyshift run --json``, ``status`` and the report:
    ``stages`` (median seconds per batch), ``e2e_p50_s`` / ``e2e_p95_s`` and ``balancer``."""
    records = read_jsonl(run_dir / "batches.jsonl")
    progress = read_jsonl(run_dir / "progress.jsonl")
    stages = run_stages(records, progress)
    vs_kg = kg_counterfactual(records, groups, per_window, plan_for)
    return {"stages": stages, **run_e2e(records),
            "balancer": balancer_verdict(vs_kg, stages, policy)}


def folder_cost(run_dir: Path, window_s: float) -> dict[str, Any] | None:
    """:func:`run_cost` of a run folder the job wrote (its ``job.json`` names the groups,
    the policy and the trigger); None when the folder is not on this host."""
    meta_path = run_dir / "job.json"
    if not (run_dir / "batches.jsonl").exists() or not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        groups, policy = int(meta["groups"]), str(meta.get("policy") or "?")
        trigger_s = float(meta.get("trigger_s") or window_s)
    except (ValueError, KeyError, TypeError):
        return None
    return run_cost(run_dir, groups, max(1, round(window_s / max(trigger_s, 1e-9))), policy)


def stages_line(stages: Mapping[str, float]) -> str:
    """The stack in one line, largest first: where a batch's time goes."""
    total = sum(v for k, v in stages.items() if k in STAGES)
    if total <= 0:
        return "no batch with events was timed"
    parts = sorted(((v, k) for k, v in stages.items() if k in STAGES and v >= 0.005),
                   reverse=True)
    return (f"a batch's {total:.2f} s: "
            + ", ".join(f"{k} {v:.2f} s ({v / total:.0%})" for v, k in parts))


def cost_lines(summary: Mapping[str, Any]) -> list[str]:
    """What a run's summary says in words: the stack, the events' wait, the verdict."""
    lines = []
    if summary.get("stages"):
        lines.append(stages_line(summary["stages"]))
    if summary.get("e2e_p50_s") is not None:
        lines.append(f"an event waited {summary['e2e_p50_s']:.2f} s (p50), "
                     f"{summary['e2e_p95_s']:.2f} s (p95) from its Kafka append to its "
                     "complex event's Delta commit")
    if summary.get("balancer"):
        lines.append(f"balancer: {summary['balancer']['verdict']}")
    return lines
