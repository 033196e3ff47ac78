"""Where a batch's time goes, how long events wait and what balancing bought
(keyshift.control.batch_cost), from hand-made batch records: the stages stack to the batch, the
merged latency quantiles match numpy's on the raw values, and the verdict says in words
when the per-batch fixed cost dominates or the run is too short to judge."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from keyshift.control.batch_cost import (
    STAGES,
    balancer_verdict,
    batch_e2e,
    batch_stages,
    cost_lines,
    kg_counterfactual,
    read_jsonl,
    run_cost,
    run_e2e,
    run_stages,
    stages_line,
)
from keyshift.quantiles import merged_quantiles, sketch
from keyshift.plan import Plan

T0 = 1_700_000_000.0


def task(start: float, dur: float, *, events: int = 100, forked: float | None = None,
         out_kts: list[float] | None = None, **parts: float) -> dict:
    return {"engine": 0, "started_at": T0 + start, "duration_s": dur, "events": events,
            "worker_forked_at": None if forked is None else T0 + forked,
            "out_kts": sketch(out_kts or []), **parts}


def record(batch: int, tasks: list[dict], *, engines_s: float = 1.0, prep_s: float = 0.1,
           writes_s: float = 0.2, metrics_s: float = 0.05, started: float = 0.0,
           committed: float | None = None, **extra) -> dict:
    return {"batch_id": batch, "tasks": tasks, "prep_s": prep_s, "engines_s": engines_s,
            "writes_s": writes_s, "metrics_s": metrics_s, "controller_s": 0.03,
            "started_at": T0 + started, "engines_started_at": T0 + started + prep_s,
            "outputs_committed_at": None if committed is None else T0 + committed,
            "ended_at": T0 + started + prep_s + engines_s + writes_s + metrics_s, **extra}


def test_the_stages_stack_to_the_batch_on_its_critical_task() -> None:
    slow = task(0.5, 0.4, open_s=0.01, fetch_s=0.02, load_s=0.03, save_s=0.04,
                input_wait_s=0.05, operator_s=0.2)
    fast = task(0.4, 0.1, operator_s=0.05)
    rec = record(0, [fast, slow], engines_s=1.0)
    s = batch_stages(rec)
    assert s is not None
    assert s["input"] == pytest.approx(0.4)  # job start (0.1) to the critical task (0.5)
    assert s["state"] == pytest.approx(0.10) and s["operator"] == pytest.approx(0.2)
    assert s["shuffle_fetch"] == pytest.approx(0.05)
    assert s["engine_other"] == pytest.approx(0.05)
    assert s["collect"] == pytest.approx(0.2)  # task ended 0.8 s into a 1.0-s job
    stacked = sum(s[k] for k in STAGES)
    assert stacked == pytest.approx(0.1 + 1.0 + 0.2 + 0.05)  # prep + engines + writes + metrics
    assert s["control"] == pytest.approx(0.03)


def test_a_worker_forked_in_the_batch_is_worker_start_and_a_reused_one_is_not() -> None:
    fresh = batch_stages(record(0, [task(0.6, 0.2, forked=0.35)]))
    reused = batch_stages(record(0, [task(0.6, 0.2, forked=-100.0)]))
    assert fresh["worker_start"] == pytest.approx(0.25) and fresh["input"] == pytest.approx(0.25)
    assert reused["worker_start"] == 0.0 and reused["input"] == pytest.approx(0.5)


def test_spark_and_the_trigger_wait_come_from_progress_and_the_batch_before() -> None:
    rec = record(1, [task(0.5, 0.2)], started=10.0)
    s = batch_stages(rec, {"trigger_s": 2.0, "add_batch_s": 1.6}, prev_ended_at=T0 + 7.0)
    assert s["spark"] == pytest.approx(0.4) and s["trigger_wait"] == pytest.approx(2.6)


def test_a_record_without_the_clocks_has_no_stages() -> None:
    assert batch_stages({"batch_id": 0, "tasks": [{"duration_s": 1.0}]}) is None
    assert run_stages([{"batch_id": 0, "tasks": []}]) == {}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_merged_sketches_match_the_quantiles_of_all_values(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [rng.exponential(scale, size=n) for scale, n in ((1.0, 500), (3.0, 2000), (0.2, 50))]
    got = merged_quantiles([sketch(p) for p in parts], (0.5, 0.95))
    want = np.quantile(np.concatenate(parts), (0.5, 0.95))
    spread = np.quantile(np.concatenate(parts), 0.99) - np.quantile(np.concatenate(parts), 0.01)
    assert np.allclose(got, want, atol=0.03 * spread)
    assert merged_quantiles([None, sketch([])], (0.5,)) is None
    assert merged_quantiles([sketch([2.0, 2.0])], (0.5, 0.95)) == [2.0, 2.0]


def test_end_to_end_is_the_commit_minus_the_producing_events_kafka_times() -> None:
    kts = [T0 + x for x in np.linspace(0.0, 5.0, 101)]
    rec = record(0, [task(0.5, 0.2, out_kts=kts[:50]), task(0.5, 0.2, out_kts=kts[50:])],
                 committed=7.0)
    q = merged_quantiles([batch_e2e(rec)], (0.5, 0.95))
    assert q == pytest.approx([4.5, 6.75], abs=0.05)  # 7 - 2.5 and 7 - 0.25 (p5 of kts)
    assert batch_e2e(record(0, [task(0.5, 0.2)])) is None  # nothing committed: no wait
    e2e = run_e2e([rec, record(1, [task(0.5, 0.2, out_kts=[T0 + 10.0])], committed=11.0)])
    assert 1.0 <= e2e["e2e_p50_s"] <= 4.6 and e2e["e2e_p95_s"] <= 7.0


def window_records(groups: int, engines: int, loads: np.ndarray, routed: Plan,
                   batches: int) -> list[dict]:
    nz = np.flatnonzero(loads)
    return [{"batch_id": b, "load_groups": nz.tolist(),
             "load_counts": loads[nz].astype(int).tolist(), "engines": engines,
             "engine_loads": routed.engine_loads(loads).astype(int).tolist()}
            for b in range(batches)]


def test_the_counterfactual_from_the_records_own_engine_loads() -> None:
    groups = 8
    loads = np.array([400, 100, 100, 100, 100, 100, 100, 100], dtype=float)
    kg = Plan.hashed(groups, 2)
    kg_recs = window_records(groups, 2, loads, kg, 6)
    same = kg_counterfactual(kg_recs, groups, 2)
    assert same["busiest_vs_kg"] == pytest.approx(1.0) and same["windows"] == 3
    balanced = Plan(np.array([0, 1, 1, 1, 1, 0, 0, 1]), 2)  # 600 / 600 at best? 400+100+100
    got = kg_counterfactual(window_records(groups, 2, loads, balanced, 6), groups, 2)
    busiest_kg = kg.engine_loads(loads).max()
    assert got["busiest_vs_kg"] == pytest.approx(balanced.engine_loads(loads).max() / busiest_kg)
    assert got["floor_vs_kg"] <= got["busiest_vs_kg"] + 1e-9
    assert kg_counterfactual([], groups, 2) is None


def test_the_verdict_names_the_fixed_cost_when_the_engines_are_a_small_part() -> None:
    stages = dict.fromkeys(STAGES, 0.0) | {"input": 1.0, "commit": 0.6, "operator": 0.15,
                                           "state": 0.05}
    v = balancer_verdict({"busiest_vs_kg": 0.8, "floor_vs_kg": 0.7, "windows": 5},
                         stages, "dlb-h")
    assert v["engine_share"] == pytest.approx(0.2 / 1.8)
    kg_work = 0.2 / 0.8
    assert v["batch_time_saved"] == pytest.approx((kg_work - 0.2) / (1.8 - 0.2 + kg_work))
    assert v["batch_time_saved_at_most"] < 0.10
    assert "fixed cost dominates" in v["verdict"] and "0.80x KG" in v["verdict"]


def test_the_verdict_when_balancing_pays_and_for_a_kg_run() -> None:
    heavy = dict.fromkeys(STAGES, 0.0) | {"input": 0.2, "operator": 2.0}
    v = balancer_verdict({"busiest_vs_kg": 0.6, "floor_vs_kg": 0.5, "windows": 4}, heavy,
                         "dlb-h")
    assert v["batch_time_saved"] > 0.3 and "balancing pays here" in v["verdict"]
    kg = balancer_verdict({"busiest_vs_kg": 1.0, "floor_vs_kg": 0.5, "windows": 4}, heavy,
                          "kg")
    assert kg["batch_time_saved"] == 0.0
    assert "a balancing policy could save at most" in kg["verdict"]


def test_a_run_too_short_to_judge_says_so_instead_of_a_ratio() -> None:
    stages = dict.fromkeys(STAGES, 0.1)
    v = balancer_verdict({"busiest_vs_kg": 1.0, "floor_vs_kg": 0.9, "windows": 1}, stages,
                         "dlb-h")
    assert v["busiest_vs_kg"] is None and v["verdict"].startswith("too short to judge: 1 ")
    assert balancer_verdict(None, stages, "kg")["verdict"].startswith("too short to judge: 0")


def test_the_run_folder_account_and_its_words(tmp_path: Path) -> None:
    kts = [T0 + 1.0] * 10
    recs = [record(b, [task(0.5, 0.3, operator_s=0.2, out_kts=kts)], started=2.0 * b,
                   committed=2.0 * b + 1.5, load_groups=[0, 1], load_counts=[50, 50],
                   engines=1, engine_loads=[100]) for b in range(8)]
    (tmp_path / "batches.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in recs) + '{"batch_id": 9, "tor')  # torn last
    cost = run_cost(tmp_path, 4, 2, "kg")
    assert set(cost["stages"]) == {*STAGES, "control"}
    assert cost["stages"]["operator"] == pytest.approx(0.2)
    assert cost["balancer"]["verdict"].startswith("the engines' work is")
    lines = cost_lines(cost)
    assert lines[0].startswith("a batch's ") and "operator 0.20 s" in lines[0]
    assert "p95" in lines[1] and lines[2].startswith("balancer: ")
    assert len(read_jsonl(tmp_path / "batches.jsonl")) == 8
    assert read_jsonl(tmp_path / "none.jsonl") == []
    assert stages_line({}) == "no batch with events was timed"


def test_engines_that_ran_in_turns_on_one_worker_stack_as_that_workers_work() -> None:
    """After a scale-in a batch has two engine slots and one core: the engine holding every
    event runs first, the empty one after it on the same worker. The batch waited on both,
    so the first one's operator is the batch's operator, not a long ``input``."""
    busy = {**task(0.3, 1.6, operator_s=1.5, open_s=0.02), "pid": 7}
    empty = {**task(1.95, 0.01, events=0, operator_s=0.0), "pid": 7, "engine": 1}
    s = batch_stages(record(0, [busy, empty], engines_s=1.9))
    assert s["input"] == pytest.approx(0.2)  # job start (0.1) to the chain's first task
    assert s["operator"] == pytest.approx(1.5) and s["state"] == pytest.approx(0.02)
    assert s["engine_other"] == pytest.approx(1.66 - 1.52, abs=1e-6)  # rest and the turn
    assert s["collect"] == pytest.approx(1.9 - 1.86, abs=1e-6)
    assert sum(s[k] for k in STAGES) == pytest.approx(0.1 + 1.9 + 0.2 + 0.05)
    # tasks of other workers (parallel cores) are not the critical path's
    other = {**task(0.3, 1.0, operator_s=0.9), "pid": 8}
    assert batch_stages(record(0, [busy, empty, other], engines_s=1.9))["operator"] == \
        pytest.approx(1.5)
