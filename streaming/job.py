"""The streaming job: Kafka → validate → route by plan → engines → Delta, controlled per window.

One ``foreachBatch`` function composes the speed layer for micro-batch b:

1. validate the records (bad ones → ``dead_letter`` with the reason, the job goes on);
2. route: key → group (xxHash64, in the JVM) → engine through the plan in force for b;
3. when the plan changed since b−1, each moving group's new engine reads the group's state
   as of b−1 from its old engine before it runs the group's events (:mod:`keyshift.streaming.migration`);
   with ``dc``/``wc`` the input tasks replace the events of the groups the policy found hot
   in the last window by their summaries per key, for the groups' home engines
   (:mod:`keyshift.streaming.engines`);
4. engines: one task per engine slot (:func:`keyshift.streaming.engines.run_engine`), state durable
   off the executor (:mod:`keyshift.streaming.engine_state`);
5. the driver collects per-group loads, one record per task and, in the same job, the
   complex events of tasks whose outputs are light, which it commits to ``events_out``
   through delta-rs (:mod:`keyshift.streaming.output_appends`); the executors append
   ``dead_letter`` (and ``events_out`` when a task kept its rows) from the engine stage's
   cached result and stage ``key_loads`` (and a migration's ``state_snapshots``); the
   driver stages ``metrics`` and runs the controller (collect, and at a window's end
   evaluate, decide, realize, record). The staged bookkeeping is committed once per
   ``warehouse.commit_interval_s`` (:mod:`keyshift.streaming.staging`).

The driver handles O(groups + engines) numbers per batch and a light batch's complex events
(at most ``staging.HELD_BYTES`` in all), never an event or a byte of state.

Recovery: Kafka offsets and the query's checkpoint replay an unfinished batch with the same
offsets; Delta appends are idempotent per batch; engine state is read as of the batch
before; the controller rebuilds its state from Delta. So a crash anywhere, mid-migration
included, followed by a restart gives the output of an uninterrupted run.

When batches run at all (the query's start and watches, the gate a stopping job closes, a
warehouse outage ridden out by a restart in place, the stop) is
:mod:`keyshift.streaming.query_lifecycle`'s; this module sets a run up and runs its batches.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.apps import event_schema, make_operator, resolve_operator
from keyshift.config import Config, with_workload
from keyshift.control import policy_from_config
from keyshift.control.admission import Admission, AdmissionSettings, BatchLoad
from keyshift.control.batch_cost import batch_e2e, run_cost
from keyshift.control.window_clock import TimedWindows
from keyshift.lakehouse.delta import RunAppends, concurrently
from keyshift.lakehouse.logs import say
from keyshift.lakehouse.storage import read_if_exists, write_atomically
from keyshift.metrics import Balance, live_loads
from keyshift.startup import StartupClock
from keyshift.plan import Plan
from keyshift.policies import (
    PolicyInputError,
    check_operator,
    policy_class,
)
from keyshift.policies.hot_split import splitting_policy
from keyshift.quantiles import merged_quantiles

from .broker_watch import BrokerWatch
from .source_resume import resume_source
from .code_shipping import prepare_executors
from .controller import Controller, ControlLog, progress_lag
from .batch_frames import EVENTS_OUT_FROM, BatchFrames, events_out_rows
from .engines import LOAD, OUT_FETCHED, TASK, BatchSpec, work_seconds
from .executors import RunResources, task_cores, write_held
from .faults import NO_FAULTS, Phases
from .flush import Flush
from .heartbeat import Heartbeat
from .migration import Migration, PauseMeter, record
from .output_appends import OutputAppends
from .placement import placement_keys
from .query_lifecycle import (
    QueryLifecycle,
    QueryShape,
    drop_planned_batches,
    kafka_stream,
    wait_committed,
)
from .split_windows import SplitWindows
from .staging import StagedAppends
from .storage_watch import StorageWatch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TABLES_WRITTEN = ("events_out", "metrics", "key_loads", "dead_letter", "plans", "decisions",
                  "state_snapshots", "migrations", "control_state", "migration_costs")


@dataclass
class JobOptions:
    """One run of the streaming job."""

    app: str
    policy: str
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-")
                        + uuid.uuid4().hex[:6])
    topic: str | None = None
    groups: int | None = None
    engines: int | None = None
    trigger_s: float | None = None
    app_params: dict[str, Any] = field(default_factory=dict)
    max_offsets_per_trigger: int | None = None
    policy_params: dict[str, Any] = field(default_factory=dict)
    available_now: bool = False  # process what the topic holds, then stop
    starting_offsets: str = "earliest"  # where a new run starts in the topic
    ingest_only: bool = False  # validate, route and count only (keyshift stream): no operator
    # the user's code for the executors (--py-files, already on the driver's path):
    # streaming/code_shipping.py ships them and the operator's own module
    py_files: tuple[str, ...] = ()
    # told each phase of a batch the job reaches; the fault tests' hook kills there
    # (keyshift.streaming.faults; keyshift run installs it from KS_FAULT_KILL_AT)
    phases: Phases = NO_FAULTS


@dataclass
class Totals:
    """Running counters of this process (the durable ones are in Delta ``metrics``)."""

    batches: int = 0
    records: int = 0
    events_in: int = 0
    processed: int = 0
    dead_letter: int = 0
    complex_events: int = 0
    migrations: int = 0
    moved_groups: int = 0
    moved_bytes: int = 0
    last_batch: int = -1
    durations: list[float] = field(default_factory=list)
    stop_commit_s: float = 0.0  # the staged bookkeeping committed at stop, after the batches


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did, for a progress line (``keyshift run``) or a test."""

    batch_id: int
    events: int
    dead_letter: int
    complex_events: int
    rstd: float
    engines: int
    plan_version: int
    moved_groups: int
    moved_bytes: int
    duration_s: float
    # from an event's Kafka append to its complex event's Delta commit (None: no output)
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None


