"""The runs of a warehouse as a person watching them wants to see them (``keyshift status``,
``keyshift report``): what each run is, how far it got, what the controller last decided.

A running job stages its bookkeeping rows (``metrics``, ``decisions``, ``migrations``, ...)
beside the warehouse and commits them to Delta every ``warehouse.commit_interval_s``
(:mod:`keyshift.streaming.staging`), so Delta alone trails a live run by up to that interval. The
readers here add the staged rows, read-only, so a live run is seen up to its last batch. The
staged files are read *before* the Delta snapshot is taken: a file the job commits and deletes
in between is then in that snapshot, and a row found in both is taken from Delta.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from keyshift.config import Config
from keyshift.lakehouse.delta import read_table, table_exists
from keyshift.lakehouse.delta_arrow import FastReadUnavailable, first_values, read_arrow
from keyshift.lakehouse.storage import filesystem, read_if_exists
from keyshift.schemas import table

from . import heartbeat
from .staging import ROW_KEY, is_staged, read_for_display

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

LIST_KNOWN = 10  # run ids an "unknown run" message names


class RunLookupError(LookupError):
    """No runs, no such run, or a run with nothing to show yet: one line for the operator."""


def open_spark(cfg: Config, log_level: str | None = None,
               app_name: str = "keyshift-status") -> SparkSession:
    """A session for reading the warehouse, with Spark's log lines kept off the terminal
    (a person asked for a table, not for Spark's WARN lines): :mod:`keyshift.lakehouse.logs`."""
    from keyshift.lakehouse.logs import (
        configure_spark_logging,
        log_file,
        set_session_level,
    )
    from keyshift.lakehouse.session import get_spark

    configure_spark_logging(log_file(cfg, app_name.removeprefix("keyshift-")),
                            log_level)
    spark = get_spark(cfg, app_name=app_name)
    set_session_level(spark, log_level)
    return spark


# --- what the warehouse holds, without Spark -------------------------------------------------


def _listing(cfg: Config) -> tuple[set[str], dict[tuple[str, str], list[str]]]:
    """The run folders the jobs made (``_runs/<run>/``) and their staged Parquet files by
    (run, table): one listing of ``_runs``, so a warehouse with many runs costs one call."""
    from pyarrow.fs import FileSelector, FileType

    fs, base = filesystem(cfg.runs_uri())
    runs: set[str] = set()
    staged: dict[tuple[str, str], list[str]] = {}
    for info in fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True)):
        parts = info.path[len(base):].strip("/").split("/")
        if info.type == FileType.Directory and len(parts) == 1:
            runs.add(parts[0])
        elif (info.type == FileType.File and len(parts) == 4 and parts[1] == "staged"
              and is_staged(parts[3])):
            staged.setdefault((parts[0], parts[2]), []).append(info.path)
    return runs, staged


def check_warehouse(cfg: Config) -> None:
    """Fail fast, before Spark starts, on a warehouse no job has written to."""
    from pyarrow.fs import FileType

    fs, path = filesystem(cfg.table_path("metrics") + "/_delta_log")
    if fs.get_file_info(path).type == FileType.Directory or _listing(cfg)[0]:
        return
    raise RunLookupError(_no_runs(cfg))


def _no_runs(cfg: Config) -> str:
    return (f"no runs in the warehouse at {cfg.warehouse_uri} (warehouse.root); start one with "
            "`keyshift run` or `keyshift demo`, or point --config/KEYSHIFT_HOME at another")


def _started(cfg: Config, run_id: str) -> str | None:
    """When a process last started the run (the job's ``_runs/<run>/started`` marker)."""
    body = read_if_exists(f"{cfg.runs_uri(run_id)}/started")
    return body.decode().strip() if body else None


def _staged(cfg: Config, name: str, files: Iterable[str]) -> pa.Table | None:
    """Staged rows of table ``name`` from these files, checked as a commit checks them
    (:func:`keyshift.streaming.staging.read_for_display`)."""
    fs, _ = filesystem(cfg.runs_uri())
    return read_for_display(name, files, fs)


