"""Live metrics of a running job: a Prometheus endpoint that ``keyshift run`` and the demo serve.

Why: the durable record of a run is in Delta (``metrics``, ``decisions``, ``migrations``), which
a person can read only with Spark and after the fact. A running job should be watchable the way
every other service is: Prometheus scrapes ``http://HOST:PORT/metrics`` (``[metrics] host`` and
``port``; port 0 turns it off) and Grafana plots it (``docker/grafana``).

The driver already holds every number needed: the :class:`keyshift.streaming.job.BatchReport` of each
micro-batch, the controller's :class:`~keyshift.control.ControlDecision` at a window's end and
the query's ``lastProgress`` (Kafka offsets). :func:`start_job` in ``streaming/commands/run.py``
feeds them to :meth:`LiveMetrics.observe` after every batch; nothing here touches the data path.
A scrape is answered from a snapshot that a thread of the endpoint renders (:class:`Snapshot`),
so any number of scrapes costs the batch path nothing but a counter it bumps.

Every series carries the run id (label ``run_id``), so one Prometheus keeps runs apart and a
process that runs several jobs (the demo, tests) serves them all from one endpoint. Counters
count what *this process* saw: a resumed run starts them at 0 again, which Prometheus's
``rate()`` and ``increase()`` treat as the counter reset it is.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

RUN = ("run_id",)

# name (as exposed) → (kind, help). The dashboard (docker/grafana) and its test refer to these.
METRICS: dict[str, tuple[str, str]] = {
    "keyshift_events_total": (
        "counter", "valid events taken in from Kafka (records that parsed and validated)"),
    "keyshift_dead_letters_total": (
        "counter", "records sent to the dead_letter table, with their reason"),
    "keyshift_complex_events_total": (
        "counter", "complex events the operator produced (rows of events_out)"),
    "keyshift_batches_total": ("counter", "micro-batches completed"),
    "keyshift_batch_duration_seconds": (
        "histogram", "wall time of one micro-batch on the driver, from start to committed"),
    "keyshift_rstd_ratio": (
        "gauge", ("imbalance of the last batch as a ratio: std(L)/mean(L) over live engines "
                  "(imbScore / 100; 0 = balanced)")),
    "keyshift_engines": ("gauge", "engines (parallel operator instances) of the plan in force"),
    "keyshift_plan_version": ("gauge", "version of the plan (group -> engine) in force"),
    "keyshift_migrations_total": (
        "counter", ("migrations: realized plan changes that moved key groups (one per plan "
                    "version, a row of the migrations table); the groups they moved are "
                    "keyshift_moved_groups_total")),
    "keyshift_moved_groups_total": ("counter", "key groups moved to another engine"),
    "keyshift_moved_state_bytes_total": (
        "counter", "state bytes moved with them (psi, the state movement)"),
    "keyshift_decisions_total": (
        "counter", ("controller decisions at window ends, by action (none, rebalance, "
                    "scale_out, scale_in, declined; a scale-out judged ineffective is "
                    "keyshift_ineffective_scalings_total)")),
    "keyshift_ineffective_scalings_total": (
        "counter", ("scale-outs judged ineffective (keyshift.control.guard): the busiest "
                    "engine's share of the input fell, or its read rate over a backlog rose, by "
                    "less than "
                    "planner.effectiveness of what the scale-out expected; each holds "
                    "further scale-out for planner.ineffective_cooloff_windows windows")),
    "keyshift_scaling_events_total": (
        "counter", ("scaling events sent to [events] topic (keyshift.streaming.events), by "
                    "outcome: sent, or dropped (the buffer full while the broker was away, "
                    "or left at stop)")),
    "keyshift_kafka_lag_records": (
        "gauge", ("records in the topic not yet read, summed over partitions: the topic's end "
                  "offsets at the scrape minus the end offsets of the last batch (Spark's "
                  "latest - end offsets when the broker does not answer)")),
    "keyshift_window_input_events_per_second": (
        "gauge", "events per second of the last statistic window (the actual input rate)"),
    "keyshift_forecast_error": (
        "gauge", ("relative error of the engine scaler's forecast (In, Lat) for the last "
                  "window; absent without the planner")),
    "keyshift_executors": (
        "gauge", ("executors the run holds after its last batch (streaming/executors.py); "
                  "absent on a local master")),
    "keyshift_cores_held": (
        "gauge", ("cores the run holds after its last batch: the cluster manager's count "
                  "with spark.master_ui set, else executors x spark.executor_cores; the "
                  "local master's cores on local[N]")),
    "keyshift_e2e_latency_seconds": (
        "gauge", ("seconds from an event's Kafka append to the Delta commit of the complex "
                  "event it produced, in the last batch with outputs, by quantile (0.5, "
                  "0.95; keyshift.control.batch_cost)")),
    "keyshift_last_batch_timestamp_seconds": (
        "gauge", "Unix time the last micro-batch completed (staleness: time() - this)"),
    "keyshift_run_info": ("info", "what the run is: app, policy, topic (value 1)"),
}


def exposed_series(name: str) -> tuple[str, ...]:
    """The sample names a metric of :data:`METRICS` appears under in the exposition (a
    histogram as ``_bucket``, ``_sum``, ``_count``; an info as ``_info``)."""
    kind = METRICS[name][0]
    if kind == "histogram":
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
    if kind == "info":
        return (f"{name.removesuffix('_info')}_info",)
    return (name,)


def series_names() -> frozenset[str]:
    """Every sample name the exporter can expose (what a dashboard query may name)."""
    return frozenset(s for name in METRICS for s in exposed_series(name))


def _help(name: str) -> str:
    return METRICS[name][1]


class Families:
    """The metric families of one registry (each registered once; runs are label values)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, labels: tuple[str, ...] = RUN) -> Counter:
            # prometheus_client adds the _total suffix itself
            return Counter(name.removesuffix("_total"), _help(name), labels, registry=registry)

        def gauge(name: str) -> Gauge:
            return Gauge(name, _help(name), RUN, registry=registry)

        self.registry = registry
        self.events = counter("keyshift_events_total")
        self.dead = counter("keyshift_dead_letters_total")
        self.complex = counter("keyshift_complex_events_total")
        self.batches = counter("keyshift_batches_total")
        self.duration = Histogram(
            "keyshift_batch_duration_seconds", _help("keyshift_batch_duration_seconds"), RUN,
            registry=registry,
            buckets=(0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, float("inf")))
        self.rstd = gauge("keyshift_rstd_ratio")
        self.engines = gauge("keyshift_engines")
        self.plan_version = gauge("keyshift_plan_version")
        self.migrations = counter("keyshift_migrations_total")
        self.moved_groups = counter("keyshift_moved_groups_total")
        self.moved_bytes = counter("keyshift_moved_state_bytes_total")
        self.decisions = counter("keyshift_decisions_total", (*RUN, "action"))
        self.ineffective = counter("keyshift_ineffective_scalings_total")
        self.scaling_events = counter("keyshift_scaling_events_total", (*RUN, "outcome"))
        self.lag = gauge("keyshift_kafka_lag_records")
        self.input_rate = gauge("keyshift_window_input_events_per_second")
        self.forecast_error = gauge("keyshift_forecast_error")
        self.last_batch = gauge("keyshift_last_batch_timestamp_seconds")
        self.executors = gauge("keyshift_executors")
        self.cores_held = gauge("keyshift_cores_held")
        self.e2e = Gauge("keyshift_e2e_latency_seconds", _help("keyshift_e2e_latency_seconds"),
                         (*RUN, "quantile"), registry=registry)
        self.info = Info("keyshift_run", _help("keyshift_run_info"), RUN, registry=registry)


