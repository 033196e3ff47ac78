"""The floor of a statistic window (keyshift.control.floor): its definition, the columns
of ``metrics`` and ``decisions`` that carry it (schema version 2, older rows read as
nulls), the report's words about it and the demo's comparison with KG. No Spark here; the
real run's rows are checked in tests/streaming/test_engines_spark.py, the report's plot in
tests/streaming/test_status_report.py."""

from __future__ import annotations

import itertools
import json
import math
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from keyshift.control import FLOOR_COLUMNS, Floor, key_group_floor
from keyshift.metrics import Balance
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, TABLES


# -- the definition -----------------------------------------------------------------------------
def test_floor_of_a_hot_key_group() -> None:
    f = key_group_floor(np.array([60.0, 10, 10, 10, 10]), 2)
    assert (f.hot_group, f.hot_group_share, f.engines, f.total) == (0, 0.6, 2, 100.0)
    assert f.ratio == pytest.approx(1.2) and f.load == pytest.approx(60.0)
    assert f.rstd == pytest.approx(20.0) and f.binding
    assert f.columns() == {"floor_ratio": f.ratio, "floor_rstd": f.rstd, "hot_group": 0,
                           "hot_group_share": 0.6}
    assert tuple(f.columns()) == FLOOR_COLUMNS
    # 4 engines, mean 25: 60 is 2.4x the mean; imbScore >= 100·1.4/√3
    f4 = key_group_floor(np.array([60.0, 10, 10, 10, 10]), 4)
    assert f4.ratio == pytest.approx(2.4) and f4.rstd == pytest.approx(140 / math.sqrt(3))


def test_no_binding_floor_no_load_one_engine() -> None:
    calm = key_group_floor(np.full(8, 5.0), 4)
    assert calm.ratio == 1.0 and calm.rstd == 0.0 and not calm.binding
    assert calm.hot_group_share == pytest.approx(1 / 8)
    empty = key_group_floor(np.zeros(8), 4)
    assert (empty.ratio, empty.rstd, empty.hot_group, empty.hot_group_share) == (1.0, 0.0,
                                                                                 None, 0.0)
    assert key_group_floor(np.zeros(0), 3).hot_group is None  # the replay counts no groups
    one = key_group_floor(np.array([9.0, 1.0]), 1)
    assert one.ratio == 1.0 and one.rstd == 0.0


def test_no_key_granular_plan_beats_the_floor_and_the_best_reaches_it() -> None:
    """Every assignment of 7 groups to 3 engines: max/mean and imbScore never go below the
    floor; with a hot group and lights that split evenly the best plan is exactly on it."""
    rng = np.random.default_rng(3)
    for loads in (np.array([40.0, 6, 6, 6, 6, 6, 6]), rng.zipf(1.5, 7).astype(float),
                  rng.integers(1, 20, 7).astype(float)):
        f = key_group_floor(loads, 3)
        best_ratio, best_rstd = math.inf, math.inf
        for a in itertools.product(range(3), repeat=loads.size):
            b = Balance.of(Plan(np.array(a), 3).engine_loads(loads))
            assert b.max / b.mean >= f.ratio - 1e-9 and b.rstd >= f.rstd - 1e-9
            best_ratio, best_rstd = min(best_ratio, b.max / b.mean), min(best_rstd, b.rstd)
        if loads[0] == 40.0:  # 40 | 18 | 18
            assert best_ratio == pytest.approx(f.ratio) and best_rstd == pytest.approx(f.rstd)


def test_at_the_floor_within_the_tolerance_or_min_gain() -> None:
    f = key_group_floor(np.array([60.0, 10, 10, 10, 10]), 2)
    assert f.reached_by(60.0) and f.reached_by(60.5) and not f.reached_by(64.0)
    assert f.reached_by(63.0, tolerance=0.05)  # no move could lower 63 by 5 %
    assert not key_group_floor(np.full(4, 1.0), 2).reached_by(2.0)  # not binding
    assert f.reason().startswith("at the floor: group 0 holds 60% of the window")


