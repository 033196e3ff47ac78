"""The batch layer's view of the Delta history: date ranges, reads with clear errors, and a
writer of a synthetic-but-realistic history for tests, demos and a fresh warehouse.

Why a module of its own: both nightly jobs read the same tables the speed layer writes
(``metrics`` and ``key_loads``), and both must fail the same way when the history is not
there — a missing table is an operator's mistake (wrong warehouse root, streaming job never
ran) and fails the task with the path; an empty date range is a normal quiet night and turns
into a skip with the reason. Readers and the writer build Spark schemas from
:mod:`keyshift.schemas` only, so a schema change breaks here loudly, not downstream.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.cli import add_config_option
from keyshift.config import Config, config_workload
from keyshift.control.floor import FLOOR_COLUMNS, key_group_floor
from keyshift.groups import groups_of
from keyshift.metrics import load_variance, rstd
from keyshift.plan import Plan
from keyshift.schemas import SCHEMA_VERSION, TABLES

if TYPE_CHECKING:  # Spark is imported where a session exists, never at module import
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession


class HistoryError(RuntimeError):
    """The history cannot be read: a missing table, a wrong schema, groups out of range."""


# --- date ranges -------------------------------------------------------------------------


@dataclass(frozen=True)
class DayRange:
    """Whole UTC days ``first..last`` inclusive: what an operator types and a DAG run covers.

    Inclusive day bounds match how people say "the 1st to the 25th"; the half-open
    timestamp interval ``[start, end)`` is what filters use, so adjacent ranges never
    count a window twice.
    """

    first: date
    last: date

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError(f"to: {self.last} is before from: {self.first}")

    @classmethod
    def parse(cls, first: str, last: str) -> DayRange:
        return cls(parse_day(first, "from"), parse_day(last, "to"))

    @classmethod
    def ending(cls, last: date, days: int) -> DayRange:
        """The ``days`` whole days ending with ``last`` (a nightly run's look-back)."""
        if days < 1:
            raise ValueError(f"days: must be >= 1, got {days}")
        return cls(last - timedelta(days=days - 1), last)

    @property
    def start(self) -> datetime:
        return datetime.combine(self.first, time.min, UTC)

    @property
    def end(self) -> datetime:
        return datetime.combine(self.last + timedelta(days=1), time.min, UTC)

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    def __str__(self) -> str:
        return f"{self.first.isoformat()}..{self.last.isoformat()}"


def parse_day(text: str, field: str) -> date:
    try:
        return date.fromisoformat(str(text).strip())
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not a date (YYYY-MM-DD)") from None


def add_range_arguments(p: argparse.ArgumentParser) -> None:
    """``--from/--to`` (inclusive UTC days) or ``--days N`` ending yesterday."""
    p.add_argument("--from", dest="first", metavar="YYYY-MM-DD", help="first day (UTC)")
    p.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="last day, inclusive (UTC)")
    p.add_argument(
        "--days", type=int, default=None,
        help="instead of --from: this many days ending with --to (default --to: yesterday)",
    )
    add_config_option(p)  # SUPPRESS below `keyshift`; main() sets None


def range_from_args(args: argparse.Namespace, default_days: int) -> DayRange:
    """The range an operator asked for; ValueError names the offending flag."""
    last = (
        parse_day(args.last, "to")
        if args.last
        else datetime.now(UTC).date() - timedelta(days=1)
    )
    if args.first and args.days is not None:
        raise ValueError("days: give either --from or --days, not both")
    if args.first:
        return DayRange(parse_day(args.first, "from"), last)
    return DayRange.ending(last, args.days if args.days is not None else default_days)


# --- reading -----------------------------------------------------------------------------


def read_history(spark: SparkSession, cfg: Config, name: str) -> DataFrame:
    """The Delta table ``name`` (the gateway's checked read); a missing table or one without
    the contract's columns is the batch layer's :class:`HistoryError`, which fails the task."""
    from keyshift.lakehouse.delta import TableMissingError, TableSchemaError, read_table

    try:
        return read_table(spark, cfg, name)
    except (TableMissingError, TableSchemaError) as exc:
        raise HistoryError(str(exc)) from None


