"""``keyshift status`` and ``keyshift report RUN_ID`` on a warehouse written the way a job
writes it, without running one: Delta rows through ``keyshift.lakehouse.delta``, a live run's
uncommitted rows staged through ``keyshift.streaming.staging``, its ``_runs/<run>/started`` marker.

Runs: ``old`` (wordcount, 6 batches two hours ago, a migration and a rebalance), ``live``
(traffic, batches 0-3 in Delta and 4-5 only staged, batch 3 staged as well, as when the job
commits and has not yet deleted the file), ``fresh`` (started, no batch yet).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from keyshift.cli import main
from keyshift.control import key_group_floor

pytestmark = pytest.mark.integration


def _metrics(run: str, batch: int, end: datetime, events: int, engines: int,
             policy: str, floor: bool = True) -> dict:
    loads = [events // engines] * engines
    # a hot key group with 70 % of the batch: the floor (keyshift.control.floor); rows of
    # schema version 1 (floor False) have none
    hot = key_group_floor(np.array([0.7, 0.1, 0.1, 0.1]) * events, engines).columns() \
        if floor else {}
    return {**hot,
        "run_id": run, "batch_id": batch, "window_start": end - timedelta(seconds=2),
        "window_end": end, "events_in": events, "dead_letter": 1, "processed": events,
        "out_events": 2, "missed": 0, "selectivity": 2 / events, "engines": engines,
        "engine_loads": loads, "rstd": 10.0 + batch, "var_load": 1.0, "input_rate": events / 2,
        "latency_s": 0.001, "batch_duration_s": 0.5 + batch / 10, "plan_version": 1,
        "policy": policy,
    }


def _decision(run: str, batch: int, at: datetime, action: str, reason: str) -> dict:
    return {"run_id": run, "batch_id": batch, "decided_at": at, "component": "balancer",
            "policy": "dlb-h", "action": action, "reason": reason, "rstd_before": 40.0,
            "rstd_after": 12.0, "moved_groups": 3 if action == "rebalance" else 0,
            "engines_before": 4, "engines_after": 4, "plan_version": 2}


def _out(run: str, app: str) -> dict:
    return {"run_id": run, "batch_id": 0, "app": app, "engine": 0, "group": 1, "key": "k",
            "ts": 0, "kind": "x", "detail": "{}", "event_id": "e1"}


@pytest.fixture(scope="module")
def warehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The config file of a home whose warehouse holds the three runs."""
    from keyshift.config import load_config
    from keyshift.lakehouse.delta import append_rows
    from keyshift.lakehouse.storage import write_atomically
    from keyshift.streaming.staging import stage_rows

    home = tmp_path_factory.mktemp("status")
    conf = home / "keyshift.toml"
    # a long trigger: "alive" (a heartbeat within 3 triggers) holds however slow the test
    conf.write_text(f'home = "{home}"\n[spark]\ntrigger_s = 600.0\n')
    cfg = load_config(conf, env={})
    now = datetime.now(UTC)
    old = now - timedelta(hours=2)
    # the old run was written by schema version 1: tables without the floor columns, which
    # the live run's appends add (its decisions are only staged: that table stays old)
    _append_v1(spark, cfg, "metrics",
               [_metrics("old", b, old + timedelta(seconds=2 * b), 100, 4, "dlb-h", False)
                for b in range(6)])
    append_rows(spark, cfg, "metrics",
                [_metrics("live", b, now - timedelta(seconds=60 - b), 50, 2, "kg")
                 for b in range(4)])
    _append_v1(spark, cfg, "decisions", [
        _decision("old", 2, old, "rebalance", "imbScore 40% -> 12%, 3 groups moved"),
        _decision("old", 4, old, "none", "imbScore already within theta")])
    append_rows(spark, cfg, "migrations", [{
        "run_id": "old", "migration_id": "m1", "plan_version": 2, "groups": [1, 2, 3],
        "from_engines": [0, 0, 1], "to_engines": [2, 3, 3], "bytes": 300, "status": status,
        "started_at": old, "ended_at": old + timedelta(seconds=1) if status == "completed"
        else None, "batch_start": 2, "batch_end": 2 if status == "completed" else None}
        for status in ("started", "completed")])
    append_rows(spark, cfg, "events_out", [_out("old", "wordcount"), _out("live", "traffic")])
    staged = f"{cfg.warehouse_uri}/_runs/live/staged"
    for b in (3, 4, 5):
        stage_rows(staged, "metrics", b, "driver",
                   [_metrics("live", b, now - timedelta(seconds=60 - b), 50, 3, "kg")])
    stage_rows(staged, "decisions", 5, "driver",
               [_decision("live", 5, now, "scale_out", "forecast In exceeds capacity")])
    for run in ("live", "fresh"):
        write_atomically(f"{cfg.warehouse_uri}/_runs/{run}/started", now.isoformat().encode())
    # the live run's job beats (streaming/heartbeat.py); the old one was killed two hours ago
    # and left its last heartbeat; the fresh one has none yet
    for run, at in (("live", now), ("old", old)):
        write_atomically(f"{cfg.warehouse_uri}/_runs/{run}/heartbeat", json.dumps(
            {"time": at.timestamp(), "stale_after_s": 1800.0}).encode())
    return conf