# -- the tables -----------------------------------------------------------------------------
def test_metrics_and_decisions_carry_the_floor_as_version_2_columns() -> None:
    assert SCHEMA_VERSION >= 2
    for name in ("metrics", "decisions"):
        t = TABLES[name]
        assert t.version >= 2 and t.evolved
        assert [c.name for c in t.added if c.since == 2] == list(FLOOR_COLUMNS)
        assert all(c.nullable and c.since >= 2 for c in t.added)
        assert t.column("hot_group").type == "INT"
    assert not TABLES["key_loads"].evolved


def test_writers_fill_the_floor() -> None:
    """The job's metrics row takes the floor from its controller; the scaler's own record
    and the batch layer's synthetic history fill the columns too."""
    from keyshift.elastic.decision import ScalingDecision
    from keyshift.jobs.history import SyntheticHistory, synthetic_frames
    from keyshift.streaming.controller import Controller

    row = Controller.floor(np.array([6.0, 2, 2]), 2).columns()
    assert set(row) <= set(TABLES["metrics"].names) and row["floor_ratio"] == pytest.approx(1.2)
    rec = ScalingDecision(window=1, policy="planner", engines_before=2, proposed=2,
                          engines_after=2, reason="r").to_record("run", 1)
    assert rec["schema_version"] == SCHEMA_VERSION and rec["floor_ratio"] is None
    from keyshift.config import load_config

    metrics, _ = synthetic_frames(load_config(env={}), date(2026, 1, 5),
                                  SyntheticHistory(days=1, window_s=600))
    assert list(metrics.columns) == TABLES["metrics"].names
    assert metrics.floor_ratio.notna().all() and (metrics.floor_ratio >= 1.0).all()
    assert metrics.hot_group.notna().all()