# --- rows: Delta plus staged ----------------------------------------------------------------


def current(spark: SparkSession, cfg: Config, name: str, run_id: str | None = None) -> DataFrame:
    """Table ``name``'s rows (of one run, or all), with what live runs have staged but not
    committed yet; an absent table is empty."""
    from pyspark.sql import functions as F

    names = table(name).names
    files = [p for (run, t), paths in _listing(cfg)[1].items()
             if t == name and (run_id is None or run == run_id) for p in paths]
    staged = _staged(cfg, name, files) if name in ROW_KEY else None
    frames = []
    if table_exists(spark, cfg, name):
        df = read_table(spark, cfg, name)
        frames.append((df if run_id is None else df.where(F.col("run_id") == run_id))
                      .select(*names))
    if staged is not None and staged.num_rows:
        extra = spark.createDataFrame(staged).select(*names)
        if run_id is not None:
            extra = extra.where(F.col("run_id") == run_id)
        if frames:
            key = list(ROW_KEY[name])
            extra = extra.join(frames[0].select(*key), key, "left_anti").select(*names)
        frames.append(extra)
    if not frames:
        return spark.createDataFrame([], table(name).ddl())
    return reduce(lambda a, b: a.unionByName(b), frames)


# --- rows without Spark --------------------------------------------------------------------


def current_arrow(cfg: Config, name: str, run_id: str | None = None,
                  columns: list[str] | None = None) -> pa.Table:
    """:func:`current` without Spark: Delta's rows through delta-rs
    (:mod:`keyshift.lakehouse.delta_arrow`) plus the staged ones, a row found in both taken
    from Delta, all the contract's columns or the chosen ones (the others are not read);
    :class:`~keyshift.lakehouse.delta_arrow.FastReadUnavailable` where delta-rs cannot read
    the table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    files = [p for (run, t), paths in _listing(cfg)[1].items()
             if t == name and (run_id is None or run == run_id) for p in paths]
    staged = _staged(cfg, name, files) if name in ROW_KEY else None  # before the snapshot
    key = list(ROW_KEY.get(name, ()))
    wanted = columns or table(name).names
    read = wanted + [c for c in key if c not in wanted]
    delta = read_arrow(cfg, name, run_id, read)
    if staged is None or not staged.num_rows:
        return delta.select(wanted)
    if run_id is not None and "run_id" in staged.column_names:
        staged = staged.filter(pc.equal(staged["run_id"], run_id))
    if delta.num_rows and staged.num_rows:
        # Arrow joins carry no list columns: join the keys only
        index = staged.select(key).append_column(
            "_row", pa.array(np.arange(staged.num_rows, dtype=np.int64)))
        keep = index.join(delta.select(key), key, join_type="left anti")["_row"]
        staged = staged.take(np.sort(keep.to_numpy()))  # in staged order
    return pa.concat_tables([delta, staged.select(read).cast(delta.schema)]).select(wanted)


class Rows(Protocol):
    """Where the watching commands read a table's current rows from: without Spark
    (:class:`ArrowRows`) where it can, else through a Spark session (:class:`SparkRows`).
    Both give the same pandas frame: the contract's columns (or the chosen ones), a live
    run's staged rows included, timestamps naive in UTC as Spark's ``toPandas`` gives them."""

    def frame(self, name: str, run_id: str | None = None,
              columns: list[str] | None = None, distinct: bool = False) -> pd.DataFrame: ...

    def first_values(self, name: str, column: str, run_ids: set[str]) -> dict[str, Any]:
        """One value of ``column`` per run of an append-only table (never staged), read
        from as few rows as the path allows: what ``status`` shows of a large table."""
        ...


class ArrowRows:
    """Rows read in this process through delta-rs: no JVM (issue 28 item 4)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def frame(self, name: str, run_id: str | None = None,
              columns: list[str] | None = None, distinct: bool = False) -> pd.DataFrame:
        df = current_arrow(self.cfg, name, run_id, columns).to_pandas()
        for col in df.columns:
            if getattr(df[col].dtype, "tz", None) is not None:
                df[col] = df[col].dt.tz_convert("UTC").dt.tz_localize(None)
        return df.drop_duplicates(ignore_index=True) if distinct else df

    def first_values(self, name: str, column: str, run_ids: set[str]) -> dict[str, Any]:
        return first_values(self.cfg, name, column, run_ids)