def _append_v1(spark, cfg, name: str, rows: list[dict]) -> None:
    """Rows as keyshift's schema version 1 appended them: without the columns version 2
    added, into a table that (when this makes it) lacks them too."""
    from keyshift.schemas import table

    cols = [c for c in table(name).columns if c.since == 1]
    (spark.createDataFrame([tuple({"schema_version": 1, **r}.get(c.name) for c in cols)
                            for r in rows], ", ".join(f"`{c.name}` {c.type}" for c in cols))
     .write.format("delta").mode("append").save(cfg.table_path(name)))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_lists_the_runs_newest_first_with_what_live_runs_staged(warehouse,
                                                                        capsys) -> None:
    code, out, err = _run(capsys, "status", "--config", str(warehouse), "--json")
    assert code == 0, err
    runs = {r["run_id"]: r for r in json.loads(out)["runs"]}
    order = [r["run_id"] for r in json.loads(out)["runs"]]
    assert set(runs) == {"old", "live", "fresh"}
    assert order.index("live") < order.index("old")
    old, live, fresh = runs["old"], runs["live"], runs["fresh"]
    assert (old["app"], old["policy"], old["batches"], old["first_batch"],
            old["last_batch"]) == ("wordcount", "dlb-h", 6, 0, 5)
    assert (old["events_in"], old["dead_letters"], old["engines"]) == (600, 6, 4)
    assert old["migrations"] == 1 and not old["alive"]
    assert old["last_decision"]["action"] == "none" and old["last_decision"]["batch_id"] == 4
    # batches 4 and 5 only staged, batch 3 both committed and staged: counted once
    assert (live["app"], live["batches"], live["last_batch"], live["events_in"]) == (
        "traffic", 6, 5, 300)
    assert live["engines"] == 3 and live["alive"]
    assert live["last_decision"]["action"] == "scale_out"
    assert fresh["batches"] == 0 and fresh["started"] and not fresh["alive"]

    code, out, err = _run(capsys, "status", "--config", str(warehouse))
    assert code == 0, err
    assert "old" in out and "wordcount" in out and "none yet" in out
    assert "live: batch 5, balancer scale_out: forecast In exceeds capacity" in out