class LiveMetrics:
    """One run's series in a registry: :meth:`observe` after every micro-batch."""

    def __init__(self, run_id: str, families: Families | None = None,
                 window_s: float | None = None, topic: str | None = None,
                 topic_ends: Callable[[], Mapping[int, int]] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[], None] | None = None) -> None:
        self.run_id = run_id
        # the endpoint's Snapshot.changed: a scrape after an observe_* waits for a snapshot
        # rendered after it, so what was observed is what the next scrape answers
        self._changed = on_change or (lambda: None)
        self.families = families or Families(CollectorRegistry())
        self.window_s = window_s
        self.topic = topic
        self._seen_decision: Any = None
        self._migrated_version: int | None = None
        # the lag: the topic's end offsets (asked at most once a second, on a scrape) minus
        # the end offsets of the last batch. Spark's own latest - end offsets, fixed when it
        # planned the batch, reads 0 whenever a batch takes all there is, however much
        # arrives while it runs (the soak: 0 at every sample, 320-2,730 records behind).
        self._topic_ends, self._clock = topic_ends, clock
        self._done: dict[int, int] | None = None
        self._spark_lag: int | None = None
        self._ends_cache: tuple[float, Mapping[int, int]] | None = None
        self._ends_retry_at = float("-inf")
        if topic_ends is not None:
            self.families.lag.labels(run_id).set_function(self.lag_now)
        f, r = self.families, run_id
        # children created now, so every series exists (at 0) from the first scrape on
        self._events, self._dead = f.events.labels(r), f.dead.labels(r)
        self._complex, self._batches = f.complex.labels(r), f.batches.labels(r)
        self._duration = f.duration.labels(r)
        self._migrations, self._moved_groups = f.migrations.labels(r), f.moved_groups.labels(r)
        self._moved_bytes = f.moved_bytes.labels(r)
        self._ineffective = f.ineffective.labels(r)
        self._events_seen = {"sent": 0, "dropped": 0}
        for outcome in self._events_seen:
            f.scaling_events.labels(r, outcome)
        for action in ("none", "rebalance", "scale_out", "scale_in", "declined"):
            f.decisions.labels(r, action)

    @property
    def registry(self) -> CollectorRegistry:
        return self.families.registry

    def describe_run(self, app: str, policy: str, topic: str) -> None:
        self.families.info.labels(self.run_id).info({"app": app, "policy": policy,
                                                     "topic": topic})
        self._changed()

    def observe_batch(self, report: Any) -> None:
        """A :class:`keyshift.streaming.job.BatchReport`: counters, imbalance, engines, plan."""
        f, r = self.families, self.run_id
        self._events.inc(report.events)
        self._dead.inc(report.dead_letter)
        self._complex.inc(report.complex_events)
        self._batches.inc()
        self._duration.observe(report.duration_s)
        f.rstd.labels(r).set(report.rstd / 100.0)  # the report's rstd is imbScore, in %
        f.engines.labels(r).set(report.engines)
        f.plan_version.labels(r).set(report.plan_version)
        if report.moved_groups:
            # one migration per realized plan change: a batch run again after a restart
            # (same plan version) moves the same groups and is not a second migration
            if report.plan_version != self._migrated_version:
                self._migrated_version = report.plan_version
                self._migrations.inc()
            self._moved_groups.inc(report.moved_groups)
            self._moved_bytes.inc(report.moved_bytes)
        for q, v in (("0.5", getattr(report, "e2e_p50_s", None)),
                     ("0.95", getattr(report, "e2e_p95_s", None))):
            if v is not None:
                f.e2e.labels(r, q).set(v)
        f.last_batch.labels(r).set_to_current_time()
        self._changed()

    def observe_decision(self, decision: Any) -> None:
        """The controller's last :class:`~keyshift.control.ControlDecision` (None before the
        first window ends); each decision is counted once however often it is offered."""
        if decision is None or decision is self._seen_decision:
            return
        self._seen_decision = decision
        self._changed()
        f, r = self.families, self.run_id
        f.decisions.labels(r, decision.action).inc()
        verdict = getattr(decision, "verdict", None)
        if verdict is not None and verdict.ineffective:
            self._ineffective.inc()
        ev = getattr(decision, "evaluation", None)
        if ev is None:
            return
        if self.window_s:  # over the window's measured span: batches can outlast Δ
            f.input_rate.labels(r).set(ev.input_rate)
        if ev.forecast_error is not None:
            f.forecast_error.labels(r).set(ev.forecast_error)

    def observe_events(self, publisher: Any) -> None:
        """The run's scaling-event publisher (None: ``[events] topic`` off): what it sent and
        dropped since the last look."""
        if publisher is None:
            return
        for outcome, seen in self._events_seen.items():
            now = int(getattr(publisher, outcome))
            if now > seen:
                self.families.scaling_events.labels(self.run_id, outcome).inc(now - seen)
                self._events_seen[outcome] = now
                self._changed()

    def observe_progress(self, progress: Mapping[str, Any] | None) -> None:
        """Spark's ``query.lastProgress``: where the last batch ended in the topic, and the lag
        Spark saw when it planned the batch."""
        lag = kafka_lag(progress)
        if lag is not None:
            self._spark_lag = lag
            if self._topic_ends is None:
                self.families.lag.labels(self.run_id).set(lag)
        done = batch_end_offsets(progress, self.topic) if self.topic else None
        if done is not None:
            self._done = done
        self._changed()

    def lag_now(self) -> float:
        """Records behind now (the gauge's value at a scrape); Spark's planning-time lag when
        the broker does not answer, NaN before the first batch."""
        fallback = float("nan") if self._spark_lag is None else float(self._spark_lag)
        if self._done is None or self._topic_ends is None:
            return fallback
        now = self._clock()
        if now < self._ends_retry_at:
            return fallback
        if self._ends_cache is None or now - self._ends_cache[0] >= 1.0:
            try:
                self._ends_cache = (now, self._topic_ends())
            except Exception:  # noqa: BLE001 -- a scrape never fails; the broker watch says why
                self._ends_cache, self._ends_retry_at = None, now + 10.0  # no scrape waits
                return fallback
        ends = self._ends_cache[1]
        return float(sum(max(0, end - self._done[p]) for p, end in ends.items()
                         if p in self._done))

    def observe_resources(self, columns: Mapping[str, int | None]) -> None:
        """What the run holds (:meth:`keyshift.streaming.executors.RunResources.columns`)."""
        f, r = self.families, self.run_id
        if columns.get("executors") is not None:
            f.executors.labels(r).set(columns["executors"])
        if columns.get("cores_held") is not None:
            f.cores_held.labels(r).set(columns["cores_held"])
        self._changed()

    def observe(self, job: Any, report: Any) -> None:
        """Everything after one micro-batch of ``job`` (a :class:`keyshift.streaming.job.StreamJob`)."""
        self.observe_batch(report)
        resources = getattr(job, "resources", None)
        if resources is not None:
            self.observe_resources(resources.columns())
        self.observe_decision(getattr(job.controller, "last_decision", None))
        self.observe_events(getattr(job.controller, "events", None))
        query = getattr(job, "query", None)
        if query is not None:
            try:
                progress = query.lastProgress
            except Exception:  # noqa: BLE001 -- a stopping query: the lag is not updated
                progress = None
            self.observe_progress(progress)


