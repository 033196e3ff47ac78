"""The Spark side of engines-as-executors (:mod:`keyshift.control.resources`): the
executors the application holds, requested and released through the SparkContext's
developer API, and the cores a standalone master says the application holds.

Spark's ``requestTotalExecutors`` / ``killExecutor`` are implemented by the coarse-grained
scheduler backend of standalone, YARN and Kubernetes (the same calls Spark's own dynamic
allocation makes), so this adapter is the same on each; only the check against the cluster
manager reads a standalone master's ``/json/`` (``[spark] master_ui``). A local master has
no executors to ask for: the job then runs with ``resources = "fixed"``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keyshift.config import Config
from keyshift.control.resources import (
    ExecutorBudget,
    ExecutorClient,
    ExecutorScaler,
    ScaleAction,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



class ResourcesError(ValueError):
    """A resources setting that cannot work; the message starts with the config key."""


class SparkExecutors:
    """:class:`keyshift.control.resources.ExecutorClient` over a live SparkContext."""

    def __init__(self, sc: Any) -> None:
        self._sc = sc._jsc.sc()
        self._jvm = sc._jvm

    def held(self) -> list[str]:
        """Executor ids the scheduler has registered now (the driver is not one)."""
        text = self._sc.getExecutorIds().mkString(",")
        return [e for e in text.split(",") if e and e != "driver"]

    def request_total(self, total: int) -> bool:
        """The executors wanted in all; no locality preference (engines run anywhere)."""
        jvm = self._jvm
        empty = jvm.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        return bool(self._sc.requestTotalExecutors(int(total), 0, empty))

    def release(self, ids: Sequence[str]) -> list[str]:
        return [e for e in ids if self._sc.killExecutor(str(e))]


def master_cores(ui_url: str, app_id: str, timeout_s: float = 3.0) -> int | None:
    """Cores a standalone master's ``/json/`` says application ``app_id`` holds now (None
    when the master does not answer or does not list the application)."""
    try:
        with urllib.request.urlopen(f"{ui_url.rstrip('/')}/json/", timeout=timeout_s) as r:
            state = json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    for app in state.get("activeapps", []):
        if app.get("id") == app_id:
            return int(app.get("cores", 0))
    return None


def executor_of(workdir: str) -> str:
    """The executor id an engine task ran on, from the folder it ran in: a standalone
    worker runs each executor in ``<work>/<app id>/<executor id>`` (YARN's container
    folders and Kubernetes' pods have no such name: "" there, and the release order falls
    back to the newest executors)."""
    p = Path(workdir)
    return p.name if p.name.isdigit() and p.parent.name.startswith("app-") else ""


def resources_mode(cfg: Config) -> str:
    """``executors`` or ``fixed`` for this run (``auto``: executors on a cluster master,
    fixed on ``local[...]`` and under Spark's own dynamic allocation); a clear error for a
    combination that cannot work."""
    from keyshift.lakehouse.session import is_local

    mode = cfg.planner.resources
    local = is_local(cfg.spark.master)
    if mode == "executors":
        if local:
            raise ResourcesError(
                f"planner.resources: 'executors' needs a cluster master, not "
                f"spark.master={cfg.spark.master} (the engines share the local cores; "
                "use 'fixed' or 'auto')")
        if cfg.spark.dynamic_allocation:
            raise ResourcesError(
                "planner.resources: 'executors' and spark.dynamic_allocation cannot both be "
                "on (both would request and release the job's executors); turn one off")
        return "executors"
    if mode == "auto":
        return "fixed" if local or cfg.spark.dynamic_allocation else "executors"
    return "fixed"


def budget_from_config(cfg: Config) -> ExecutorBudget:
    """Executors for N engines: ``engines_per_executor`` (0 = ``spark.executor_cores``)
    per executor, bounded by the engine bounds and by ``spark.cores_max``."""
    per = cfg.planner.engines_per_executor or cfg.spark.executor_cores
    lo_engines = cfg.planner.min_engines or cfg.engines.min
    hi_engines = cfg.planner.max_engines or cfg.engines.max
    lo = max(1, -(-lo_engines // per))
    hi = max(lo, -(-hi_engines // per))
    if cfg.spark.cores_max:
        hi = max(lo, min(hi, cfg.spark.cores_max // max(cfg.spark.executor_cores, 1)))
    return ExecutorBudget(per, lo, hi)


class RunResources:
    """What a run holds, batch by batch, and (``resources = "executors"``) the scaler that
    makes it follow the plan: the job calls :meth:`before_batch` with the plan in force,
    :meth:`after_decision` with the plan just decided, :meth:`after_batch` with the batch's
    task records, then reads :meth:`columns` for the ``metrics`` row.

    ``cores_held`` is what the cluster manager says when ``spark.master_ui`` is set (the
    standalone master's ``/json/``), else the scheduler's executors times
    ``spark.executor_cores``; on ``local[N]`` it is N, held whatever the plan.

    Core-seconds are counted as the cluster manager bills them: from the application's
    registration (``since``, Spark's start time), the cores given at start-up included, not
    from the job's first batch. ``billed`` is False on a local master, where no cluster
    billed anything and the count is of the cores the process may use."""

    def __init__(self, mode: str, client: ExecutorClient | None,
                 scaler: ExecutorScaler | None, executor_cores: int, local_cores: int = 0,
                 cores_of_master: Callable[[], int | None] | None = None,
                 clock: Callable[[], float] = time.time, since: float | None = None,
                 process: str = "") -> None:
        self.mode = mode
        self.client = client
        self.scaler = scaler
        self.executor_cores = executor_cores
        self.local_cores = local_cores
        self.cores_of_master = cores_of_master
        self.clock = clock
        self.executors: int | None = None
        self.cores_held = local_cores if client is None else 0
        self.executors_seen: list[int] = []
        self.core_seconds = 0.0
        self.billed = client is not None
        self.process = process or f"pid-{os.getpid()}"  # the application id, on a cluster
        self.mismatches = 0  # samples where the master and the scheduler disagreed
        self._ahead = 0  # engines the scaler's path plans within the executors' lead
        now = clock()
        # billing starts at the application's registration; the cores held from then to
        # this first reading are the ones read now (what start-up was given)
        self.since = min(since, now) if since is not None else now
        self._t = self.since
        if client is not None:
            self._read_cores()

    @classmethod
    def for_job(cls, cfg: Config, spark: Any) -> RunResources:
        from keyshift.lakehouse.session import is_local

        mode = resources_mode(cfg)
        sc = spark.sparkContext
        since = sc.startTime / 1000.0  # the application's registration
        if is_local(cfg.spark.master):
            return cls(mode, None, None, cfg.spark.executor_cores,
                       local_cores(cfg.spark.master), since=since, process=sc.applicationId)
        client = SparkExecutors(sc)
        scaler = None if mode != "executors" else ExecutorScaler(
            client, budget_from_config(cfg), cfg.planner.executor_wait_s,
            block=cfg.planner.wait_for_executors)
        master = None
        if cfg.spark.master_ui:
            ui, app = cfg.spark.master_ui, sc.applicationId
            master = lambda: master_cores(ui, app)  # noqa: E731
        return cls(mode, client, scaler, cfg.spark.executor_cores, 0, master, since=since,
                   process=sc.applicationId)

    # -- the job's calls ---------------------------------------------------------------------
    def at_start(self, live_engines: int) -> ScaleAction | None:
        """A new run's first plan is known: give back at once what it does not need."""
        if self.scaler is None:
            return None
        return self.scaler.start(live_engines)

    def before_batch(self, live_engines: int, batch_id: int) -> ScaleAction | None:
        if self.scaler is None:
            return None
        return self.scaler.ready(live_engines, batch_id)

    def lead_windows(self, window_s: float) -> int:
        """Windows ahead a scale-out's executors must be asked for: their measured start-up
        (the slowest request of this run, until registered) in windows, at least the one
        window a decision already leads its plan by; beyond that the scaler's path is read
        further ahead (:meth:`after_decision`)."""
        ups = [a.ready_s for a in (self.scaler.actions if self.scaler else [])
               if a.kind == "request" and a.ready_s is not None]
        return max(1, -(-int(1000 * max(ups, default=0.0)) // int(1000 * window_s)))

    def after_decision(self, live_engines: int, batch_id: int,
                       ahead: int | None = None) -> ScaleAction | None:
        """The plan just decided has ``live_engines``; ``ahead``: the most the scaler's
        path plans within the executors' lead (:meth:`lead_windows`). Executors for the
        larger are asked for now and kept until the path passes."""
        if self.scaler is None:
            return None
        self._ahead = ahead or 0
        return self.scaler.prepare(max(live_engines, self._ahead), batch_id)

    def after_batch(self, live_engines: int, batch_id: int,
                    tasks: Sequence[dict[str, Any]]) -> ScaleAction | None:
        """Release what the plan no longer needs (its moves ran in this batch; executors
        asked for ahead of the scaler's path stay), then sample what is held."""
        action = None
        live_engines = max(live_engines, self._ahead)
        if self.scaler is not None:
            on: dict[str, int] = {}
            for t in tasks:
                if t.get("events") or t.get("restored"):
                    e = executor_of(str(t.get("workdir", "")))
                    if e:
                        on[e] = on.get(e, 0) + 1
            action = self.scaler.settle(live_engines, batch_id, on)
        self.sample()
        return action

    # -- what is held ------------------------------------------------------------------------
    def sample(self) -> None:
        """Executors and cores held now; core-seconds since the last sample at the cores
        held then."""
        now = self.clock()
        self.core_seconds += self.cores_held * max(now - self._t, 0.0)
        self._t = now
        if self.client is not None:
            self._read_cores()

    def _read_cores(self) -> None:
        """The executors and cores held now, from the master where it is configured."""
        self.executors = len(self.client.held())
        self.executors_seen.append(self.executors)
        scheduler = self.executors * self.executor_cores
        told = self.cores_of_master() if self.cores_of_master is not None else None
        if told is not None and told != scheduler:
            self.mismatches += 1
        self.cores_held = told if told is not None else scheduler

    def columns(self) -> dict[str, int | None]:
        """The ``metrics`` row's ``executors`` (None on a local master) and ``cores_held``."""
        return {"executors": self.executors, "cores_held": int(self.cores_held)}

    def summary(self) -> dict[str, Any]:
        """``keyshift run --json``'s part: the mode, executors min/max, core-seconds held
        and every scale action with its latency."""
        try:
            self.sample()
        except Exception:  # noqa: BLE001 -- a stopped context: the last sample stands
            pass
        return self.held()

    def held(self) -> dict[str, Any]:
        """What has been held up to the last sample, without sampling again (the job writes
        it after every batch, whose own sample was just taken)."""
        seen = self.executors_seen
        out: dict[str, Any] = {
            "resources": self.mode,
            "executors_min": min(seen) if seen else None,
            "executors_max": max(seen) if seen else None,
            "core_seconds": round(self.core_seconds, 1),
            # since the application registered, as the cluster manager bills (False: a
            # local master, nothing billed)
            "core_seconds_billed": self.billed,
            "core_seconds_since": round(self.since, 3),
            "scale_actions": [a.to_dict() for a in (self.scaler.actions if self.scaler else [])],
        }
        if self.client is None:
            out["resources_note"] = (f"local master: the engines share its {self.local_cores} "
                                     "cores; nothing is requested, released or billed by a "
                                     "cluster")
        if self.mismatches:
            out["cores_mismatches"] = self.mismatches
        return out


def write_held(path: Path, process: str, summary: dict[str, Any]) -> None:
    """This process's core-seconds into the run folder's ``resources.json`` (one entry per
    application: a resumed run's processes add up), for the report and ``status`` to give
    the number ``run --json`` gives."""
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        held = {}
    held[process] = {k: summary.get(k) for k in (
        "core_seconds", "core_seconds_billed", "core_seconds_since", "executors_max")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(held, indent=1))
    tmp.replace(path)


def read_held(path: Path) -> dict[str, Any] | None:
    """The run's core-seconds over its processes (``resources.json``), None without one."""
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entries = [v for v in held.values() if isinstance(v, dict)
               and isinstance(v.get("core_seconds"), (int, float))]
    if not entries:
        return None
    return {"core_seconds": round(sum(v["core_seconds"] for v in entries), 1),
            "core_seconds_billed": all(v.get("core_seconds_billed") for v in entries),
            "processes": len(entries)}


def local_cores(master: str) -> int:
    """N of ``local[N]`` (``*``: this machine's cores; ``local``: 1)."""
    import re

    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if m is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def task_cores(spark: SparkSession) -> int:
    """Cores the engine stage's tasks share: N of local[N], else the executors' total as
    the scheduler counts them (a run's ``job.json`` keeps it for the simulator's replay)."""
    from keyshift.lakehouse.session import is_local

    sc = spark.sparkContext
    if is_local(sc.master):
        return local_cores(sc.master)
    try:
        return int(sc._jsc.sc().maxNumConcurrentTasks(
            sc._jsc.sc().resourceProfileManager().defaultResourceProfile()))
    except Exception:  # noqa: BLE001 -- an older or remote API: Spark's own default
        return int(sc.defaultParallelism)


__all__ = ["ResourcesError", "RunResources", "SparkExecutors", "budget_from_config",
           "executor_of", "local_cores", "master_cores", "resources_mode", "task_cores"]