def in_range(df: DataFrame, column: str, days: DayRange) -> DataFrame:
    from pyspark.sql import functions as F

    return df.where((F.col(column) >= F.lit(days.start)) & (F.col(column) < F.lit(days.end)))


def read_pinned(spark: SparkSession, cfg: Config, name: str) -> tuple[DataFrame, int]:
    """The table ``name`` pinned to its latest version, and that version (the gateway's
    :func:`keyshift.lakehouse.delta.read_pinned`: a training run's lineage); a missing table
    or schema is the batch layer's :class:`HistoryError`."""
    from keyshift.lakehouse import delta

    try:
        return delta.read_pinned(spark, cfg, name)
    except (delta.TableMissingError, delta.TableSchemaError) as exc:
        raise HistoryError(str(exc)) from None


def read_metrics(spark: SparkSession, cfg: Config, days: DayRange) -> tuple[pd.DataFrame, int]:
    """The ``metrics`` windows of the range, oldest first, as pandas (the GPs' input), and
    the table version they were read at (:func:`read_pinned`)."""
    table, version = read_pinned(spark, cfg, "metrics")
    df = in_range(table, "window_start", days)
    return df.select(*TABLES["metrics"].names).orderBy("window_start").toPandas(), version


@dataclass(frozen=True)
class LoadHistory:
    """Histograms Y_t over a range, aggregated to buckets: ``loads`` has shape (m, p).

    ``state`` is the mean known state size per group (d_i), falling back to the group's mean
    load where the speed layer did not report one — the same default as
    :class:`keyshift.policies.Window`.
    """

    bucket_starts: np.ndarray  # epoch seconds, ascending, shape (m,)
    loads: np.ndarray
    state: np.ndarray
    bucket_s: int
    source_from: datetime
    source_to: datetime

    @property
    def windows(self) -> int:
        return int(self.loads.shape[0])

    @property
    def groups(self) -> int:
        return int(self.loads.shape[1])


def read_key_loads(
    spark: SparkSession, cfg: Config, days: DayRange, bucket_s: int = 3600
) -> LoadHistory | None:
    """Y_t per ``bucket_s`` bucket over the range, or None when the range holds no windows.

    Buckets instead of raw statistic windows: a day of 10-second windows times 4096 groups
    is 350 M cells, while CLB's covariance and the expected-imbalance report need only the
    shape of the daily cycle. Spark does the aggregation; only (bucket, group) sums reach
    the driver.
    """
    from pyspark.sql import functions as F

    if bucket_s < 1:
        raise ValueError(f"bucket_s: must be >= 1, got {bucket_s}")
    df = in_range(read_history(spark, cfg, "key_loads"), "window_start", days)
    agg = (
        df.withColumn(
            "bucket",
            (F.floor(F.unix_timestamp("window_start") / bucket_s) * bucket_s).cast("long"),
        )
        .groupBy("bucket", "group")
        .agg(F.sum("load").alias("load"), F.avg("state_bytes").alias("state_bytes"))
        .toPandas()
    )
    if agg.empty:
        return None
    p = cfg.groups.count
    group = agg["group"].to_numpy(dtype=np.int64)
    if group.min() < 0 or group.max() >= p:
        raise HistoryError(
            f"key_loads.group: values span {group.min()}..{group.max()}, outside 0..{p - 1}; "
            f"was the history written with another groups.count?"
        )
    buckets, row = np.unique(agg["bucket"].to_numpy(dtype=np.int64), return_inverse=True)
    loads = np.zeros((buckets.size, p))
    np.add.at(loads, (row, group), agg["load"].to_numpy(dtype=np.float64))
    state_sum = np.bincount(group, weights=agg["state_bytes"].fillna(0).to_numpy(), minlength=p)
    state_n = np.bincount(group, weights=agg["state_bytes"].notna().to_numpy(float), minlength=p)
    mean_load = loads.mean(axis=0)
    state = np.where(state_n > 0, state_sum / np.maximum(state_n, 1), mean_load)
    return LoadHistory(
        bucket_starts=buckets,
        loads=loads,
        state=state,
        bucket_s=bucket_s,
        source_from=datetime.fromtimestamp(int(buckets[0]), UTC),
        source_to=datetime.fromtimestamp(int(buckets[-1]) + bucket_s, UTC),
    )