def _offsets(value: Any) -> dict[str, dict[str, int]] | None:
    """A Kafka source's offsets as Spark reports them: ``{"topic": {"0": 42, ...}}``, as JSON
    text (PySpark's progress objects) or already parsed (the progress JSON)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def batch_end_offsets(progress: Mapping[str, Any] | None, topic: str) -> dict[int, int] | None:
    """Partition → end offset of ``topic`` in the last batch of a ``StreamingQueryProgress``."""
    for source in (progress or {}).get("sources") or ():
        parts = (_offsets(source.get("endOffset")) or {}).get(topic)
        if isinstance(parts, dict):
            return {int(p): int(o) for p, o in parts.items()
                    if str(p).isdigit() and isinstance(o, int)}
    return None


def kafka_lag(progress: Mapping[str, Any] | None) -> int | None:
    """Records behind: Σ over topics and partitions of ``latestOffset - endOffset`` of the
    sources in a ``StreamingQueryProgress`` (None when no source reported both)."""
    if not progress:
        return None
    total, known = 0, False
    for source in progress.get("sources") or ():
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        for topic, parts in latest.items():
            done = end.get(topic) or {}
            if not isinstance(parts, dict):
                continue
            for part, offset in parts.items():
                if isinstance(offset, int) and isinstance(done.get(part), int):
                    total += max(0, offset - done[part])
                    known = True
    return total if known else None


# A scrape is answered from a snapshot (the registry rendered once) and never renders itself.
# Rendering on every scrape made 200 concurrent scrapes 200 renders, each asking the broker for
# the topic's end offsets (the lag gauge) one after the other: ~100 of them timed out after 30 s
# and a batch of the driver took 3.95 s instead of 1.7 s. Now one render serves every scrape
# that arrives while it runs, and the batch path only counts a change under a lock that no
# I/O is ever done under.
SNAPSHOT_MAX_AGE_S = 1.0  # a scrape older than this asks for a new render (the lag moves)
SNAPSHOT_WAIT_S = 2.0  # how long a scrape waits for it before it takes the last one
CONNECTION_TIMEOUT_S = 5.0  # a client silent this long loses its connection (and thread)
REQUEST_QUEUE = 128  # the listen backlog: a burst of scrapes waits in it, not in SYN retries


class Snapshot:
    """The exposition of a registry as bytes, rendered by its own thread when a scrape finds
    it stale (older than ``max_age_s``, or older than a change the batch path reported).

    Why a thread of its own: rendering calls the lag gauge's function, which may ask the
    broker (up to its timeout); neither the batch path nor a scrape may wait on that for
    long. A scrape waits at most ``wait_s`` for a render, then answers the last one."""

    def __init__(self, render: Callable[[], bytes], max_age_s: float = SNAPSHOT_MAX_AGE_S,
                 wait_s: float = SNAPSHOT_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._render, self.max_age_s, self.wait_s, self._clock = render, max_age_s, wait_s, clock
        self._cond = threading.Condition()
        self._body = b""
        self._rendered_at = float("-inf")
        self._changes = 0  # changes reported by the batch path
        self._rendered_changes = -1  # the changes the current body includes
        self._wanted = False
        self._closed = False
        self.renders = 0
        self._thread = threading.Thread(target=self._loop, name="keyshift-metrics-render",
                                        daemon=True)
        self._thread.start()

    def changed(self) -> None:
        """The batch path: something was observed (never waits on a render or a scrape)."""
        with self._cond:
            self._changes += 1

    def current(self) -> bytes:
        """A scrape: the snapshot, rendered after the last change and at most ``max_age_s``
        ago when the renderer keeps up within ``wait_s``, else the last one rendered."""
        with self._cond:
            need = self._changes

            def fresh() -> bool:
                return self._closed or (
                    self._rendered_changes >= need
                    and self._clock() - self._rendered_at <= self.max_age_s)

            if not fresh():
                self._wanted = True
                self._cond.notify_all()
                self._cond.wait_for(fresh, timeout=self.wait_s)
            return self._body

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted or self._closed)
                if self._closed:
                    return
                self._wanted = False
                changes, started = self._changes, self._clock()
            try:
                body: bytes | None = self._render()
            except Exception:  # noqa: BLE001 -- a scrape never fails: it gets the last one
                body = None
            with self._cond:
                if body is not None:
                    self._body = body
                self._rendered_changes, self._rendered_at = changes, started
                self.renders += 1
                self._cond.notify_all()


class _ScrapeHandler(BaseHTTPRequestHandler):
    """GET /metrics (or /): the snapshot, in Prometheus's text format."""

    server: _MetricsServer
    timeout = CONNECTION_TIMEOUT_S  # read from the class when a connection is set up

    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        if urlsplit(self.path).path not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        body = self.server.snapshot.current()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- quiet
        pass


