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
from streaming.broker import free_port

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.integration
@pytest.mark.slow
def test_demo_json_summary_and_report(tmp_path: Path) -> None:
    home = tmp_path / "ks"
    env = {
        **os.environ,
        "KEYSHIFT_HOME": str(home),
        "KEYSHIFT_CACHE": os.environ.get("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache")),
        "KEYSHIFT_KAFKA__PORT": str(free_port()),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(free_port()),
        "KEYSHIFT_GROUPS__COUNT": "64",
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
        "KEYSHIFT_CONTROLLER__WINDOW_S": "1.0",
        "PYSPARK_PYTHON": sys.executable,
    }
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
    assert summary["events_in"] == summary["produced"] == 800
    assert summary["processed"] + summary["dead_letter"] == summary["events_in"]
    assert summary["policy"] == "dlb-h" and summary["complex_events"] > 0
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == home.resolve() / "runs"
    page = (run_dir / "report.html").read_text()
    assert "timeline.png" in page and (run_dir / "timeline.png").stat().st_size > 1000
    assert (run_dir / "engine_loads.png").exists()
    assert Path(summary["warehouse"]).is_dir()