def engine_loads_per_window(plan: Plan, loads: np.ndarray) -> np.ndarray:
    """L_t = Aᵀ Y_t for every window at once: (m, p) group loads → (m, engine slots)."""
    onehot = np.zeros((plan.groups, plan.slots))
    onehot[np.arange(plan.groups), plan.assignment] = 1.0
    return np.asarray(loads, dtype=np.float64) @ onehot


def imbalance_on_history(plan: Plan, loads: np.ndarray) -> dict[str, float]:
    """What a fixed plan would have done over a history (m, p): imbalance per window.

    Reported as the mean over windows of RSTD (dlb Eq. 2) and var(L) (elb-clb Eq. 1) —
    what the running job would have seen window after window — plus the RSTD of the
    whole range's totals, which hides the cycle and so flatters every plan.
    """
    per_window = engine_loads_per_window(plan, loads)[:, plan.live_engines]
    mean = per_window.mean(axis=1)
    std = per_window.std(axis=1)
    window_rstd = np.where(mean > 0, 100.0 * std / np.where(mean > 0, mean, 1.0), 0.0)
    totals = per_window.sum(axis=0)
    return {
        "rstd": float(window_rstd.mean()),
        "rstd_max": float(window_rstd.max()),
        "var": float((std**2).mean()),
        "rstd_total": rstd(totals),
        "var_total": load_variance(totals),
    }


# --- a synthetic history, written with the project's own schemas ----------------------