class _MetricsServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never keeps the process alive
    request_queue_size = REQUEST_QUEUE
    snapshot: Snapshot


def serve(host: str, port: int, registry: CollectorRegistry) -> tuple[_MetricsServer, threading.Thread]:
    """An HTTP server answering scrapes of ``registry`` from a :class:`Snapshot`, started
    on a daemon thread. ``OSError`` when the port is taken."""
    # the address family of the host (an IPv6 address needs AF_INET6), as prometheus_client
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
    server_class = type("_Server", (_MetricsServer,), {"address_family": family})
    server = server_class((sockaddr[0], port), _ScrapeHandler)
    server.snapshot = Snapshot(lambda: generate_latest(registry))
    thread = threading.Thread(target=server.serve_forever, name="keyshift-metrics-http",
                              daemon=True)
    thread.start()
    return server, thread


@dataclass
class Endpoint:
    """One HTTP endpoint of this process and the families it serves."""

    host: str
    port: int
    families: Families
    server: Any
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/metrics"

    @property
    def changed(self) -> Callable[[], None]:
        """What a :class:`LiveMetrics` served here calls when it observed something."""
        return self.server.snapshot.changed

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.snapshot.close()
        self.thread.join(timeout=5)


_ENDPOINTS: dict[tuple[str, int], Endpoint] = {}
_ENDPOINTS_LOCK = threading.Lock()