@dataclass
class _BatchClock:
    """One micro-batch's clocks: its start and the seconds of its steps (the timing line's
    ``*_s``, keyshift.control.batch_cost's stages)."""

    t0: float
    start_wall: datetime
    recover_s: float = 0.0
    waited_s: float = 0.0  # a scale-out's wait for its executors (inside prep_s)
    prep_s: float = 0.0
    engines_started_at: float = 0.0
    engines_s: float = 0.0
    controller_s: float = 0.0
    writes_s: float = 0.0
    metrics_s: float = 0.0
    # the staged bookkeeping's commit ran behind the stream when the engine stage started:
    # the batch shared the cores with it (bench stream's bound leaves such batches out)
    beside_commit: bool = False
    window: int = 0  # the statistic window the batch counted in


@dataclass(frozen=True)
class _PlannedBatch:
    """What a batch runs with: the plan in force and the one before, the migration between
    them, the slots, the split groups, the spec its tasks get and the engine stage's input."""

    plan: Plan
    prev: Plan
    migration: Migration
    slots: int
    split: tuple[int, ...]
    spec: BatchSpec
    routed: DataFrame


@dataclass(frozen=True)
class EngineRun:
    """What a batch's engine tasks reported to the driver: their task records (the split
    groups' tasks apart), the input and the state size per key group, and the sums the
    metrics row and the totals read."""

    tasks: list[dict[str, Any]]
    split_tasks: list[dict[str, Any]]
    loads: np.ndarray
    state: np.ndarray
    outs: int
    moved: int
    dead: int
    valid: int
    engine_s: float
    arrival_span_s: float
    # the Kafka append times of the batch's first and last event (None: no event)
    kafka_span: tuple[float, float] | None = None
    # every output of the batch, fetched with the small rows (None: the executors hold some)
    fetched: pa.Table | None = None

    @classmethod
    def of(cls, small: pa.Table, groups: int) -> EngineRun:
        """From the engine stage's small rows (``tag``, ``grp``, ``n``, ``size``, ``task``)
        as Arrow: a batch brings up to one row per group, summed here by column, and the
        outputs of the tasks that had them fetched (:data:`OUT_FETCHED`)."""
        import pyarrow.compute as pc

        records = [json.loads(t) for t in
                   small.filter(pc.equal(small["tag"], TASK))["task"].to_pylist()]
        tasks = [t for t in records if not t.get("split")]
        load_rows = small.filter(pc.equal(small["tag"], LOAD))
        grp = load_rows["grp"].to_numpy(zero_copy_only=False).astype(np.int64)
        loads = np.bincount(grp, weights=load_rows["n"].to_numpy(zero_copy_only=False),
                            minlength=groups).astype(float)
        state = np.zeros(groups)
        np.maximum.at(state, grp, load_rows["size"].to_numpy(zero_copy_only=False))
        arrived = [(t["kafka_ts_first"], t["kafka_ts_last"]) for t in records
                   if t.get("kafka_ts_first") is not None]
        kafka_span = ((min(a for a, _ in arrived), max(b for _, b in arrived)) if arrived
                      else None)
        span = kafka_span[1] - kafka_span[0] if kafka_span else 0.0
        return cls(tasks=tasks, split_tasks=[t for t in records if t.get("split")],
                   loads=loads, state=state, outs=sum(t["outputs"] for t in tasks),
                   fetched=(small.filter(pc.equal(small["tag"], OUT_FETCHED))
                            if all(t.get("outputs_fetched") for t in tasks if t["outputs"])
                            else None),
                   moved=sum(t.get("restored_bytes", 0) for t in tasks),
                   dead=sum(t["dead"] for t in records),
                   valid=sum(t["events"] for t in records),
                   engine_s=work_seconds(records), arrival_span_s=span,
                   kafka_span=kafka_span)


