"""The simulator calibrated on a run (``keyshift simulate --calibrate``): the list schedule,
the least-squares fit on synthetic runs made by known cost terms, the replay, the projection
rows, the command's error paths; and one real run of the heavy operator calibrated end to
end (integration)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.plan import Plan
from keyshift.sim.calibrate import (
    CalibrationError,
    CostModel,
    calibrate,
    fit,
    list_schedule,
    policies_for,
    read_run,
)
from keyshift.sim.calibrate.replay import evolve
from keyshift.sim.calibrate.run import counted_window_end

ROOT = Path(__file__).resolve().parents[3]

TRUE = CostModel(cores=2, task_fixed_s=0.02, event_s=4e-4, restore_group_s=2e-3,
                 stage_fixed_s=0.6, stage_event_s=1e-4, batch_fixed_s=0.5, migration_s=0.3,
                 controller_s=0.1, commit_share=0.7)


def write_run(home: Path, run_id: str, *, app: str = "heavy", policy: str = "kg",
              engines: int = 4, cores: int = 2, groups: int = 64, batches: int = 24,
              per_window: int = 2, model: CostModel = TRUE, noise: float = 0.0,
              sizes: list[int] | None = None, migrate_every: int = 0, seed: int = 0,
              load_fields: bool = True, closes: set[int] | None = None) -> Path:
    """A run folder as ``keyshift run`` writes it, its times made by ``model`` (+ noise):
    Zipf loads over ``groups``, KG's plan, a migration of a few groups every
    ``migrate_every`` batches (driver side only: the plan stays KG's), a background commit
    of 0.5 s every fifth batch (half of its cost in the engine stage, half after). With
    ``closes`` the records say which batches closed a window (a timed clock's), else the
    windows are every ``per_window`` batches as before that field."""
    rng = np.random.default_rng(seed)
    path = home / "runs" / run_id
    path.mkdir(parents=True)
    controller = load_config(env={}).controller.model_dump()
    (path / "job.json").write_text(json.dumps({
        "run_id": run_id, "app": app, "policy": policy, "groups": groups, "engines": engines,
        "topic": "t", "trigger_s": 1.0, "app_params": {}, "per_window": per_window,
        "controller": controller, "policy_params": {}, "planner": False, "cores": cores}))
    plan = Plan.hashed(groups, engines)
    weights = 1.0 / np.arange(1, groups + 1) ** 0.8
    weights /= weights.sum()
    lines = []
    for b in range(batches):
        n = sizes[b % len(sizes)] if sizes else 2000
        loads = rng.multinomial(n, weights).astype(float)
        per_engine = np.bincount(plan.assignment, weights=loads, minlength=engines)
        moved = 3 if migrate_every and b % migrate_every == migrate_every - 1 else 0
        restored = np.zeros(engines)
        if moved:
            restored[0] = moved
        fetch = model.restore_group_s * restored
        task_s = model.task_s(per_engine) + fetch
        task_s = task_s * (1 + noise * rng.standard_normal(engines))
        commit = 0.5 if b % 5 == 4 else 0.0
        engines_s = (model.stage_fixed_s + model.stage_event_s * n / cores
                     + list_schedule(task_s, cores)[0] + model.commit_share * commit / 2)
        rest = (model.batch_fixed_s + model.migration_s * (moved > 0)
                + model.controller_s * (b in closes if closes is not None
                                        else counted_window_end(b, per_window))
                + model.commit_share * commit / 2 + (3.0 if b == 0 else 0.0))
        rest *= 1 + noise * rng.standard_normal()
        nz = np.flatnonzero(loads)
        rec = {
            "batch_id": b, "slots": engines, "prep_s": 0.1, "engines_s": engines_s,
            "controller_s": 0.001, "writes_s": 0.3, "metrics_s": 0.001,
            "duration_s": engines_s + rest, "moved_groups": moved, "moved_bytes": moved * 100,
            "split_groups": [], "committed_staged": {"metrics": commit, "key_loads": 0.2} if commit else {},
            "tasks": [{"engine": e, "events": int(per_engine[e]), "duration_s": float(task_s[e]),
                       "restored": int(restored[e]), "restored_bytes": int(restored[e] * 100),
                       "fetch_s": float(fetch[e]), "state_bytes": 1000} for e in range(engines)],
        }
        if closes is not None:
            rec["window_closed"] = b in closes
        if load_fields:
            rec["load_groups"] = nz.tolist()
            rec["load_counts"] = loads[nz].astype(int).tolist()
        lines.append(json.dumps(rec))
    (path / "batches.jsonl").write_text("\n".join(lines) + "\n")
    return path


# -- the list schedule ----------------------------------------------------------------------
def test_list_schedule_queues_tasks_when_engines_exceed_cores() -> None:
    # 2 cores: task 0 (3 s) holds core 0, tasks 1-3 (1 s each) run one after another on core 1
    end, where = list_schedule([3.0, 1.0, 1.0, 1.0], 2)
    assert end == 3.0 and where.tolist() == [0, 1, 1, 1]
    # five equal tasks on two cores: three rounds
    assert list_schedule([1.0] * 5, 2)[0] == 3.0
    # in task order, not longest first: the long task last waits for a free core
    assert list_schedule([1.0, 1.0, 4.0], 2)[0] == 5.0
    # as many cores as tasks: the longest task
    assert list_schedule([0.5, 2.0, 1.0], 8)[0] == 2.0
    with pytest.raises(ValueError):
        list_schedule([1.0], 0)


# -- the fit --------------------------------------------------------------------------------
def test_fit_recovers_known_cost_terms(tmp_path) -> None:
    path = write_run(tmp_path, "r", sizes=[1000, 2000, 3000, 1500], migrate_every=4)
    run = read_run(path)
    assert run.cores == 2 and run.per_window == 2 and run.timed_by == "duration_s"
    m = fit(run.batches, run.cores)
    assert m.s_in_fitted and not m.per_group_fitted
    for name in ("task_fixed_s", "event_s", "restore_group_s", "stage_fixed_s",
                 "stage_event_s", "batch_fixed_s", "migration_s", "controller_s", "commit_share"):
        assert getattr(m, name) == pytest.approx(getattr(TRUE, name), rel=0.02, abs=1e-6), name
    assert m.warmup_s == pytest.approx(3.0, rel=0.02)


def test_the_runs_own_window_closes_are_the_fits_and_the_replays(tmp_path) -> None:
    """Timed windows close where the batches' times put them, not every per_window-th
    batch: the fit prices the controller's step at the recorded closes, and the replayed
    loop decides there, so a replay of an exact model routes as the run did."""
    closes = {1, 2, 6, 7, 8, 13, 19, 23}
    path = write_run(tmp_path, "r", sizes=[1000, 2000, 3000, 1500], closes=closes)
    run = read_run(path)
    assert {b.batch_id for b in run.batches if b.closes_window} == closes
    m = fit(run.batches, run.cores)
    assert m.controller_s == pytest.approx(TRUE.controller_s, rel=0.02)
    out = calibrate(tmp_path, "r", [8])
    assert out["calibration"]["batch_p95_rel_err"] < 1e-6
    work = evolve(run, "dlb-h", run.engines)
    assert [w.window_end for w in work] == [b.batch_id in closes for b in run.batches]


def test_fit_with_noise_stays_close_and_even_batches_fold_the_input_term(tmp_path) -> None:
    run = read_run(write_run(tmp_path, "r", noise=0.05, batches=40, seed=3))
    m = fit(run.batches, run.cores)
    assert not m.s_in_fitted and m.stage_event_s == 0.0
    assert m.event_s == pytest.approx(TRUE.event_s, rel=0.1)
    # the input stage's per-event work at 2,000 events lands in S0
    assert m.stage_fixed_s == pytest.approx(TRUE.stage_fixed_s + TRUE.stage_event_s * 1000,
                                            rel=0.15)


# -- calibration and projection ---------------------------------------------------------------
def test_calibration_of_an_exact_model_has_no_error_and_the_replay_routes_as_the_run(
        tmp_path) -> None:
    write_run(tmp_path, "r", sizes=[1000, 2000, 3000, 1500])
    out = calibrate(tmp_path, "r", [8])
    cal = out["calibration"]
    for key in ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err"):
        assert cal[key] < 1e-6, key
    assert cal["engine_events_rel_err"] == 0.0
    assert cal["holdout"]["fit_batches"] == 12 and cal["holdout"]["eval_batches"] == 12
    assert cal["holdout"]["events_per_s_rel_err"] < 1e-6
    assert out["engines_measured"] == 4 and out["model"]["cores"] == 2


def test_calibration_with_an_online_policy_steps_the_control_loop(tmp_path) -> None:
    """dlb-h on skewed loads: the replayed loop moves groups at window ends, and its
    projection differs from KG's."""
    write_run(tmp_path, "r", policy="dlb-h", engines=2)
    out = calibrate(tmp_path, "r", [4])
    rows = {r["policy"]: r for r in out["projection"]}
    assert rows["dlb-h"]["moved_groups"] > 0 and rows["kg"]["moved_groups"] == 0
    assert rows["dlb-h"]["rstd"] < rows["kg"]["rstd"]
    assert all(math.isfinite(out["calibration"][k]) for k in
               ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err"))


def test_a_model_fitted_on_one_run_predicts_another_it_never_saw(tmp_path) -> None:
    """--against: fitted on a KG run, the model predicts a DLB-H run on other input made by
    the same cost terms (exactly, here), and refuses a run of another operator."""
    write_run(tmp_path, "kg-run", engines=2, sizes=[1000, 2000, 3000, 1500])
    write_run(tmp_path, "dlb-run", policy="dlb-h", engines=2, seed=5)
    write_run(tmp_path, "fsd-run", app="fsd", engines=2)
    write_run(tmp_path, "kg-other", engines=2, seed=7, sizes=[2500, 1200, 1800])
    out = calibrate(tmp_path, "kg-run", [4], others=["kg-other", "dlb-run"])
    same, got = out["calibration"]["against"]
    for key in ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err"):
        assert same[key] < 1e-6, key  # other input, same cost terms: predicted exactly
    assert (got["run_id"], got["policy"], got["engines"]) == ("dlb-run", "dlb-h", 2)
    assert got["measured"]["events"] == got["predicted"]["events"]
    for key in ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err"):
        assert math.isfinite(got[key])
    with pytest.raises(CalibrationError, match="operator 'fsd'"):
        calibrate(tmp_path, "kg-run", [4], others=["fsd-run"])


def test_projection_rows_for_each_policy_and_engine_count(tmp_path) -> None:
    write_run(tmp_path, "r")
    out = calibrate(tmp_path, "r", [8, 32])
    rows = out["projection"]
    assert {(r["engines"], r["policy"]) for r in rows} == {
        (e, p) for e in (8, 32) for p in ("kg", "dlb-h", "dlb-s", "spark-200")}
    for r in rows:
        assert r["cores"] == r["engines"]
        assert r["events_per_s"] > 0 and r["batch_p95_s"] > 0 and r["rstd"] >= 0
    # more engines and cores, proportionally more input per batch: more events/s
    kg = {r["engines"]: r for r in rows if r["policy"] == "kg"}
    assert kg[32]["events_per_s"] > kg[8]["events_per_s"]
    # fewer cores than engines: tasks queue, batches take longer
    few = calibrate(tmp_path, "r", [8], cores=2)["projection"]
    assert {r["cores"] for r in few} == {2}
    assert next(r for r in few if r["policy"] == "kg")["batch_p95_s"] > kg[8]["batch_p95_s"]


def test_key_splitting_rows_only_for_a_summarizing_operator(tmp_path) -> None:
    assert "dc" not in policies_for("heavy") and "wc" not in policies_for("fsd")
    assert {"dc", "wc"} <= set(policies_for("wordcount"))
    # the run's own form decides (job.json's app_params): heavy's mergeable form splits
    assert {"dc", "wc"} <= set(policies_for("heavy", {"work_us": 300, "mergeable": True}))
    assert "dc" not in policies_for("heavy", {"work_us": 300})
    assert "dc" not in policies_for("heavy", {"mergeable": "nonsense"})
    write_run(tmp_path, "wc", app="wordcount")
    rows = calibrate(tmp_path, "wc", [8])["projection"]
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"kg", "dlb-h", "dlb-s", "dc", "wc", "spark-200"}
    # the hot group's events leave its engine for the input tasks: the engines' loads even out
    assert by["dc"]["rstd"] < by["kg"]["rstd"]


# -- bad input ------------------------------------------------------------------------------
def test_unknown_run_names_where_it_looked(tmp_path) -> None:
    write_run(tmp_path, "there")
    with pytest.raises(CalibrationError, match=r"no run 'nope' in .*runs.*there"):
        calibrate(tmp_path, "nope")


def test_a_run_without_batches_or_without_group_loads_is_refused(tmp_path) -> None:
    path = write_run(tmp_path, "empty")
    (path / "batches.jsonl").unlink()
    with pytest.raises(CalibrationError, match="batches.jsonl: .*no batch"):
        calibrate(tmp_path, "empty")
    write_run(tmp_path, "old", load_fields=False)
    with pytest.raises(CalibrationError, match="load_groups"):
        calibrate(tmp_path, "old")


@pytest.mark.parametrize(("argv", "text"), [
    (["--calibrate", "nope"], "no run 'nope'"),
    (["--calibrate", "r", "--engines", "8,0"], "--engines"),
    (["--calibrate", "r", "--engines", "8,x"], "--engines"),
    (["--calibrate", "r", "--cores", "-1"], "--cores"),
    (["--calibrate", "r", "--cores", "2,4"], "--cores"),
    (["--engines", "8,32"], "--engines: a comma list only applies to --calibrate"),
    (["--cores", "4"], "--cores: only applies to --calibrate"),
    (["--against", "r"], "--against: only applies to --calibrate"),
    (["--calibrate", "r", "--against", "nope"], "no run 'nope'"),
    (["--calibrate", "old"], "load_groups"),
])
def test_bad_input_is_one_line_and_exit_2(argv, text, ks_home, capsys) -> None:
    write_run(ks_home, "r")
    write_run(ks_home, "old", load_fields=False)
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and text in err, err


def test_cli_json_and_table(ks_home, capsys) -> None:
    write_run(ks_home, "r")
    assert main(["simulate", "--calibrate", "r", "--engines", "4,8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"run_id", "app", "policy", "engines_measured", "model", "calibration",
            "projection"} <= set(out)
    assert {"batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err", "measured",
            "predicted", "holdout"} <= set(out["calibration"])
    assert {r["engines"] for r in out["projection"]} == {4, 8}
    assert main(["simulate", "--calibrate", "r", "--engines", "4"]) == 0
    text = capsys.readouterr().out
    assert "fitted cost model" in text and "spark-200" in text
    # the plain simulator keeps its integer --engines
    assert main(["simulate", "--engines", "3", "--duration", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engines"] == 3


# -- a real run ------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.slow
def test_a_real_heavy_run_calibrates(platform_config) -> None:
    """A short run of the heavy operator (2 engines, DLB-H) on the test broker, then
    ``keyshift simulate --calibrate`` on it: the JSON's shape and finite errors (the
    accuracy targets are the bench's business)."""
    from engines_support import new_topic

    cfg = platform_config
    topic = new_topic(cfg.kafka.bootstrap)
    env = {**os.environ, "KEYSHIFT_HOME": str(cfg.home_path),
           "KEYSHIFT_KAFKA__PORT": str(cfg.kafka.port),
           "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(cfg.kafka.controller_port),
           "KEYSHIFT_GROUPS__COUNT": str(cfg.groups.count),
           "KEYSHIFT_SPARK__TRIGGER_S": "1.0", "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
           "KEYSHIFT_CONTROLLER__WINDOW_S": "2.0", "PYSPARK_PYTHON": sys.executable}
    ks = [sys.executable, "-m", "keyshift.cli"]
    subprocess.run([*ks, "produce", "--app", "heavy", "--topic", topic, "--count", "3000",
                    "--rate", "100000", "--skew", "zipf:1.5", "--seed", "1", "--no-progress"],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    run = subprocess.run(
        [*ks, "run", "--app", "heavy", "--params", '{"work_us": 300}', "--topic", topic,
         "--policy", "dlb-h", "--engines", "2", "--max-offsets", "500", "--run-id", "calib",
         "--available-now", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    sim = subprocess.run([*ks, "simulate", "--calibrate", "calib", "--engines", "4,8",
                          "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert sim.returncode == 0, sim.stderr[-3000:]
    out = json.loads(sim.stdout)
    assert out["run_id"] == "calib" and out["app"] == "heavy" and out["policy"] == "dlb-h"
    assert out["engines_measured"] == 2 and out["per_window"] == 2
    assert out["settings_from"] == "job.json" and out["timed_by"] == "triggerExecution"
    cal = out["calibration"]
    assert cal["measured"]["events"] == 3000 and cal["measured"]["batches"] >= 5
    for key in ("batch_p50_rel_err", "batch_p95_rel_err", "events_per_s_rel_err"):
        assert math.isfinite(cal[key]) and math.isfinite(cal["holdout"][key]), key
    assert cal["engine_events_rel_err"] == 0.0  # the replayed plan routed as the run did
    assert out["model"]["event_s"] > 0 and out["model"]["cores"] == 2
    assert {(r["engines"], r["policy"]) for r in out["projection"]} == {
        (e, p) for e in (4, 8) for p in ("kg", "dlb-h", "dlb-s", "spark-200")}
