"""Staged files belong to the run whose folder holds them (issue 46 item 2): a restart commits
only its own run's, another run's copied in is moved aside and said in one line; and what
``keyshift status`` shows of staged files is what a commit would commit (checksum and owner
checked; a torn file left out with a note, the other runs still listed)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from keyshift.cli import main
from keyshift.streaming.staging import (
    CHECKSUM_KEY,
    StagedAppends,
    foreign_runs,
    stage_rows,
    stage_uri,
)

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def _metrics(run: str, batch: int, events: int = 210) -> dict:
    return {"run_id": run, "batch_id": batch, "window_start": NOW, "window_end": NOW,
            "events_in": events, "dead_letter": 0, "processed": events, "out_events": 1,
            "missed": 0, "selectivity": 0.1, "engines": 2, "engine_loads": [events, 0],
            "rstd": 0.1, "var_load": 0.25, "input_rate": 2.5, "latency_s": 0.01,
            "batch_duration_s": 0.5, "plan_version": 0, "policy": "kg"}


def _loads(run: str, batch: int) -> list[dict]:
    return [{"run_id": run, "batch_id": batch, "window_start": NOW, "group": g, "engine": 0,
             "load": g, "state_bytes": None, "plan_version": 0} for g in range(10)]


def _home(tmp_path: Path) -> tuple[Path, object]:
    from keyshift.config import load_config

    conf = tmp_path / "keyshift.toml"
    conf.write_text(f'home = "{tmp_path}"\n[spark]\ntrigger_s = 600.0\n')
    return conf, load_config(conf, env={})


def _copy_staged(src_root: str, dst_root: str) -> int:
    """Every staged file of one run's folder copied into another's, as the attacker did."""
    n = 0
    for f in Path(src_root).rglob("*.parquet"):
        to = Path(dst_root) / f.relative_to(src_root)
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, to)
        n += 1
    return n


def test_the_owner_is_the_first_key_column() -> None:
    import pyarrow as pa

    tab = pa.table({"run_id": ["a", "b", None], "batch_id": [0, 0, 0]})
    assert foreign_runs("metrics", tab, "a") == ["None", "b"]
    assert foreign_runs("metrics", tab.slice(0, 1), "a") == []
    assert foreign_runs("plans", pa.table({"scope": ["a"], "version": [1]}), "a") == []
    assert foreign_runs("plans", pa.table({"scope": ["a"], "version": [1]}), "b") == ["a"]


def test_a_restart_commits_only_its_own_runs_staged_files(tmp_path, capsys) -> None:
    """Run A's staged files copied into run B's folder: B's recovery commits B's rows only;
    A's files go to B's quarantine folder, whole, and one line says so."""
    runs = tmp_path / "wh" / "_runs"
    a_root, b_root = str(runs / "A" / "staged"), str(runs / "B" / "staged")
    stage_rows(a_root, "metrics", 0, "driver", [_metrics("A", 0)])
    stage_rows(a_root, "key_loads", 0, "e0", _loads("A", 0))
    assert _copy_staged(a_root, b_root) == 2
    stage_rows(b_root, "metrics", 3, "driver", [_metrics("B", 3)])

    st = StagedAppends(None, b_root, SimpleNamespace(run_id="B"), interval_s=0)
    appended: list[tuple[str, dict]] = []
    st._append = lambda name, batches, rows: appended.append((name, dict(batches)))
    st.recover()

    assert appended == [("metrics", {3: [stage_uri(b_root, "metrics", 3, "driver")]})]
    moved = sorted(p.relative_to(runs / "B") for p in (runs / "B").rglob("*.parquet"))
    assert [str(p) for p in moved] == [
        "quarantine/key_loads/b000000000000-e0.parquet",
        "quarantine/metrics/b000000000000-driver.parquet",
        "staged/metrics/b000000000003-driver.parquet",  # _append is faked: not deleted
    ]
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert ("keyshift: run B: 2 staged files in its staged folder hold rows of run A, not "
            f"its own: moved aside to {runs / 'B' / 'quarantine'}, not committed") in err
    # a file moved aside before is not overwritten by another of the same name
    _copy_staged(a_root, b_root)
    st.recover()
    assert len(list((runs / "B" / "quarantine" / "metrics").iterdir())) == 2
    assert "a staged file in its staged folder holds rows of run A" not in capsys.readouterr().err


def _status(capsys, conf: Path, *more: str) -> tuple[dict, str]:
    code = main(["status", "--config", str(conf), "--json", *more])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)
    return {r["run_id"]: r for r in got.get("runs", [got.get("run")])}, err


def _alter(uri: str, events: int) -> None:
    """A staged file's events_in changed, its checksum kept: what the job refuses."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tab = pq.read_table(uri)
    meta = tab.schema.metadata
    i = tab.column_names.index("events_in")
    tab = tab.set_column(i, tab.schema.field(i), pa.array([events], type=pa.int64()))
    pq.write_table(tab.replace_schema_metadata(meta), uri, write_statistics=False)
    assert pq.read_table(uri).schema.metadata[CHECKSUM_KEY] == meta[CHECKSUM_KEY]


