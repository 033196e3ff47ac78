"""Every data contract of keyshift in one versioned module: the Kafka event envelope (each
operator declares its payload columns with the types below; ``EVENTS`` holds the four shipped
applications') and the Delta tables under the warehouse root.

Types are Spark SQL DDL type names, so that this module stays free of Spark (the pure core)
while the streaming and batch layers build ``StructType``s from :meth:`TableSchema.ddl`.
Bump ``SCHEMA_VERSION`` (and the table's ``version``) on any incompatible change; the
writers stamp it into every row so a reader can tell old rows from new ones.

Adding a column is a bump too: the column is nullable and says which version added it
(``since``). Tables written before it lack it: the readers of ``keyshift.lakehouse.delta``
see it as null there (and in older staged rows), and the first append of a newer writer
adds it to the table (Delta's schema evolution, :attr:`TableSchema.evolved`), so rows of
every version read alike, the old ones with nulls.

History: version 2 added the floor of each batch and window (``floor_ratio``,
``floor_rstd``, ``hot_group``, ``hot_group_share``; ``keyshift.control.floor``) to
``metrics`` and ``decisions``. Version 3 added a scale-out's verdict to ``decisions``
(``effectiveness``, ``hold_until_window``) and the guardrails' state to ``control_state``
(``guard``; ``keyshift.control.guard``). Version 4 added what a run held to ``metrics``
(``executors``, ``cores_held``; ``keyshift.streaming.executors``). Version 5 added how long
a batch's events waited for their complex events' commit to ``metrics`` (``e2e_p50_s``,
``e2e_p95_s``; ``keyshift.control.batch_cost``). Version 6 added the run's workload to
``metrics`` (``workload``; ``keyshift.workload_names``): the retrain fits each workload's
forecasters on its own rows.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 6


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL DDL type: STRING, BIGINT, INT, DOUBLE, BOOLEAN, TIMESTAMP, BINARY, ARRAY<..>
    nullable: bool = True
    doc: str = ""
    since: int = 1  # the schema version that added the column (later ones are nullable)


@dataclass(frozen=True)
class TableSchema:
    name: str
    version: int
    columns: tuple[Column, ...]
    doc: str = ""
    partition_by: tuple[str, ...] = ()
    # the columns Delta keeps file statistics for (its data skipping), for a table the job
    # appends to in every micro-batch: those readers filter on. Every column's (Delta's
    # default, the first 32) made a small append ~35 % dearer in a microbenchmark (0.47
    # against 0.35 s on a loaded machine), though within the noise of a whole batch
    # (bench/results/floor.md, "Cutting keyshift's part"); empty: Delta's default
    stats_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if unknown := [c for c in self.stats_columns if c not in self.names]:
            raise ValueError(f"{self.name}: stats_columns {unknown} are not its columns")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def ddl(self) -> str:
        """``name TYPE [NOT NULL], ...``: what ``StructType.fromDDL``/``spark.read.schema`` take."""
        return ", ".join(
            f"`{c.name}` {c.type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns
        )

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.nullable]

    @property
    def added(self) -> list[Column]:
        """Columns added after the table's first version: null in the rows of older
        writers, absent from tables they made."""
        return [c for c in self.columns if c.since > 1]

    @property
    def evolved(self) -> bool:
        """Whether an older table may lack columns (an append then adds them)."""
        return bool(self.added)


def _c(name: str, type_: str, nullable: bool = True, doc: str = "", since: int = 1) -> Column:
    if since > 1 and not nullable:
        raise ValueError(f"column {name}: a column added in version {since} must be nullable")
    return Column(name, type_, nullable, doc, since)


# the floor of a batch (metrics) or a statistic window (decisions): keyshift.control.floor
_FLOOR = (
    _c("floor_ratio", "DOUBLE", True, "max(hottest key group's load, mean engine load) / mean "
       "engine load: the least max/mean any plan keeping a key on one engine reaches", 2),
    _c("floor_rstd", "DOUBLE", True, "the least imbScore (%) such a plan reaches: "
       "100·(floor_ratio − 1)/√(engines − 1)", 2),
    _c("hot_group", "INT", True, "the key group with the most load (null: no load)", 2),
    _c("hot_group_share", "DOUBLE", True, "its load / the total load", 2),
)

# the verdict on a scale-out (keyshift.control.guard), on its 'ineffective' or judged row
_VERDICT = (
    _c("effectiveness", "DOUBLE", True, "achieved / expected drop of the busiest engine's "
       "share of the input (or of the lag), the smaller; below planner.effectiveness the "
       "scale-out was ineffective", 3),
    _c("hold_until_window", "BIGINT", True, "no scale-out is realized before this window "
       "(the cool-off after an ineffective one)", 3),
)


# --- Kafka events -------------------------------------------------------------------
# Every event is one JSON object with a unique id, a key and an event time in epoch
# milliseconds; the rest is the application's payload. Oversized records are rejected.
MAX_EVENT_BYTES = 64 * 1024

ENVELOPE: tuple[Column, ...] = (
    _c("id", "STRING", False, "producer-assigned unique event id"),
    _c("key", "STRING", False, "partition attribute; hashed to a key group"),
    _c("ts", "BIGINT", False, "event time, epoch milliseconds"),
)

# The payload beyond the envelope is declared by each operator (``event_columns`` of
# keyshift.apps.base.Operator, Operator API), so a user's operator brings its own event
# schema: ``keyshift.apps.event_schema(spec)`` resolves it, ``keyshift.apps.EVENTS`` holds
# the shipped applications' ones. This module keeps what every event shares.


# --- Delta tables -------------------------------------------------------------------
_RUN = (
    _c("schema_version", "INT", False),
    _c("run_id", "STRING", False, "one streaming query / job run"),
)

TABLES: dict[str, TableSchema] = {
    "metrics": TableSchema(
        "metrics", 3,
        _RUN + (
            _c("batch_id", "BIGINT", False),
            _c("window_start", "TIMESTAMP", False),
            _c("window_end", "TIMESTAMP", False),
            _c("events_in", "BIGINT", False, "valid events routed in this window (In)"),
            _c("dead_letter", "BIGINT", False),
            _c("processed", "BIGINT", False),
            _c("out_events", "BIGINT", False, "complex events emitted (Out)"),
            _c("missed", "BIGINT", False, "tuples not processed within the window (Miss)"),
            _c("selectivity", "DOUBLE", False, "Out / In (sel)"),
            _c("engines", "INT", False, "live engines (π)"),
            _c("engine_loads", "ARRAY<BIGINT>", False, "events per engine slot"),
            _c("rstd", "DOUBLE", False, "imbScore, dlb Eq. 2"),
            _c("var_load", "DOUBLE", False, "var(L), elb-clb Eq. 1"),
            _c("input_rate", "DOUBLE", False, "events per second"),
            _c("latency_s", "DOUBLE", False, "mean processing latency per event (Lat)"),
            _c("batch_duration_s", "DOUBLE", False),
            _c("plan_version", "BIGINT", False),
            _c("policy", "STRING", False),
        ) + _FLOOR + (
            _c("executors", "INT", True, "executors the run held after the batch (null: a "
               "local master)", since=4),
            _c("cores_held", "INT", True, "cores the run held after the batch: the cluster "
               "manager's count when spark.master_ui is set", since=4),
            _c("e2e_p50_s", "DOUBLE", True, "median seconds from an event's Kafka append to "
               "the Delta commit of the complex event it produced (null: none)", since=5),
            _c("e2e_p95_s", "DOUBLE", True, "their 95th percentile", since=5),
            _c("workload", "STRING", True, "the run's workload (mlflow.workload, else "
               "<operator>@<topic>): whose forecasters the row trains (null: a row of before "
               "version 6, the retrain's own workload)", since=6),
        ),
        "one row per statistic window: the batch layer's history for the GPs",
    ),
    "key_loads": TableSchema(
        "key_loads", 1,
        _RUN + (
            _c("batch_id", "BIGINT", False),
            _c("window_start", "TIMESTAMP", False),
            _c("group", "INT", False),
            _c("engine", "INT", False),
            _c("load", "BIGINT", False, "tuples of the group in the window (y_it)"),
            _c("state_bytes", "BIGINT", True, "state size of the group (d_i) when known"),
            _c("plan_version", "BIGINT", False),
        ),
        "histogram Y_t per window, one row per non-empty group",
    ),
    "plans": TableSchema(
        "plans", 1,
        (
            _c("schema_version", "INT", False),
            _c("version", "BIGINT", False, "monotonic per plan scope"),
            _c("scope", "STRING", False, "who reads it: a run id, or 'baseline' for batch plans"),
            _c("created_at", "TIMESTAMP", False),
            _c("policy", "STRING", False),
            _c("groups", "INT", False),
            _c("engines", "INT", False, "engine slots"),
            _c("live", "ARRAY<BOOLEAN>", False),
            _c("assignment", "ARRAY<INT>", False, "engine slot per key group"),
            _c("source_from", "TIMESTAMP", True, "history window the plan was computed on"),
            _c("source_to", "TIMESTAMP", True),
            _c("expected_rstd", "DOUBLE", True),
            _c("expected_var", "DOUBLE", True),
            _c("reason", "STRING", True),
        ),
        "versioned group → engine plans; the newest version of a scope is in force",
    ),
    "dead_letter": TableSchema(
        "dead_letter", 1,
        _RUN + (
            _c("batch_id", "BIGINT", False),
            _c("topic", "STRING", False),
            _c("partition", "INT", False),
            _c("offset", "BIGINT", False),
            _c("kafka_ts", "TIMESTAMP", True),
            _c("raw", "STRING", True, "the record as received (truncated when oversized)"),
            _c("reason", "STRING", False),
        ),
        "records that failed validation, with the reason; the job keeps running",
        stats_columns=("run_id", "batch_id"),
    ),
    "events_out": TableSchema(
        "events_out", 1,
        _RUN + (
            _c("batch_id", "BIGINT", False),
            _c("app", "STRING", False),
            _c("engine", "INT", False),
            _c("group", "INT", False),
            _c("key", "STRING", False),
            _c("ts", "BIGINT", False, "event time of the triggering event, epoch ms"),
            _c("kind", "STRING", False, "complex event type"),
            _c("detail", "STRING", True, "JSON payload"),
            _c("event_id", "STRING", False, "id of the triggering event"),
        ),
        "complex events produced by the operators",
        stats_columns=("run_id", "batch_id"),
    ),
    "state_snapshots": TableSchema(
        "state_snapshots", 1,
        _RUN + (
            _c("migration_id", "STRING", False),
            _c("plan_version", "BIGINT", False),
            _c("group", "INT", False),
            _c("from_engine", "INT", False),
            _c("to_engine", "INT", False),
            _c("state", "BINARY", True),
            _c("bytes", "BIGINT", False),
            _c("batch_id", "BIGINT", False),
            _c("created_at", "TIMESTAMP", False),
        ),
        "state of moving groups between the old engine's snapshot and the new one's restore",
    ),
    "migrations": TableSchema(
        "migrations", 1,
        _RUN + (
            _c("migration_id", "STRING", False),
            _c("plan_version", "BIGINT", False),
            _c("groups", "ARRAY<INT>", False),
            _c("from_engines", "ARRAY<INT>", False),
            _c("to_engines", "ARRAY<INT>", False),
            _c("bytes", "BIGINT", False),
            _c("status", "STRING", False, "started | completed"),
            _c("started_at", "TIMESTAMP", False),
            _c("ended_at", "TIMESTAMP", True),
            _c("batch_start", "BIGINT", False),
            _c("batch_end", "BIGINT", True),
        ),
        "one row per migration step, so a pending migration is recoverable from Delta",
    ),
    "decisions": TableSchema(
        "decisions", 3,
        _RUN + (
            _c("batch_id", "BIGINT", False),
            _c("decided_at", "TIMESTAMP", False),
            _c("component", "STRING", False, "balancer | scaler"),
            _c("policy", "STRING", False),
            _c("action", "STRING", False, "none | rebalance | scale_out | scale_in | ..."),
            _c("reason", "STRING", False),
            _c("rstd_before", "DOUBLE", True),
            _c("rstd_after", "DOUBLE", True),
            _c("moved_groups", "INT", True),
            _c("moved_state", "DOUBLE", True),
            _c("engines_before", "INT", True),
            _c("engines_after", "INT", True),
            _c("plan_version", "BIGINT", True),
        ) + _FLOOR + _VERDICT,
        "the controller's event log: every decision and its reason (the floor columns: "
        "the window's)",
    ),
    "control_state": TableSchema(
        "control_state", 3,
        _RUN + (
            _c("batch_id", "BIGINT", False, "the batch that closed the window"),
            _c("window", "BIGINT", False, "statistic window number"),
            _c("plan_version", "BIGINT", True, "plan version put in force (null: no change)"),
            _c("obs_t", "DOUBLE", True, "scaler sample: window start, epoch s"),
            _c("obs_in", "DOUBLE", True, "scaler sample: tuples in (In)"),
            _c("obs_lat_s", "DOUBLE", True, "scaler sample: engine seconds per tuple (Lat)"),
            _c("obs_engines", "INT", True, "scaler sample: live engines that ran the window"),
            _c("path", "ARRAY<INT>", True, "scaler: planned engine counts over the horizon"),
            _c("position", "INT", True, "scaler: path steps taken"),
            _c("since_change", "INT", True, "scaler: windows since the last change of N"),
            _c("fc_in", "DOUBLE", True, "scaler: forecast In of the window entered"),
            _c("fc_lat", "DOUBLE", True, "scaler: forecast Lat of the window entered"),
            _c("proposed", "INT", True, "scaler: engine count it wanted"),
            _c("engines_after", "INT", True, "scaler: engine count it decided"),
            _c("reason", "STRING", True, "scaler: the decision's reason as recorded"),
            _c("written_at", "TIMESTAMP", False),
            _c("guard", "STRING", True, "the guardrails' state after the window as JSON "
               "(keyshift.control.guard.GuardState)", 3),
        ),
        "the control loop's typed state per window end (read back on restart; "
        "decisions is the human-readable log and is never read back)",
    ),
    "migration_costs": TableSchema(
        "migration_costs", 1,
        _RUN + (
            _c("batch_id", "BIGINT", False, "the batch that realized the migration"),
            _c("groups", "INT", False, "key groups moved"),
            _c("bytes", "BIGINT", False, "state bytes moved"),
            _c("pause_s", "DOUBLE", False, "seconds the migration added to its batch"),
            _c("rate", "DOUBLE", False, "input events/s while it ran"),
            _c("scale", "BOOLEAN", False, "it changed the engine count (else a rebalance)"),
            _c("engines_before", "INT", True),
            _c("engines_after", "INT", True),
            _c("missed", "DOUBLE", True, "events the pause made late (the job: pause_s x rate)"),
            _c("written_at", "TIMESTAMP", False),
        ),
        "each realized migration as measured, what the learned reconfiguration cost is "
        "fitted on (keyshift.elastic.reconfiguration; read back on restart)",
    ),
    "input_rates": TableSchema(
        "input_rates", 1,
        _RUN + (
            _c("workload", "STRING", False, "whose input-rate forecaster the rows train"),
            _c("topic", "STRING", False, "the topic whose record timestamps were counted"),
            _c("window_start", "TIMESTAMP", False),
            _c("window_end", "TIMESTAMP", False),
            _c("events_in", "BIGINT", False, "records whose Kafka timestamp fell in the window"),
            _c("input_rate", "DOUBLE", False, "events per second"),
            _c("derived_at", "TIMESTAMP", False, "when the topic was read"),
        ),
        "a topic's own past as input rates, one row per window of its records' timestamps "
        "(keyshift.jobs.topic_rates): the input-rate forecaster's history before any run",
    ),
}


def table(name: str) -> TableSchema:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}") from None