class SparkRows:
    """Rows read through a Spark session (a remote warehouse, a table delta-rs refuses)."""

    def __init__(self, spark: SparkSession, cfg: Config) -> None:
        self.spark = spark
        self.cfg = cfg

    def frame(self, name: str, run_id: str | None = None,
              columns: list[str] | None = None, distinct: bool = False) -> pd.DataFrame:
        df = current(self.spark, self.cfg, name, run_id)
        df = df.select(*columns) if columns else df
        return (df.distinct() if distinct else df).toPandas()

    def first_values(self, name: str, column: str, run_ids: set[str]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        if not table_exists(self.spark, self.cfg, name):
            return {}
        df = read_table(self.spark, self.cfg, name)
        found = {}
        for rid in run_ids:  # a limit per run: Spark stops reading at its first row
            got = df.where(F.col("run_id") == rid).select(column).limit(1).collect()
            if got:
                found[rid] = got[0][0]
        return found


def answer(cfg: Config, compute: Callable[[Rows], T], log_level: str | None = None,
           app_name: str = "keyshift-status", spark: SparkSession | None = None) -> T:
    """``compute`` on the warehouse's rows, for a watching command (status, report,
    dead-letters) and the demo's report.

    A warehouse no job wrote to fails before anything starts (:func:`check_warehouse`); the
    rows are read without Spark, and where that path cannot read a table
    (:class:`FastReadUnavailable`), said in one line on stderr, again through Spark (``spark``
    when the caller holds a session, else one opened here). A run that is not there or a
    table without the contract's columns is the user's to fix: a
    :class:`~keyshift.cli.UsageError` with the message, not a stack.
    """
    from keyshift.cli import UsageError
    from keyshift.lakehouse.delta import TableSchemaError
    from keyshift.lakehouse.logs import say

    try:
        check_warehouse(cfg)
        try:
            return compute(ArrowRows(cfg))
        except FastReadUnavailable as exc:
            say(f"reading the warehouse with Spark (slower): {exc}")
        return compute(SparkRows(spark or open_spark(cfg, log_level, app_name), cfg))
    except (RunLookupError, TableSchemaError) as exc:
        raise UsageError(str(exc)) from None


# --- the overview and one run's recent batches ----------------------------------------------


def alive(cfg: Config, run_id: str, now: float) -> tuple[bool, float | None]:
    """(alive, heartbeat age in s) of a run: its job's heartbeat (``_runs/<run>/heartbeat``,
    :mod:`keyshift.streaming.heartbeat`) is there and younger than 3 × max(trigger, 10 s). An
    idle job beats too, so it is told apart from a stopped one; a clean stop deletes it."""
    return heartbeat.alive(heartbeat.read(cfg.runs_uri(run_id)), now, cfg.spark.trigger_s)


def _iso(micros: int | None) -> str | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros / 1e6, UTC).isoformat(timespec="seconds")