def endpoint(host: str, port: int) -> Endpoint:
    """This process's endpoint on ``host:port``, started on first use and shared by every job
    the process runs (a second job would find the port taken by the first).
    ``OSError`` when another process holds the port."""
    with _ENDPOINTS_LOCK:
        ep = _ENDPOINTS.get((host, port))
        if ep is None:
            families = Families(CollectorRegistry())
            server, thread = serve(host, port, families.registry)
            ep = Endpoint(host, port, families, server, thread)
            _ENDPOINTS[(host, port)] = ep
        return ep


def close_endpoints() -> None:
    """Stop every endpoint of this process (tests; a CLI process simply exits)."""
    with _ENDPOINTS_LOCK:
        for ep in _ENDPOINTS.values():
            ep.close()
        _ENDPOINTS.clear()


def live_metrics_for(cfg: Any, opts: Any, say: Callable[[str], None]) -> LiveMetrics | None:
    """The run's live metrics served on ``[metrics] host:port``; None when the port is 0, or
    (said in one line, the job goes on) when the port is taken: metrics are for watching a
    job and must not be the reason it does not run."""
    port = cfg.metrics.port
    if not port:
        return None
    try:
        ep = endpoint(cfg.metrics.host, port)
    except OSError as exc:
        say(f"live metrics off: cannot listen on {cfg.metrics.host}:{port} ({exc.strerror or exc});"
            " set [metrics] port (KEYSHIFT_METRICS__PORT) to a free port, or 0")
        return None
    from .kafka_client import TopicEnds, client_options

    topic = opts.topic or cfg.kafka.topic
    ends = TopicEnds(cfg.kafka.bootstrap, topic, client_options(cfg.kafka))
    live = LiveMetrics(opts.run_id, ep.families, window_s=cfg.controller.window_s,
                       topic=topic, topic_ends=ends.offsets, on_change=ep.changed)
    live.describe_run(opts.app, opts.policy, topic)
    say(f"live metrics: {ep.url}")
    return live


__all__ = ["METRICS", "Endpoint", "Families", "LiveMetrics", "Snapshot", "close_endpoints",
           "endpoint", "batch_end_offsets", "exposed_series", "kafka_lag", "live_metrics_for",
           "serve", "series_names"]