def test_status_of_one_run_shows_its_last_batches_and_decisions(warehouse, capsys) -> None:
    code, out, err = _run(capsys, "status", "--config", str(warehouse), "--run-id", "live",
                          "--last", "3", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["run"]["run_id"] == "live"
    assert [b["batch_id"] for b in got["batches"]] == [3, 4, 5]
    assert [b["engines"] for b in got["batches"]] == [2, 3, 3]  # batch 3: Delta's row
    assert [d["action"] for d in got["decisions"]] == ["scale_out"]

    code, out, err = _run(capsys, "status", "--config", str(warehouse), "--run-id", "old")
    assert code == 0, err
    assert "run old: wordcount with dlb-h; batches 0-5" in out
    assert "imbScore 40% -> 12%, 3 groups moved" in out


def test_report_of_a_live_run_writes_the_html_with_its_plots(warehouse, tmp_path,
                                                             capsys, monkeypatch) -> None:
    from matplotlib.axes import Axes

    drawn: list[tuple[str, list]] = []  # (label, y) of every line the report plots
    plot = Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append((kwargs.get("label", ""), list(args[1]) if len(args) > 1 else []))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    out_dir = tmp_path / "rep"
    code, out, err = _run(capsys, "report", "live", "--config", str(warehouse), "--out",
                          str(out_dir), "--json")
    assert code == 0, err
    # the floor on the RSTD plot: 70 % of a batch on 2 engines (imbScore >= 40 %), on 3
    # (the staged batches 4-5) 100·1.1/√2; the summary's mean of them, the note below it
    (floor,) = [y for label, y in drawn if label.startswith("floor: least RSTD")]
    assert floor == pytest.approx([40.0] * 4 + [110 / np.sqrt(2)] * 2)
    assert json.loads(out)["floor_rstd_mean"] == pytest.approx(np.mean(floor))
    page = (out_dir / "report.html").read_text()
    assert "<h2>The floor</h2><p>In 6 of 6 batches one key group alone outweighed" in page
    assert "traffic offers no summary of part of a key&#x27;s events" in page
    summary = json.loads(out)
    assert Path(summary["report"]) == out_dir / "report.html"
    assert summary["batches"] == 6 and summary["valid"] == 300
    assert summary["app"] == "traffic" and summary["policy"] == "kg"
    page = (out_dir / "report.html").read_text()
    assert "keyshift run live" in page and "forecast In exceeds capacity" in page
    for png in ("timeline.png", "engine_loads.png"):
        assert f'src="{png}"' in page and (out_dir / png).stat().st_size > 1000

    drawn.clear()
    code, out, err = _run(capsys, "report", "old", "--config", str(warehouse))
    assert code == 0, err
    assert out.strip() == str(warehouse.parent / "runs" / "old" / "report.html")
    old_page = Path(out.strip()).read_text()
    assert "3 groups moved" in old_page  # rows of schema version 1: no floor, no note
    assert "The floor" not in old_page and not [x for x, _ in drawn if x.startswith("floor")]


@pytest.mark.parametrize(("argv", "says"), [
    (["report", "nope"], ("no run 'nope' in the warehouse at .*; known runs, newest first: "
                          "fresh, live, old$")),
    (["status", "--run-id", "nope"], "no run 'nope'"),
    (["report", "fresh"], "run 'fresh' has no batches yet \\(started 20"),
    (["status", "--run-id", "live", "--last", "0"], "--last: must be >= 1"),
])
def test_bad_run_ids_are_one_line_and_exit_2(warehouse, capsys, argv, says) -> None:
    code, out, err = _run(capsys, *argv, "--config", str(warehouse))
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert re.search(says, err), err


def test_an_empty_warehouse_is_one_line_before_spark(tmp_path, capsys) -> None:
    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{tmp_path / "nothing"}"\n')
    for argv in (["status"], ["report", "any"]):
        code, out, err = _run(capsys, *argv, "--config", str(conf))
        assert code == 2 and out == ""
        assert err.startswith(f"keyshift {argv[0]}: no runs in the warehouse at ") and \
            err.count("\n") == 1, err
    assert not (tmp_path / "nothing").exists()  # reading made nothing