def test_status_shows_only_staged_rows_a_commit_would_commit(tmp_path, capsys) -> None:
    """An altered file (210 -> 1,210 events) is not shown; a torn one does not stop the
    listing of all runs; run A's file copied into B's folder does not count twice."""
    conf, cfg = _home(tmp_path)
    root = {r: f"{cfg.warehouse_uri}/_runs/{r}/staged" for r in ("A", "B", "C")}
    for b in (0, 1):
        stage_rows(root["A"], "metrics", b, "driver", [_metrics("A", b)])
    stage_rows(root["B"], "metrics", 3, "driver", [_metrics("B", 3, 100)])
    stage_rows(root["C"], "metrics", 0, "driver", [_metrics("C", 0, 50)])
    runs, err = _status(capsys, conf)
    assert {r: runs[r]["events_in"] for r in runs} == {"A": 420, "B": 100, "C": 50}
    assert err == ""

    _alter(stage_uri(root["A"], "metrics", 1, "driver"), 1210)
    torn = Path(stage_uri(root["C"], "metrics", 0, "driver"))
    torn.write_bytes(torn.read_bytes()[:100])
    _copy_staged(root["A"], root["B"])  # A's batch 0 (and its altered batch 1) in B's folder
    runs, err = _status(capsys, conf)
    assert {r: runs[r]["events_in"] for r in runs} == {"A": 210, "B": 100, "C": 0}
    lines = err.splitlines()
    assert len(lines) == 4 and all(ln.startswith("staged file left out: ") for ln in lines)
    assert any("run A, table metrics, batch 1" in ln and "checksum mismatch" in ln
               for ln in lines), err
    assert any("run C, table metrics, batch 0" in ln and "truncated or torn" in ln
               for ln in lines), err
    assert any("run B, table metrics, batch 0" in ln and "holds rows of run A, not of run B"
               in ln for ln in lines), err
    assert "Traceback" not in err

    one, err = _status(capsys, conf, "--run-id", "B")
    assert one["B"]["events_in"] == 100


@pytest.mark.integration
def test_a_restart_leaves_another_runs_copied_files_out_of_delta(
        spark, spark_config, tmp_path) -> None:
    """The attack end to end: run A commits its rows; its staged files, copied into run B's
    folder before that, are not committed again by B's restart (A had 1 metrics row and 10
    key_loads rows twice)."""
    from keyshift.lakehouse.delta import RunAppends, ensure_tables

    cfg = spark_config.model_copy(update={"warehouse": spark_config.warehouse.model_copy(
        update={"root": str(tmp_path / "wh")})})
    ensure_tables(spark, cfg, ["metrics", "key_loads"])
    runs = tmp_path / "wh" / "_runs"
    a_root, b_root = str(runs / "A" / "staged"), str(runs / "B" / "staged")

    def counts(name: str) -> dict[str, int]:
        rows = (spark.read.format("delta").load(cfg.table_path(name))
                .groupBy("run_id").count().collect())
        return {r.run_id: r["count"] for r in rows}

    a = RunAppends(spark, cfg, "A")
    a.fresh = True
    sa = StagedAppends(spark, a_root, a, interval_s=0)
    a.begin(0)
    sa.put("metrics", [_metrics("A", 0)], 0)
    stage_rows(a_root, "key_loads", 0, "e0", _loads("A", 0))
    _copy_staged(a_root, b_root)
    sa.commit()
    assert counts("metrics") == {"A": 1} and counts("key_loads") == {"A": 10}

    b = RunAppends(spark, cfg, "B")  # a restart of B: it may have written before
    sb = StagedAppends(spark, b_root, b, interval_s=0)
    stage_rows(b_root, "metrics", 4, "driver", [_metrics("B", 4)])
    sb.recover()
    assert counts("metrics") == {"A": 1, "B": 1} and counts("key_loads") == {"A": 10}
    assert sb.files() == {}
    assert len(list((runs / "B" / "quarantine").rglob("*.parquet"))) == 2
