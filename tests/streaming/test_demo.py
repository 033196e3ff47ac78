"""``keyshift demo``: bad options fail in one line; a short real run prints the JSON summary
and writes the HTML report with plots into the run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keyshift.cli import main
from keyshift.streaming.broker import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--duration", "0"], "--duration"),
        (["--rate", "-5"], "--rate"),
        (["--policy", "nope"], "--policy"),
        (["--app", "nope"], "--app"),
        (["--engines", "999"], "--engines"),
        (["--skew", "zipf:x"], "--skew"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, field, capsys, ks_home) -> None:
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err


def _demo_env(home: Path, kafka_port: int) -> dict[str, str]:
    """A small, fast demo in its own home: 64 groups, 1-s triggers and windows."""
    return {
        **os.environ,
        "KEYSHIFT_HOME": str(home),
        "KEYSHIFT_CACHE": os.environ.get("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache")),
        "KEYSHIFT_KAFKA__PORT": str(kafka_port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(free_port()),
        "KEYSHIFT_GROUPS__COUNT": "64",
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",
        "PYSPARK_PYTHON": sys.executable,
    }


@pytest.mark.integration
@pytest.mark.slow
def test_demo_json_summary_and_report(tmp_path: Path) -> None:
    home = tmp_path / "ks"
    env = _demo_env(home, free_port())
    proc = subprocess.run(
        [sys.executable, "-m", "keyshift.cli", "demo", "--duration", "8", "--rate", "100",
         "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("events_in", "processed", "dead_letter", "complex_events", "migrations",
                "moved_groups", "rstd_mean", "events_per_s", "batch_p95_s", "warehouse"):
        assert key in summary, key
    assert summary["records"] == summary["produced"] == 800
    assert summary["processed"] + summary["dead_letters"] == summary["records"]
    assert summary["policy"] == "dlb-h" and summary["complex_events"] > 0
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == home.resolve() / "runs"
    page = (run_dir / "report.html").read_text()
    assert "timeline.png" in page and (run_dir / "timeline.png").stat().st_size > 1000
    assert (run_dir / "engine_loads.png").exists()
    assert Path(summary["warehouse"]).is_dir()
    # the comparison with KG, from the run's measured per-group loads (batches.jsonl)
    vs_kg = summary["vs_kg"]
    assert "not a timed KG run" in vs_kg["basis"] and vs_kg["windows"] >= 1
    assert 0 < vs_kg["floor_vs_kg"] <= vs_kg["busiest_vs_kg"] + 1e-9
    # where a batch's time went, how long events waited, what balancing bought
    # (keyshift.control.batch_cost, from the run folder's clocks)
    stages = summary["stages"]
    assert {"input", "operator", "state", "commit", "spark", "trigger_wait"} <= set(stages)
    assert stages["operator"] > 0 and stages["input"] > 0
    assert 0 < summary["e2e_p50_s"] <= summary["e2e_p95_s"] < 600
    assert summary["balancer"]["verdict"] and summary["balancer"]["policy"] == "dlb-h"
    assert "stages.png" in page and "Where a batch&#x27;s time goes" in page
    # each batch says whether the staged bookkeeping's commit ran beside it (bench stream's
    # bound on the native peer leaves those batches out)
    records = [json.loads(x) for x in (run_dir / "batches.jsonl").read_text().splitlines()]
    assert records and all(isinstance(r["beside_commit"], bool) for r in records)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_stops_everything_and_still_reports(tmp_path: Path) -> None:
    """Ctrl-C in a terminal is SIGINT to the whole foreground process group (the CLI, the
    Spark JVM and its Python workers); the demo must stop producer, job and broker, and
    still account for every record the job took."""
    import signal
    import time

    home = tmp_path / "ks"
    port = free_port()
    env = _demo_env(home, port)
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # the child keeps its copies
        proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.cli", "demo", "--duration", "600", "--rate",
             "100", "--json"],
            cwd=ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 900
        batches: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((home / "runs").glob("demo-*/batches.jsonl"))
            batches = found[0].read_text().splitlines() if found else []
            if len(batches) >= 2:
                break
            time.sleep(1)
        assert len(batches) >= 2, err.read_text()[-3000:]
        assert _port_open(port)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=600) == 130, err.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    summary = json.loads(out.read_text().strip().splitlines()[-1])
    assert summary["interrupted"] is True
    assert 0 < summary["records"] <= summary["produced"] < 60_000
    assert summary["processed"] + summary["dead_letters"] == summary["records"]
    assert (Path(summary["run_dir"]) / "report.html").exists()
    assert "interrupted" in err.read_text()
    assert not _port_open(port), "the demo's broker is still listening"
    # nothing of the demo's process group keeps running (Spark JVM, Python workers); the JVM
    # exits when it sees its parent's pipe close, so give it a moment
    deadline = time.monotonic() + 60
    while _live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(1)
    assert _live_members(proc.pid) == []


def _live_members(pgid: int) -> list[str]:
    """Processes of a process group that are not zombies (a container's init may never
    reap an orphan zombie, so ``killpg(pgid, 0)`` would still succeed)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm_end = text.rindex(")")
        fields = text[comm_end + 2:].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            live.append(text[:comm_end + 1])
    return live