def test_rows_staged_by_an_older_version_read_with_null_floors(tmp_path: Path) -> None:
    """A live run staged by version 1 (no floor columns) still reads, its floors null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from keyshift.config import load_config
    from keyshift.streaming.runs import _staged

    cfg = load_config(env={"KEYSHIFT_HOME": str(tmp_path)})
    old = [c for c in TABLES["decisions"].columns if c.since == 1]
    from keyshift.lakehouse.delta_arrow import arrow_type

    row = {"schema_version": 1, "run_id": "r", "batch_id": 3,
           "decided_at": datetime(2026, 1, 1, tzinfo=UTC), "component": "balancer",
           "policy": "dlb-h", "action": "none", "reason": "why"}
    path = tmp_path / "b000000000003-driver.parquet"
    pq.write_table(pa.table({c.name: pa.array([row.get(c.name)], type=arrow_type(c.type))
                             for c in old}), path)
    got = _staged(cfg, "decisions", [str(path)]).to_pylist()
    assert got[0]["reason"] == "why" and got[0]["floor_ratio"] is None
    assert got[0]["hot_group"] is None


# -- the report's words ---------------------------------------------------------------------
def _metrics_frame(shares: list[float | None]) -> pd.DataFrame:
    rows = []
    for b, share in enumerate(shares):
        f = key_group_floor(np.array([share, (1 - share) / 2, (1 - share) / 2]) * 100, 2) \
            if share is not None else None
        rows.append({"batch_id": b, "events_in": 100,
                     **(f.columns() if f else dict.fromkeys(FLOOR_COLUMNS))})
    return pd.DataFrame(rows)


def test_the_report_says_what_no_plan_can_do_and_what_a_split_would() -> None:
    from keyshift.streaming.report import _floor_note

    m = _metrics_frame([0.3, 0.7, 0.6])
    note = _floor_note(m, "wordcount", "dlb-h")
    assert "In 2 of 3 batches one key group alone outweighed" in note
    assert "group 0 with 70% of batch 1, 1.40x the mean" in note
    assert "policies dc and wc (--policy dc | wc) would split the hot key" in note
    assert "offers no summary" in _floor_note(m, "fsd", "dlb-h")
    assert "declaring the Operator API&#x27;s summary hooks" in _floor_note(m, "fsd", "dlb-h")
    # heavy (issue 42): the chain form names its mergeable form; the mergeable form, run
    # with a policy that moves whole groups, is told dc and wc would split the hot key
    chain = _floor_note(m, "heavy", "dlb-h", {"work_us": 10})
    assert "its form --params &#x27;{&quot;mergeable&quot;: true}&#x27; does" in chain
    split = _floor_note(m, "heavy", "dlb-h", {"work_us": 10, "mergeable": True})
    assert "heavy summarizes part of a key" in split and "--policy dc | wc" in split
    assert "This run&#x27;s policy wc splits" in _floor_note(m, "wordcount", "wc")
    assert "is 0" in _floor_note(_metrics_frame([0.3, 0.5]), "fsd", "kg")
    assert _floor_note(_metrics_frame([None, None]), "fsd", "kg") == ""  # version 1 rows


# -- the demo's comparison with KG -----------------------------------------------------------------
def test_demo_compares_the_busiest_engine_with_kg_from_batches_jsonl(tmp_path: Path) -> None:
    """Two windows of two batches on 2 engines; group 0 holds 60 % of the input. KG puts
    groups 0 and 2 together (busiest 80 per window), the run's plan moved group 2 away in
    window 1 (busiest 60 = the floor); window 0 ran KG's plan."""
    from keyshift.control.batch_cost import kg_counterfactual as kg_comparison
    from keyshift.control.batch_cost import read_jsonl as batch_records
    from keyshift.streaming.commands.demo import kg_line

    path = tmp_path / "batches.jsonl"
    batch = {"load_groups": [0, 1, 2, 3], "load_counts": [30, 10, 10, 0]}
    lines = [{"batch_id": b, "slots": 2, **batch} for b in range(4)]
    lines.insert(2, {"batch_id": 1, "slots": 2, **batch})  # batch 1 ran again: counted once
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    records = batch_records(path)
    assert [r["batch_id"] for r in records] == [0, 1, 2, 3]
    kg = Plan.hashed(4, 2)
    moved = Plan(np.array([0, 1, 1, 1]), 2, version=1)
    got = kg_comparison(records, 4, 2, lambda b: kg if b < 2 else moved)
    assert got["windows"] == 2 and "not a timed KG run" in got["basis"]
    assert got["busiest_vs_kg"] == pytest.approx((80 + 60) / (80 + 80))
    assert got["floor_vs_kg"] == pytest.approx((60 + 60) / (80 + 80))
    line = kg_line(got)
    assert line.startswith("busiest engine's load vs KG on the same input: 0.88x "
                           "(floor 0.75x) over 2 windows")
    assert "not a timed KG run" in line
    assert kg_comparison([], 4, 2, lambda b: kg) is None
    assert batch_records(tmp_path / "none.jsonl") == []


def test_demo_offers_the_heavy_operator() -> None:
    from keyshift.streaming.commands.demo import APPS
    from keyshift.workloads.events import GENERATORS

    assert "heavy" in APPS and set(APPS) <= set(GENERATORS)


def test_floor_is_a_frozen_value() -> None:
    f = key_group_floor(np.array([1.0]), 1)
    assert isinstance(f, Floor)
    with pytest.raises(AttributeError):
        f.ratio = 2.0  # type: ignore[misc]


def test_status_says_the_floor_and_the_lever_from_the_run_folder(tmp_path: Path) -> None:
    """``status --run-id`` (streaming/runs.py) says the report's floor in words, with the
    operator's parameters from the run folder: heavy's chain form names its mergeable one."""
    from keyshift.streaming.runs import _floor_of

    m = _metrics_frame([0.3, 0.7, 0.6])

    class Rows:
        def frame(self, name: str, run_id: str, cols: list[str]):
            assert name == "metrics" and set(cols) <= set(m.columns)
            return m

    (tmp_path / "job.json").write_text(json.dumps(
        {"app": "heavy", "policy": "dlb-h", "app_params": {"work_us": 10}}))
    text = _floor_of(Rows(), "r", tmp_path)
    assert text.startswith("In 2 of 3 batches one key group alone outweighed")
    assert """its form --params '{"mergeable": true}' does""" in text
    bare = _floor_of(Rows(), "r", tmp_path / "elsewhere")  # not the driver's host
    assert bare.startswith("In 2 of 3") and "--params" not in bare