def _micros(ts: Any) -> int | None:
    """A naive UTC timestamp of a frame as epoch microseconds (Spark's ``unix_micros``)."""
    import pandas as pd

    if ts is None or pd.isna(ts):
        return None
    return int(pd.Timestamp(ts).tz_localize("UTC").value // 1000)


def _py(value: Any) -> Any:
    """A frame's cell as JSON takes it: numpy numbers as Python's, a null (NaN, NaT) as None."""
    import numpy as np
    import pandas as pd

    if isinstance(value, (list, tuple, np.ndarray)):
        return value
    if value is None or pd.isna(value):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _last_by(df: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """Each run's row that comes last by ``order`` (Spark's ``max_by``)."""
    return df.sort_values(["run_id", *order], kind="stable").groupby("run_id").tail(1)


def overview(rows: Rows, cfg: Config, run_id: str | None = None,
             now: float | None = None) -> list[dict[str, Any]]:
    """One object per run (or only ``run_id``'s), newest first: what ``keyshift status``
    shows. A run a job started that has no batch yet has ``batches`` 0."""
    now = time.time() if now is None else now
    m = rows.frame("metrics", run_id, ["run_id", "batch_id", "window_start", "window_end",
                                       "events_in", "dead_letter", "out_events", "engines",
                                       "policy", "rstd"])
    metrics: dict[str, dict[str, Any]] = {}
    if len(m):
        g = m.groupby("run_id")
        agg = g.agg(batches=("batch_id", "size"), first_batch=("batch_id", "min"),
                    last_batch=("batch_id", "max"), first=("window_start", "min"),
                    last=("window_end", "max"), events_in=("events_in", "sum"),
                    dead_letters=("dead_letter", "sum"), complex_events=("out_events", "sum"))
        latest = _last_by(m, ["batch_id"]).set_index("run_id")
        for rid, r in agg.iterrows():
            metrics[rid] = {**{k: _py(v) for k, v in r.items() if k not in ("first", "last")},
                            "first_us": _micros(r["first"]), "last_us": _micros(r["last"]),
                            **{k: _py(latest.at[rid, k]) for k in ("engines", "policy", "rstd")}}
    d = rows.frame("decisions", run_id, ["run_id", "batch_id", "decided_at", "component",
                                         "action", "reason"])
    last = {r["run_id"]: {k: _py(r[k]) for k in ("batch_id", "component", "action", "reason")}
            for _, r in _last_by(d, ["batch_id", "decided_at"]).iterrows()} if len(d) else {}
    mig = rows.frame("migrations", run_id, ["run_id", "status"])
    migrations = mig[mig.status == "completed"].groupby("run_id").size().to_dict()
    folders = _listing(cfg)[0]
    ids = set(metrics) | (folders if run_id is None else folders & {run_id})
    apps = _apps(rows, cfg, ids)
    out = []
    for rid in ids:
        r = metrics.get(rid, {})
        age = now - r["last_us"] / 1e6 if r else None
        is_alive, beat_age = alive(cfg, rid, now) if rid in folders else (False, None)
        out.append({
            "run_id": rid, "app": apps.get(rid), "policy": r.get("policy"),
            "started": _started(cfg, rid) if rid in folders else None,
            "batches": int(r.get("batches", 0)),
            "first_batch": r.get("first_batch"), "last_batch": r.get("last_batch"),
            "first_time": _iso(r.get("first_us")), "last_time": _iso(r.get("last_us")),
            "last_batch_age_s": None if age is None else round(age, 1),
            "alive": is_alive,
            "heartbeat_age_s": None if beat_age is None else round(beat_age, 1),
            "events_in": int(r.get("events_in") or 0),
            "dead_letters": int(r.get("dead_letters") or 0),
            "complex_events": int(r.get("complex_events") or 0),
            "engines": r.get("engines"), "rstd": r.get("rstd"),
            "last_decision": last.get(rid), "migrations": int(migrations.get(rid, 0)),
        })
    out.sort(key=lambda x: x["last_time"] or x["started"] or "", reverse=True)
    return out


def _apps(rows: Rows, cfg: Config, ids: set[str]) -> dict[str, str]:
    """Each run's operator: from the job's ``job.json`` in the run folder of this home, else
    from its complex events in ``events_out`` (the warehouse may be read from another host)."""
    apps = {}
    for rid in ids:
        try:
            apps[rid] = json.loads((cfg.run_dir(rid) / "job.json").read_text())["app"]
        except (OSError, ValueError, KeyError):
            pass
    rest = ids - set(apps)
    if rest:  # one row per run, not the column of every complex event (issue 46 item 5)
        apps.update(rows.first_values("events_out", "app", rest))
    return apps


def list_runs(rows: Rows, cfg: Config) -> list[dict[str, Any]]:
    """:func:`overview` of every run; none at all is a :class:`RunLookupError`."""
    runs = overview(rows, cfg)
    if not runs:
        raise RunLookupError(_no_runs(cfg))
    return runs


def find_run(rows: Rows, cfg: Config, run_id: str) -> dict[str, Any]:
    """The overview of one run that has batches; otherwise a :class:`RunLookupError` that
    names the known runs (an unknown id) or says that the run has no batch yet."""
    found = overview(rows, cfg, run_id)
    if not found:
        known = [r["run_id"] for r in list_runs(rows, cfg)]
        more = f" (and {len(known) - LIST_KNOWN} more)" if len(known) > LIST_KNOWN else ""
        raise RunLookupError(f"no run {run_id!r} in the warehouse at {cfg.warehouse_uri}; "
                             f"known runs, newest first: {', '.join(known[:LIST_KNOWN])}{more}")
    run = found[0]
    if not run["batches"]:
        since = f" (started {run['started']})" if run["started"] else ""
        raise RunLookupError(f"run {run_id!r} has no batches yet{since}; try again once its "
                             "first micro-batch is done")
    return run


def recent(rows: Rows, cfg: Config, run_id: str, last: int) -> dict[str, list]:
    """The run's last ``last`` batches and decisions, oldest first."""
    cols = ["batch_id", "events_in", "dead_letter", "out_events", "batch_duration_s", "rstd",
            "engines", "plan_version", "cores_held", "e2e_p50_s", "e2e_p95_s"]
    m = rows.frame("metrics", run_id, ["window_end", *cols])
    batches = []
    for _, r in m.sort_values("batch_id").tail(last).iterrows():
        row = {"batch_id": _py(r["batch_id"]), "time": _iso(_micros(r["window_end"]))}
        row.update({k: _py(r[k]) for k in cols[1:]})
        batches.append(row)
    dcols = ["batch_id", "component", "action", "reason", "rstd_before", "rstd_after",
             "moved_groups", "engines_before", "engines_after", "plan_version"]
    d = rows.frame("decisions", run_id, ["decided_at", *dcols])
    decisions = [{k: _py(r[k]) for k in dcols} for _, r in
                 d.sort_values(["batch_id", "decided_at"], kind="stable").tail(last).iterrows()]
    from keyshift.control.batch_cost import folder_cost

    run_dir = cfg.run_dir(run_id)
    cost = folder_cost(run_dir, cfg.controller.window_s)  # the driver's host
    floor = _floor_of(rows, run_id, run_dir)
    from .executors import read_held

    held = read_held(run_dir / "resources.json")  # what run --json and the report say
    return {"batches": batches, "decisions": decisions, **({"cost": cost} if cost else {}),
            **({"floor": floor} if floor else {}), **({"held": held} if held else {})}


def run_meta(run_dir: Path) -> dict[str, Any]:
    """A run folder's ``job.json`` (the operator, policy, parameters the job started with),
    {} when this host has no readable one."""
    try:
        meta = json.loads((run_dir / "job.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _floor_of(rows: Rows, run_id: str, run_dir: Path) -> str:
    """The run's floor in words (the report's "The floor"), or "" before schema 2; the
    operator, policy and parameters from the run folder when it is on this host."""
    from keyshift.streaming.report import floor_text

    cols = ["batch_id", "events_in", "floor_ratio", "floor_rstd", "hot_group",
            "hot_group_share"]
    m = rows.frame("metrics", run_id, cols)
    meta = run_meta(run_dir)
    params = meta.get("app_params")
    return floor_text(m, meta.get("app"), meta.get("policy"),
                      params if isinstance(params, dict) else None)