class StreamJob:
    """Sets a run up and runs its batches; ``process_batch`` is the whole per-batch logic,
    its query's life is :class:`QueryLifecycle`'s."""

    def __init__(self, spark: SparkSession, cfg: Config, options: JobOptions,
                 on_batch: Callable[[BatchReport], None] | None = None,
                 startup: StartupClock | None = None) -> None:
        self.spark = spark
        # the phases of the process's start-up to its first batch (keyshift.startup)
        self.startup = startup
        # the workload whose champions the run follows and whose history its metrics rows
        # are (keyshift.workload_names): resolved once, so every part reads the same one
        cfg = with_workload(cfg, options.app, options.topic or cfg.kafka.topic)
        self.workload = cfg.mlflow.workload
        self.cfg = cfg
        self.opt = options
        self.app = options.app
        self.event_schema = event_schema(self.app)  # a bad operator spec fails here, with why
        # the operator's code on every executor, and one task per executor that imports it,
        # before any task of the stream runs: a user's module that does not reach them fails
        # here in seconds, naming them (streaming/code_shipping.py)
        self.operator_code = prepare_executors(
            spark, resolve_operator(self.app).cls, [Path(p) for p in options.py_files],
            cfg.home_path / "pyfiles")
        self.splitter = None if options.ingest_only else hot_key_splitter(
            cfg, options.policy, options.app, options.app_params, options.policy_params)
        self.groups = options.groups or cfg.groups.count
        # the engines a new run starts with (a plan's slots and live engines change after)
        self.initial_engines = options.engines or cfg.engines.initial
        self.trigger_s = options.trigger_s or cfg.spark.trigger_s
        self.run_id = options.run_id
        self.run_dir = cfg.run_dir(self.run_id)
        self.topic = options.topic or cfg.kafka.topic
        self.checkpoint = cfg.checkpoint_uri(self.run_id)
        self.state_uri = cfg.engine_state_uri(self.run_id)
        self.per_window = max(1, round(cfg.controller.window_s / self.trigger_s))
        self.totals = Totals()
        self.on_batch = on_batch
        self.run_uri = cfg.runs_uri(self.run_id)  # the run's files by Delta
        self._lock = threading.Lock()
        # when batches run at all: the query's start, stop and outages
        # (streaming/query_lifecycle.py)
        self.lifecycle = QueryLifecycle(
            QueryShape(f"keyshift-{self.run_id}", self.checkpoint, self.trigger_s,
                       options.available_now),
            StorageWatch(cfg.warehouse_uri, cfg.warehouse.outage_s),
            BrokerWatch(cfg.kafka.bootstrap), Heartbeat(self.run_uri, self.trigger_s))
        # the batch's frames: parse, route, engine stage, outputs (streaming/batch_frames.py)
        self.frames = BatchFrames(self.app, self.event_schema.names, self.groups,
                                  self.run_id, self.topic)
        # the executors the run holds, and with resources = "executors" the scaler that makes
        # them follow the plan (streaming/executors.py); kept across restarts in place
        self.resources = RunResources.for_job(cfg, spark)
        self._actions_written: set[int] = set()
        # how many records a batch reads: what the engines can do in about a window, the
        # user's max_offsets_per_trigger the ceiling (keyshift.control.admission)
        self.admission = admission_for(cfg, options, self.run_dir)
        self.admission_restarts: list[dict[str, Any]] = []
        # offsets per partition Kafka deleted unread and the run skips (fail_on_data_loss
        # false), said in a warning line at start and kept for the summary
        self.skipped_offsets: dict[str, int] = {}
        self._new_attempt()

    def _new_attempt(self) -> None:
        """What one attempt of the query keeps and a restart in place starts afresh, as a
        restarted process would (:meth:`ride_out`): the appends, the controller, the staging
        and the per-window caches."""
        spark, cfg, options = self.spark, self.cfg, self.opt
        self.appends = RunAppends(spark, cfg, self.run_id)
        self.outputs = OutputAppends(cfg, self.appends)
        # the run's bookkeeping rows (metrics, the control store's, migrations) wait here
        # for one commit per interval: the job flushes them (StagedAppends.commit_behind)
        watch = self.lifecycle.storage_watch
        self.staging = StagedAppends(spark, f"{self.run_uri}/staged", self.appends,
                                     cfg.warehouse.commit_interval_s, watch=watch)
        # ... which it commits behind the stream, when the input pauses and at stop
        self.flushes = Flush(self.staging, watch, self.lifecycle.batch_lock,
                             self.trigger_s + 0.5)
        self.log = ControlLog(spark, cfg, self.run_id, stager=self.staging)
        # statistic windows of controller.window_s seconds, however long the batches are
        self.controller = Controller(cfg, self.run_id, options.policy, self.groups,
                                     self.initial_engines,
                                     TimedWindows(float(cfg.controller.window_s),
                                                  self.trigger_s), self.log,
                                     options.policy_params)
        # dc / wc: the groups each batch splits, from the last closed window's loads
        self.split_windows = SplitWindows(self.splitter, self.controller.last_window_loads)
        self._caches: dict[int, str] = {}  # engine → cache id its last task reported
        # a migration's pause, measured for the loop's learned reconfiguration cost
        self.pauses = PauseMeter()
        self.frames.forget_route()
        self._recovered = False

    # -- query ------------------------------------------------------------------------
    @property
    def query(self) -> StreamingQuery | None:
        """The running attempt's query (None before :meth:`start`)."""
        return self.lifecycle.query

    def start(self) -> StreamingQuery:
        """Set the run up (tables, resume checks, the controller or what a predecessor
        staged) and start the query (:meth:`QueryLifecycle.start`)."""
        from keyshift.lakehouse.delta import align_stats_columns, ensure_tables

        self._startup_mark("the job's set-up")
        # the warehouse first: a warehouse that cannot be made is the first thing said
        made = ensure_tables(self.spark, self.cfg, TABLES_WRITTEN)
        if self.query is None:  # a restart in place (ride_out) resumes the topic it checked
            # tables an older keyshift made get the statistics columns of their contract
            align_stats_columns(self.spark, self.cfg,
                                [n for n in TABLES_WRITTEN if n not in made])
            # a recreated topic refuses the resume; skipped records are said (source_resume.py)
            self.skipped_offsets = resume_source(self.cfg, self.run_id, self.topic,
                                                 self.checkpoint, self.run_uri)
        # a run no process started before has written nothing: its first batch need not look
        self._startup_mark("the warehouse's tables and the topic's resume check")
        marker = f"{self.run_uri}/started"
        self.appends.fresh = read_if_exists(marker) is None
        write_atomically(marker, datetime.now(UTC).isoformat().encode())
        if self.appends.fresh:
            # a new run starts at batch 0: set the controller up now (initial plan), as run
            # set-up rather than inside the first batch; a resumed run recovers in its first
            # batch, whose id only Spark's checkpoint knows
            self.controller.recover(0, fresh=True)
            self._recovered = True
            self._startup_mark("the control state and the first plan")
            # the cluster manager gave what the application may take: keep what the first
            # plan needs (streaming/executors.py)
            self._say_scale(self.resources.at_start(self.controller.plan_for(0).parallelism))
            self._startup_mark("the start-up cores the first plan does not need given back")
            # its only staged rows are that initial plan (batch -1), which nothing reads
            # back while it runs: committed behind the stream, so the query's start and first
            # batch overlap the cold JVM's first Delta commit (3-4 s, issue 25 item 7); a
            # kill before it lands leaves the files for the restart's recovery
            self.staging.commit_behind(0)
        else:
            # what a predecessor staged goes to Delta before anything reads it (the
            # controller reads the open window's key loads, plans and control state)
            self.staging.recover()
            self._startup_mark("what the run's predecessor staged, committed")
        self._write_job_description()
        self._startup_mark("the run's description and the staged commit's start")
        query = self.lifecycle.start(self._source(), self.process_batch)
        self._startup_mark("the query's start")
        return query

    def _startup_mark(self, phase: str) -> None:
        if self.startup is not None:
            self.startup.mark(phase)

    def _source(self) -> DataFrame:
        """The topic, parsed, read at most the admitted records a batch. Parsed in the query
        itself, so the batch function holds only what changes per batch."""
        source = kafka_stream(
            self.spark, self.cfg, self.topic, starting_offsets=self.opt.starting_offsets,
            max_offsets=self.read_limit,
            min_partitions=None if self.splitter is None else self.initial_engines)
        return self.frames.parse(source)

    @property
    def read_limit(self) -> int:
        """Records a batch may read now: admission's bound, else the configured maximum."""
        if self.admission is not None:
            return self.admission.limit
        return self.opt.max_offsets_per_trigger or self.cfg.spark.max_offsets_per_trigger

    def _admit(self, batch_id: int, b: _PlannedBatch, ran: EngineRun, clock: _BatchClock,
               duration: float) -> None:
        """After a batch: a new read bound from its cost, and the query restarted with it
        between batches, on a thread of its own (the batch function cannot stop its query)."""
        if self.admission is None:
            return
        cores = int(self.resources.cores_held or 0)
        now_live = b.plan.parallelism
        next_live = self.controller.plan_for(batch_id + 1).parallelism
        limit = self.admission.next_limit(
            BatchLoad(events=ran.valid + ran.dead, critical_s=clock.engines_s,
                      engines=min(now_live, cores) if cores else now_live,
                      duration_s=duration, lag=progress_lag(self.query),
                      moved=len(b.migration) > 0),
            min(next_live, cores) if cores else next_live, time.monotonic())
        if limit is None:
            return
        say(f"keyshift: {self.run_id} batch {batch_id}: reading {self.admission.describe()}; "
            "the query restarts in place with it")
        write_atomically(str(self.run_dir / "admission.json"),
                         json.dumps({"limit": limit, "batch_id": batch_id}).encode())

        def swap() -> None:
            t0 = time.perf_counter()
            done = self.lifecycle.swap_source(
                self._source, self.process_batch,
                lambda: drop_planned_batches(self.spark, self.checkpoint, batch_id),
                lambda: wait_committed(self.spark, self.checkpoint, batch_id))
            self.admission_restarts.append(
                {"batch_id": batch_id, "limit": limit, "ok": done,
                 "restart_s": round(time.perf_counter() - t0, 3)})

        threading.Thread(target=swap, name=f"keyshift-admission-{batch_id}",
                         daemon=True).start()

    def _write_job_description(self) -> None:
        """``job.json`` in the run folder: what the run is, for ``keyshift status`` and a
        replay of how its plan evolved (``keyshift simulate --calibrate``)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "job.json").write_text(json.dumps(
            {"run_id": self.run_id, "app": self.app, "policy": self.opt.policy,
             "groups": self.groups, "engines": self.initial_engines, "topic": self.topic,
             "workload": self.workload, "trigger_s": self.trigger_s, "app_params": self.opt.app_params,
             "checkpoint": self.checkpoint, "engine_state": self.state_uri,
             "per_window": self.per_window, "policy_params": self.opt.policy_params,
             "controller": self.cfg.controller.model_dump(),
             "planner": bool(self.cfg.planner.enabled), "cores": task_cores(self.spark)},
            indent=2))

    def ride_out(self, error: BaseException | str,
                 stop: threading.Event | None = None) -> BaseException | str | None:
        """After the query failed with ``error``: a warehouse outage shorter than
        ``warehouse.outage_s`` is waited out and the query started again in place, as a
        restarted process would (None: it runs again); else the failure to report
        (:meth:`QueryLifecycle.ride_out`)."""
        return self.lifecycle.ride_out(error, self._restart, stop)

    def _restart(self) -> None:
        """Let go of the failed attempt and start a new one, in this process."""
        self._abandon()
        self._new_attempt()
        self.start()

    def _abandon(self) -> None:
        """Let go of a failed attempt: its idle commit, its commit behind the stream (the
        files stay staged; the next attempt commits them by row key), its query."""
        self.flushes.abandon()
        self.lifecycle.stop_query()
        try:
            self.controller.close()  # its buffered scaling events; the next attempt has its own
        except Exception:  # noqa: BLE001 -- events are a courtesy, the outage is the news
            pass

    def stop(self, timeout_s: float = 300.0) -> None:
        """Stop between micro-batches (:meth:`QueryLifecycle.stop`): the running batch
        finishes, the next is refused, Spark's progress is kept, the staged rows commit."""
        try:
            self.lifecycle.stop(timeout_s, self.run_dir / "progress.jsonl", self.flush)
        finally:
            controller = getattr(self, "controller", None)  # none before the first attempt
            if controller is not None:
                controller.close()  # sends the scaling events still buffered (events.py)

    def flush(self) -> None:
        """Commit the staged bookkeeping now (it normally waits for its interval)."""
        spent = self.flushes.now()
        with self._lock:
            self.totals.stop_commit_s += spent

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch of the parsed stream (:meth:`BatchFrames.parse` of the Kafka
        source), unless the job is stopping (then the batch stays for a restart)."""
        with self.lifecycle.batch(batch_id):
            self._process_batch(df, batch_id)
            self.opt.phases.reached("after_batch", batch_id)

    # -- one micro-batch --------------------------------------------------------------
    def _check_resumed_engines(self) -> None:
        """A resumed run keeps the plans it made; an --engines that says otherwise is refused
        in one line rather than silently ignored."""
        first = self.controller.plan_for(0)
        if first.slots != self.opt.engines:
            raise ValueError(
                f"engines: run {self.run_id} started with {first.slots} engines and resumes "
                f"with its own plans; drop --engines {self.opt.engines} or use a new --run-id")

    def _process_batch(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch as steps: recover once, route it through the plan in force
        (:meth:`_plan_batch`), run the engines with the plan change's migration and commit
        the batch's writes (:meth:`_run_batch`), then its metrics row, the run's totals and
        the timing line (:meth:`_book_batch`)."""
        clock = _BatchClock(time.perf_counter(), datetime.now(UTC))
        starting = self.startup is not None and not self.startup.done
        self._startup_mark("Kafka's offsets and Spark's planning of the first batch")
        clock.recover_s = self._recover_once(batch_id, clock.t0)
        if starting and self.startup is not None:
            if clock.recover_s > 0:  # a resumed run recovers in its first batch
                self.startup.mark("the resumed run's recovery")
            self.startup.close()
            say(f"keyshift: {self.run_id}: {self.startup.line()}")
        planned = self._plan_batch(df, batch_id, clock)
        ran, committed = self._run_batch(batch_id, planned, clock)
        self._book_batch(batch_id, planned, ran, committed, clock)

    def _plan_batch(self, df: DataFrame, batch_id: int, clock: _BatchClock) -> _PlannedBatch:
        """The plan in force and the one before, the migration between them, a scale-out's
        wait for its executors, the split groups and the engine stage's input."""
        plan = self.controller.plan_for(batch_id)
        prev = self.controller.plan_for(batch_id - 1) if batch_id > 0 else plan
        # ingest-only keeps no state: nothing to hand over
        migration = Migration.between(self.run_id, batch_id,
                                      plan if self.opt.ingest_only else prev, plan)
        slots = max(plan.slots, prev.slots)
        t_ready = time.perf_counter()
        self._say_scale(self.resources.before_batch(plan.parallelism, batch_id))
        clock.waited_s = time.perf_counter() - t_ready  # a scale-out's wait for executors
        split = self.split_windows.split_for(self.controller.window_index, plan)
        spec = self._batch_spec(batch_id, plan, migration, slots, split, clock.start_wall)
        self.spark.sparkContext.setLocalProperty(
            "spark.job.description", f"keyshift {self.run_id} batch {batch_id}")
        routed = self.frames.engine_input(df, plan, slots, spec)
        if len(migration):
            (self.run_dir / "migrating.json").write_text(json.dumps(
                {"batch_id": batch_id, "groups": len(migration),
                 "migration_id": migration.migration_id}))
        return _PlannedBatch(plan, prev, migration, slots, split, spec, routed)

    def _run_batch(self, batch_id: int, b: _PlannedBatch,
                   clock: _BatchClock) -> tuple[EngineRun, dict[str, Any]]:
        """The engine stage, its small rows to the controller, the batch's writes; a
        scale-in's executors released after its moving batch; the staged bookkeeping
        committed behind the stream when due. Returns the run and the commit that ended."""
        self.opt.phases.reached("before_engines", batch_id)
        t_engines, clock.engines_started_at = time.perf_counter(), time.time()
        clock.beside_commit = self.staging.running
        clock.prep_s = t_engines - clock.t0  # recovery, plan, building the engine stage
        self._outputs_committed_at, self._outputs_by = None, {}
        result = self.frames.engine_stage(b.routed, b.slots, b.spec)
        try:
            ran = self._collect_engines(result, batch_id, b.migration)
            clock.engines_s = time.perf_counter() - t_engines
            self._caches = {t["engine"]: t["cache_id"] for t in ran.tasks}
            clock.window = self.controller.window_index
            self.controller.collect(batch_id, ran.loads, ran.state, engine_s=ran.engine_s,
                                    started=clock.start_wall, kafka_span=ran.kafka_span)
            t_writes = time.perf_counter()
            clock.controller_s = self._commit_writes(result, batch_id, ran, b.migration,
                                                     clock.start_wall)
        finally:
            result.unpersist(blocking=False)
        if len(b.migration):
            (self.run_dir / "migrating.json").unlink(missing_ok=True)
        # a scale-in's moves ran in this batch: the executors no engine needs go now
        self._say_scale(self.resources.after_batch(b.plan.parallelism, batch_id, ran.tasks))
        committed = self.flushes.after_batch(batch_id)
        clock.writes_s = time.perf_counter() - t_writes
        return ran, committed

    def _book_batch(self, batch_id: int, b: _PlannedBatch, ran: EngineRun,
                    committed: dict[str, Any], clock: _BatchClock) -> None:
        """The batch's end-to-end latency, its metrics row (staged), the migration's
        measured pause, the run's totals, the timing line and the progress report."""
        e2e = batch_e2e({"tasks": ran.tasks,
                         "outputs_committed_at": self._outputs_committed_at})
        e2e_q = merged_quantiles([e2e], (0.5, 0.95)) or [None, None]
        metrics, bal = self._metrics_row(batch_id, clock.start_wall, b.plan, b.slots,
                                         b.split, ran)
        metrics["e2e_p50_s"], metrics["e2e_p95_s"] = e2e_q
        if len(b.migration):
            self.controller.loop.measured_migration(self.pauses.measure(
                b.migration, b.prev, b.plan, ran.moved, clock.engines_s,
                metrics["input_rate"], clock.waited_s))
        elif not b.split:
            self.pauses.calm_batch(clock.engines_s)
        t_metrics = time.perf_counter()
        # the metrics row is staged with the run's other bookkeeping (keyshift.streaming.staging):
        # batch_duration_s then covers all of the batch's own writes, and a restarted
        # driver on any host finds the row beside the warehouse
        metrics["batch_duration_s"] = time.perf_counter() - clock.t0
        self.staging.put("metrics", [metrics], batch_id)
        self.flushes.when_idle()
        clock.metrics_s = time.perf_counter() - t_metrics
        duration = time.perf_counter() - clock.t0
        self._add_to_totals(batch_id, ran, b.migration, duration)
        self._admit(batch_id, b, ran, clock, duration)
        self._write_held()
        self._write_timing(self._timing_record(batch_id, b, ran, committed, clock, duration,
                                               e2e, e2e_q, metrics["engine_loads"]))
        if self.on_batch is not None:
            self.on_batch(BatchReport(batch_id, ran.valid, ran.dead, ran.outs, bal.rstd,
                                      b.plan.parallelism, b.plan.version, len(b.migration),
                                      ran.moved, duration, *e2e_q))

    def _timing_record(self, batch_id: int, b: _PlannedBatch, ran: EngineRun,
                       committed: dict[str, Any], clock: _BatchClock, duration: float,
                       e2e: dict[str, Any] | None, e2e_q: list, engine_loads: list
                       ) -> dict[str, Any]:
        """The batch's line of ``batches.jsonl``: its clocks, tasks and per-group input."""
        return {
            "batch_id": batch_id, "slots": b.slots, "recover_s": clock.recover_s,
            "prep_s": clock.prep_s, "engines_s": clock.engines_s,
            "window": clock.window,  # the statistic window the batch counted in
            # it closed that window (the simulator's calibration replays the run's closes)
            "window_closed": self.controller.closed_batch == batch_id,
            # the clocks of keyshift.control.batch_cost: where the batch's time went, how
            # long its events waited for their complex events' commit
            "started_at": clock.start_wall.timestamp(),
            "engines_started_at": clock.engines_started_at,
            "outputs_committed_at": self._outputs_committed_at, "e2e": e2e,
            "outputs_by": self._outputs_by,  # table → who appended it (OutputAppends)
            "e2e_p50_s": e2e_q[0], "e2e_p95_s": e2e_q[1],
            "engines": b.plan.parallelism, "engine_loads": engine_loads,
            "metrics_s": clock.metrics_s, "controller_s": clock.controller_s,
            "writes_s": clock.writes_s,
            "committed_staged": committed,  # the last commit behind the stream, if it ended
            "beside_commit": clock.beside_commit,
            "duration_s": duration, "moved_groups": len(b.migration),
            "moved_bytes": ran.moved,
            "ended_at": time.time(),  # wall clock: a bench's lag over time
            "split_groups": list(b.split),
            "scale_actions": [a.to_dict() for a in self._scale_actions(batch_id)],
            **self.resources.columns(),
            # the batch's input per key group (non-zero ones), for a replay of the run's
            # input through the simulator's cost model (keyshift simulate --calibrate)
            "load_groups": np.flatnonzero(ran.loads).tolist(),
            "load_counts": ran.loads[ran.loads > 0].astype(int).tolist(),
            "tasks": ran.tasks, "split_tasks": ran.split_tasks}

    def _recover_once(self, batch_id: int, t0: float) -> float:
        """The controller's recovery before a process's first batch (seconds it took, 0
        after); a resumed run also checks that its engines' state is where it left it."""
        recover_s = 0.0
        if self.appends.first is None and batch_id != 0 and self.appends.fresh:
            # "fresh" but Spark resumes at a later batch (a checkpoint older than the start
            # marker): recover for real, and look before appending
            self.appends.fresh = self._recovered = False
        self.appends.begin(batch_id)
        if not self._recovered:
            self.controller.recover(batch_id)
            self._recovered = True
            recover_s = time.perf_counter() - t0
        if self.opt.engines and batch_id == self.appends.first and not self.appends.fresh:
            self._check_resumed_engines()
        return recover_s

    def _batch_spec(self, batch_id: int, plan: Plan, migration: Migration, slots: int,
                    split: tuple[int, ...], started: datetime) -> BatchSpec:
        """What every engine task of the batch is told (shipped in the closure)."""
        salts = placement_keys(slots)
        return BatchSpec(
            batch_id=batch_id, app=self.app, params=dict(self.opt.app_params),
            run_key=self.run_id, state_uri=self.state_uri,
            compact_every=self.cfg.engines.compact_every,
            moves_out=migration.moves_out(), moves_in=migration.moves_in(),
            caches=dict(self._caches), ingest_only=self.opt.ingest_only,
            staging=self.staging.root, started=started, plan_version=plan.version,
            migration_id=migration.migration_id if len(migration) else None,
            split_homes={g: salts[int(plan.assignment[g])] for g in split},
            engine0_pkey=salts[0], fetch_bytes=self.outputs.fetch_bytes(batch_id, slots))

    def _collect_engines(self, result: DataFrame, batch_id: int,
                         migration: Migration) -> EngineRun:
        """Run the engine stage and bring its small rows (per-group loads, one record per
        task) to the driver as Arrow, with the complex events the tasks handed over
        (``OUT_FETCHED``: :mod:`keyshift.streaming.output_appends`)."""
        from pyspark.sql import functions as F

        with self.opt.phases.during("migration" if len(migration) else "engines", batch_id):
            small = (result.where(F.col("tag").isin(LOAD, TASK, OUT_FETCHED))
                     .select("tag", "grp", "n", "size", "task",
                             *[src for _, src in EVENTS_OUT_FROM if src != "grp"]).toArrow())
        return EngineRun.of(small, self.groups)

    def _commit_writes(self, result: DataFrame, batch_id: int, ran: EngineRun,
                       migration: Migration, started: datetime) -> float:
        """The outputs (written by the executors from the cached engine result), the
        migration's end, the controller's step and, once per interval, the staged
        bookkeeping go to different tables: one round of concurrent commits. Returns the
        controller step's seconds."""
        ended = datetime.now(UTC)
        controller_s = 0.0

        def control() -> None:
            nonlocal controller_s
            t_ctl = time.perf_counter()
            decided = self.controller.end_of_batch(batch_id, lag=progress_lag(self.query))
            if decided is not None:  # a scale-out's executors start while the batch writes
                lead = self.resources.lead_windows(self.cfg.controller.window_s)
                self._say_scale(self.resources.after_decision(
                    self.controller.plan_for(batch_id + 1).parallelism, batch_id,
                    ahead=self.controller.planned_ahead(lead)))
            controller_s = time.perf_counter() - t_ctl
            self.opt.phases.reached("controller", batch_id)

        writes = [*self._output_writes(result, batch_id, ran), control]
        if len(migration):
            record(self.staging, migration, ran.moved, started, ended)
        with self.opt.phases.during("writes", batch_id, after_s=0.05):
            concurrently(*writes)
        return controller_s

    def _metrics_row(self, batch_id: int, started: datetime, plan: Plan, slots: int,
                     split: tuple[int, ...], ran: EngineRun) -> tuple[dict[str, Any], Balance]:
        """The batch's ``metrics`` row (``batch_duration_s`` is the caller's, once the row is
        about to be staged) and the balance of its live engines."""
        if split:  # the engines ran the tail; the split groups' tuples ran in the input tasks
            engine_loads = np.zeros(slots)
            for t in ran.tasks:
                engine_loads[t["engine"]] += t["events"]
            engine_loads = engine_loads[:plan.slots]
            bal = Balance.of(engine_loads[plan.live])
        else:
            engine_loads = np.bincount(plan.assignment, weights=ran.loads,
                                       minlength=plan.slots)
            bal = Balance.of(live_loads(plan.assignment, ran.loads, plan.live))
        valid = ran.valid
        metrics = {
            "run_id": self.run_id, "workload": self.workload, "batch_id": batch_id,
            "window_start": started,
            "window_end": datetime.now(UTC), "events_in": valid, "dead_letter": ran.dead,
            "processed": valid, "out_events": ran.outs, "missed": 0,
            "selectivity": ran.outs / valid if valid else 0.0, "engines": plan.parallelism,
            "engine_loads": [int(x) for x in engine_loads], "rstd": bal.rstd,
            "var_load": bal.var,
            # the monitor of elastic-cep Eq. 1-2, the GPs' training data: In per second of
            # arrival (Kafka append times; a catch-up batch spans more than one trigger) and
            # Lat = engine work seconds per tuple (task time without the wait for input), the
            # planner's unit (the scaler's too)
            "input_rate": valid / max(ran.arrival_span_s, self.trigger_s),
            "latency_s": ran.engine_s / valid if valid else 0.0,
            "plan_version": plan.version, "policy": self.opt.policy,
            # what no plan keeping a key on one engine can beat in this batch (the control
            # loop's floor of a window, keyshift.control.floor): the report draws it
            **self.controller.floor(ran.loads, plan.parallelism).columns(),
            # what the run held (streaming/executors.py): the cost of N a user pays for
            **self.resources.columns(),
        }
        return metrics, bal

    def _say_scale(self, action: Any) -> None:
        if action is not None:
            say(f"keyshift: {self.run_id} batch {action.batch_id}: {action.text()}")

    def _scale_actions(self, batch_id: int) -> list[Any]:
        """The scale actions that ended since the last batch's record (a request once its
        executors came or the wait ran out, a release once they are gone)."""
        scaler = self.resources.scaler
        if scaler is None:
            return []
        done = [a for a in scaler.actions
                if a.ready_s is not None and id(a) not in self._actions_written]
        self._actions_written.update(id(a) for a in done)
        return done

    def _add_to_totals(self, batch_id: int, ran: EngineRun, migration: Migration,
                       duration: float) -> None:
        with self._lock:
            t = self.totals
            t.batches += 1
            t.records += ran.valid + ran.dead
            t.events_in += ran.valid
            t.processed += ran.valid
            t.dead_letter += ran.dead
            t.complex_events += ran.outs
            if len(migration):
                t.migrations += 1
                t.moved_groups += len(migration)
                t.moved_bytes += ran.moved
            t.last_batch = batch_id
            t.durations.append(duration)

    def _output_writes(self, result: DataFrame, batch_id: int,
                       ran: EngineRun) -> list[Callable[[], None]]:
        """The batch's appends to ``events_out`` and ``dead_letter`` as calls, of the cached
        engine result's rows (:class:`OutputAppends`: the driver's delta-rs commit when they
        are light, Spark's executors otherwise; the key loads the engine tasks staged
        themselves)."""
        fetched = ({"events_out": events_out_rows(ran.fetched, self.run_id, self.app,
                                                  batch_id)}
                   if ran.fetched is not None else {})
        return [lambda name=name, frame=frame: self._append_output(name, frame, batch_id,
                                                                   fetched.get(name))
                for name, frame in self.frames.outputs(result, batch_id, ran.outs,
                                                       ran.dead).items()]

    def _append_output(self, name: str, frame: DataFrame, batch_id: int,
                       rows: pa.Table | None) -> None:
        """One output append; the complex events' commit time ends their events' wait."""
        self._outputs_by[name] = self.outputs.append(name, frame, batch_id, rows)
        if name == "events_out":
            self._outputs_committed_at = time.time()

    def _write_held(self, sample: bool = False) -> dict[str, Any]:
        """What this process has held so far (core-seconds since the application
        registered), into the run folder, where the report and ``status`` read it; after a
        batch from the sample the batch took, at the summary from a new one."""
        held = self.resources.summary() if sample else self.resources.held()
        try:
            write_held(self.run_dir / "resources.json", self.resources.process, held)
        except OSError as exc:  # the report falls back to the metrics rows; said once
            if not getattr(self, "_held_unwritten", False):
                self._held_unwritten = True
                say(f"keyshift: {self.run_id}: resources.json not written: {exc}")
        return held

    def _write_timing(self, record: dict[str, Any]) -> None:
        """Per-batch task records (the 1:1 proof, timings) as JSON lines in the run folder."""
        with open(self.run_dir / "batches.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    # -- helpers for callers (run, demo, tests, bench) ---------------------------------
    def wait_for(self, records: int, timeout_s: float, poll_s: float = 0.5) -> bool:
        """Block until this process has taken ``records`` Kafka records through batches."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            failure = self.lifecycle.failure()
            if failure is not None:
                raise RuntimeError(f"streaming query failed: {failure}")
            with self._lock:
                if self.totals.records >= records:
                    return True
            time.sleep(poll_s)
        return False

    def summary(self) -> dict[str, Any]:
        """This process's run as one JSON-able object (``keyshift run --json``)."""
        with self._lock:
            t = self.totals
            busy = float(sum(t.durations))
            d = sorted(t.durations)
            out = {k: v for k, v in asdict(t).items() if k != "durations"}
        out.update({
            "run_id": self.run_id, "app": self.app, "policy": self.opt.policy,
            "topic": self.topic, "workload": self.workload, "busy_s": busy,
            "events_per_s": out["events_in"] / busy if busy else 0.0,
            "batch_p50_s": _quantile(d, 0.5), "batch_p95_s": _quantile(d, 0.95),
            "run_dir": str(self.run_dir), "checkpoint": self.checkpoint,
            "skipped_offsets": self.skipped_offsets,
            # the records a batch may read at the end, and each restart admission made
            "read_limit": self.read_limit, "source_restarts": list(self.admission_restarts),
            # where the time to the first batch went (keyshift.startup)
            "startup": self.startup.as_dict() if self.startup is not None else None,
            **self._write_held(sample=True),
            # where a batch's time went, how long events waited, what balancing bought
            **run_cost(self.run_dir, self.groups, self.per_window, self.opt.policy,
                       self.controller.plan_for),
        })
        return out


def admission_for(cfg: Config, options: JobOptions, run_dir: Path) -> Admission | None:
    """The run's admission (None: ``spark.admission = "off"``, or a run that reads what the
    topic holds and stops, whose end Spark fixes at its start). A resumed run starts from the
    bound its last process had (``admission.json`` in the run folder)."""
    if cfg.spark.admission == "off" or options.available_now:
        return None
    settings = AdmissionSettings(
        # a window is never shorter than the trigger (keyshift.control.window_clock)
        window_s=max(float(cfg.controller.window_s), float(options.trigger_s
                                                             or cfg.spark.trigger_s)),
        ceiling=options.max_offsets_per_trigger or cfg.spark.max_offsets_per_trigger,
        initial=cfg.spark.admission_initial, fill=cfg.spark.admission_fill)
    limit = None
    try:
        saved = json.loads((run_dir / "admission.json").read_text())
        limit = max(1, min(int(saved["limit"]), settings.ceiling))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # a new run, or a file it cannot trust: the settings' start
    return Admission(settings, limit)


def hot_key_splitter(cfg: Config, policy: str, app: str, app_params: dict[str, Any],
                     params: dict[str, Any] | None = None) -> Any:
    """The policy that splits hot keys (dc, wc), or None for a policy that moves whole
    groups; a split the operator cannot take is refused in one line, before Spark runs."""
    if not policy_class(policy).splits_keys:
        return None
    op = make_operator(app, **app_params)
    check_operator(policy, op)
    if not op.summarizes():
        raise PolicyInputError(
            "policy", f"{policy} splits a hot key's events over engines, but operator "
            f"{op.app!r} ({type(op).__name__}) offers no summary of part of a key's events "
            "(summarize, combine, apply_summary; docs/operators.md); use a policy that moves "
            "whole key groups (e.g. dlb-h, lptf, elb)")
    made = policy_from_config(cfg, policy, params)
    return splitting_policy(made)


def _quantile(xs: list[float], q: float) -> float:
    return float(np.quantile(xs, q)) if xs else 0.0