@dataclass(frozen=True)
class SyntheticHistory:
    """Parameters of a realistic-looking history: daily cycle, Zipf keys, drifting hot set.

    Input rate follows a daily cycle (night trough, evening peak, as in the NYC-taxi and
    Twitter-volume series of the shared data); key popularity is Zipf(``zipf``) over
    ``keys`` keys, and the hottest keys rotate every few hours so that the group-load series
    are correlated in blocks — the structure CLB exploits and LPTF ignores. Latency grows
    with utilisation (an M/M/1-shaped curve), so the latency GP has a signal in engines.

    ``days`` may be a fraction (an hour of batch-sized windows for ``keyshift demo
    --seed-history``). ``task_s`` is the fixed engine time per engine and window (task start,
    state load and save) that dominates the per-tuple latency of small windows, as measured
    on real runs; 0 leaves latency to the M/M/1 curve alone. ``scale_every_s`` > 0 redraws N
    from 1..``engines`` every so many seconds, a history in which a scaler ran, so the
    latency GP sees more than one engine count. ``run_id`` defaults to ``synthetic-<seed>``.
    """

    days: float = 3
    window_s: int = 600
    keys: int = 2000
    zipf: float = 1.1
    peak_rate: float = 200.0  # events per second at the daily peak
    engines: int = 4
    service_rate: float = 80.0  # events per second one engine can process
    seed: int = 7
    task_s: float = 0.0
    scale_every_s: int = 0
    run_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("window_s", "keys", "engines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not self.days > 0 or self.days * 86400 < self.window_s:
            raise ValueError(f"days: must cover at least one window, got {self.days}")
        if self.peak_rate <= 0 or self.service_rate <= 0:
            raise ValueError("peak_rate and service_rate: must be > 0")
        if self.task_s < 0 or self.scale_every_s < 0:
            raise ValueError("task_s and scale_every_s: must be >= 0")


def daily_shape(t: np.ndarray) -> np.ndarray:
    """The synthetic input rate's share of ``peak_rate`` at epoch seconds ``t`` (UTC):
    the daily cycle, peaking near 19:00, times 0.8 on weekends. A caller that wants the
    history to reach a given rate at a given moment divides by it."""
    t = np.asarray(t, dtype=np.float64)
    hours = np.mod(t, 86400.0) / 3600.0
    dow = np.mod(np.floor(t / 86400.0) + 3.0, 7.0)  # 1970-01-01 was a Thursday; Monday = 0
    cycle = 0.55 + 0.45 * np.sin(2 * np.pi * (hours - 13.0) / 24.0)
    return cycle * np.where(dow >= 5, 0.8, 1.0)


def synthetic_frames(
    cfg: Config, last_day: date | datetime, spec: SyntheticHistory = SyntheticHistory()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``metrics`` and ``key_loads`` rows for ``spec.days`` days ending with ``last_day``
    (a date: whole UTC days; a datetime: the history ends at that instant, floored to a
    window, so that a forecast for "now" continues it)."""
    import pandas as pd

    rng = np.random.default_rng(spec.seed)
    p = cfg.groups.count
    end = _history_end(last_day, spec.window_s)
    m = max(round(spec.days * 86400 / spec.window_s), 1)
    first = end - timedelta(seconds=m * spec.window_s)
    offsets = np.arange(m, dtype=np.int64) * spec.window_s
    starts = np.array([first + timedelta(seconds=int(s)) for s in offsets])
    rate = (spec.peak_rate * daily_shape(first.timestamp() + offsets)
            * rng.lognormal(0.0, 0.08, m))
    events = rng.poisson(rate * spec.window_s)

    key_groups = groups_of(np.array([f"k{i}" for i in range(spec.keys)]), p)
    base = 1.0 / np.arange(1, spec.keys + 1) ** spec.zipf
    rotation = (offsets // (6 * 3600)).astype(np.int64)  # every 6 h
    perms = np.stack([rng.permutation(spec.keys) for _ in range(rotation.max() + 1)])
    popularity = base[np.argsort(perms[rotation], axis=1)]  # (m, keys): rotated Zipf weights
    popularity /= popularity.sum(axis=1, keepdims=True)
    key_counts = rng.multinomial(events, popularity)  # (m, keys), exact per-window totals
    group_loads = np.zeros((m, p), dtype=np.int64)
    np.add.at(group_loads, (slice(None), key_groups), key_counts)

    if spec.scale_every_s:
        blocks = offsets // spec.scale_every_s
        engines = rng.integers(1, spec.engines + 1, blocks.max() + 1)[blocks]
    else:
        engines = np.full(m, spec.engines, dtype=np.int64)
    assignment = np.zeros((spec.engines + 1, p), dtype=np.int64)  # row n: the plan of n engines
    engine_loads: list[np.ndarray] = [np.zeros(0)] * m
    for n in np.unique(engines):
        plan = Plan.hashed(p, int(n))
        assignment[n] = plan.assignment
        rows = np.flatnonzero(engines == n)
        for i, loads in zip(rows, engine_loads_per_window(plan, group_loads[rows]), strict=True):
            engine_loads[i] = loads.astype(np.int64)
    load_mean = np.array([x.mean() for x in engine_loads])
    load_std = np.array([x.std() for x in engine_loads])
    load_max = np.array([x.max() for x in engine_loads])
    util = np.clip(load_max / (spec.service_rate * spec.window_s), 0, 0.98)
    latency = (1.0 / spec.service_rate) / (1.0 - util) * rng.lognormal(0.0, 0.05, m)
    if spec.task_s:
        latency = latency + spec.task_s * engines / np.maximum(events, 1)
    capacity = spec.service_rate * spec.window_s
    missed = np.array([np.clip(x - capacity, 0, None).sum() for x in engine_loads],
                      dtype=np.int64)
    out = rng.binomial(events, 0.02)
    run_id = spec.run_id or f"synthetic-{spec.seed}"
    metrics = pd.DataFrame({
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "batch_id": np.arange(m, dtype=np.int64),
        "window_start": pd.to_datetime(starts),
        "window_end": pd.to_datetime(starts + timedelta(seconds=spec.window_s)),
        "events_in": events.astype(np.int64),
        "dead_letter": np.zeros(m, dtype=np.int64),
        "processed": (events - missed).astype(np.int64),
        "out_events": out.astype(np.int64),
        "missed": missed,
        "selectivity": np.where(events > 0, out / np.maximum(events, 1), 0.0),
        "engines": engines.astype(np.int32),
        "engine_loads": engine_loads,
        "rstd": np.where(load_mean > 0, 100.0 * load_std / np.maximum(load_mean, 1e-12), 0.0),
        "var_load": load_std**2,
        "input_rate": events / spec.window_s,
        "latency_s": latency,
        "batch_duration_s": np.minimum(latency * events / engines, spec.window_s * 2.0),
        "plan_version": np.zeros(m, dtype=np.int64),
        "policy": "kg",
    })
    floors = [key_group_floor(y, int(n)) for y, n in zip(group_loads, engines, strict=True)]
    for col in FLOOR_COLUMNS:  # the floor of each window (keyshift.control.floor)
        metrics[col] = [f.columns()[col] for f in floors]
    metrics["hot_group"] = metrics["hot_group"].astype("Int32")
    for col in ("executors", "cores_held"):  # a model's history held no cluster
        metrics[col] = pd.array([None] * m, dtype="Int32")
    for col in ("e2e_p50_s", "e2e_p95_s"):  # nor a latency from Kafka to Delta
        metrics[col] = np.full(m, np.nan)
    metrics["workload"] = config_workload(cfg)  # the history stands for the config's workload
    w, g = np.nonzero(group_loads)
    load = group_loads[w, g]
    key_loads = pd.DataFrame({
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "batch_id": w.astype(np.int64),
        "window_start": pd.to_datetime(starts[w]),
        "group": g.astype(np.int32),
        "engine": assignment[engines[w], g].astype(np.int32),
        "load": load.astype(np.int64),
        "state_bytes": (load * 120).astype(np.int64),  # ~120 bytes of state per tuple kept
        "plan_version": np.zeros(w.size, dtype=np.int64),
    })
    return metrics[TABLES["metrics"].names], key_loads[TABLES["key_loads"].names]


def _history_end(last_day: date | datetime, window_s: int) -> datetime:
    """Where a synthetic history ends: after a whole ``last_day``, or at an instant floored
    to the window grid (so its windows tile the epoch like the speed layer's)."""
    if isinstance(last_day, datetime):  # before date: a datetime is a date too
        at = last_day if last_day.tzinfo else last_day.replace(tzinfo=UTC)
        return datetime.fromtimestamp(at.timestamp() // window_s * window_s, UTC)
    return datetime.combine(last_day + timedelta(days=1), time.min, UTC)


def write_synthetic_history(
    spark: SparkSession, cfg: Config, last_day: date, spec: SyntheticHistory = SyntheticHistory()
) -> dict[str, Any]:
    """Write a synthetic ``metrics`` + ``key_loads`` history; re-running replaces it."""
    from keyshift.lakehouse.delta import replace_runs

    metrics, key_loads = synthetic_frames(cfg, last_day, spec)
    return {
        "days": _span(metrics),
        "metrics_rows": replace_runs(spark, cfg, "metrics", metrics),
        "key_loads_rows": replace_runs(spark, cfg, "key_loads", key_loads),
        "warehouse": str(cfg.warehouse_path),
    }


def _span(metrics: pd.DataFrame) -> str:
    """The UTC days a written history touches, as ``keyshift job`` prints ranges."""
    return str(DayRange(metrics.window_start.iloc[0].date(), metrics.window_start.iloc[-1].date()))
