"""Read one finished run of ``keyshift run`` from its folder ``<home>/runs/<run id>/``.

What a calibration needs from it (written by ``streaming/job.py``):

* ``job.json``: the operator, policy, groups, engines, trigger and, since the calibrated
  simulator, the statistic window in batches (``per_window``), the ``[controller]`` section
  and the Spark cores; older runs fall back to the config in effect for those three.
* ``batches.jsonl``: one line per micro-batch with its timings, its migration, one record
  per engine task and its input per key group (``load_groups``/``load_counts``; runs made
  before those fields existed are refused: nothing could be replayed).
* ``progress.jsonl`` (written when the query stops): Spark's ``triggerExecution`` of each
  batch, which adds the offsets' bookkeeping to the job's own ``duration_s``; when present
  it is the measured batch time, else ``duration_s`` is. ``window_closed`` says which
  batches closed a statistic window (the job's windows are timed); older runs' windows
  were every ``per_window`` batches.

Every refusal is a :class:`CalibrationError` whose message starts with the field at fault.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from keyshift.run_ids import check_run_id


def counted_window_end(batch_id: int, per_window: int) -> bool:
    """Whether a batch closed its window when windows were counted in batches (the
    simulator's, and runs recorded before ``window_closed``)."""
    return (batch_id + 1) % per_window == 0


class CalibrationError(ValueError):
    """Bad calibration input; the message starts with the option or field at fault."""


@dataclass(frozen=True)
class Task:
    """One engine task of a batch: its engine, events, seconds, and the state it restored
    (groups and bytes a migration brought to it before its events)."""

    engine: int
    events: int
    duration_s: float
    restored: int = 0
    restored_bytes: int = 0
    fetch_s: float = 0.0  # the restored state's fetch from its old engine (cache or changelog)


@dataclass(frozen=True)
class Batch:
    """One micro-batch as measured."""

    batch_id: int
    measured_s: float  # triggerExecution when Spark reported it, else duration_s
    duration_s: float  # the job's own foreachBatch time
    engines_s: float  # the engine stage's Spark job, wall
    controller_s: float
    slots: int
    moved_groups: int
    moved_bytes: int
    groups: np.ndarray  # key groups with input in this batch
    counts: np.ndarray  # their events
    tasks: tuple[Task, ...]
    split_groups: tuple[int, ...] = ()
    # a commit of the staged bookkeeping, run behind the stream on the driver, ended during
    # this batch (``committed_staged``: seconds per table): it shared the cores with the
    # batch; its seconds (the slowest table's), 0 when none ended
    commit_behind_s: float = 0.0
    # the controller closed a statistic window at this batch's end (the run's record; runs
    # from before it counted windows in batches: every per_window-th batch)
    closes_window: bool = False

    @property
    def commit_behind(self) -> bool:
        return self.commit_behind_s > 0

    @property
    def events(self) -> float:
        return float(self.counts.sum())

    def loads(self, p: int, scale: float = 1.0) -> np.ndarray:
        """Events per key group (length p), times ``scale``."""
        out = np.zeros(p)
        np.add.at(out, self.groups, self.counts * scale)
        return out


@dataclass(frozen=True)
class Run:
    run_id: str
    path: Path
    app: str
    policy: str
    groups: int
    engines: int
    trigger_s: float
    per_window: int
    controller: dict[str, Any]
    policy_params: dict[str, Any]
    cores: int
    batches: tuple[Batch, ...]
    timed_by: str  # "triggerExecution" or "duration_s"
    settings_from: str  # "job.json" or "config"
    state_bytes: float = 0.0  # the engines' state after the last batch (its tasks' sum)
    app_params: dict[str, Any] = field(default_factory=dict)  # the operator's (job.json)

    @property
    def events(self) -> float:
        return float(sum(b.events for b in self.batches))


def runs_root(home: Path) -> Path:
    return Path(home) / "runs"


def find_run(home: Path, run_id: str) -> Path:
    """The folder of run ``run_id`` under ``home``; one line naming where it looked."""
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise CalibrationError(f"--calibrate: {exc}") from None
    root = runs_root(home)
    path = root / run_id
    if not (path / "job.json").is_file():
        known = sorted(p.name for p in root.iterdir() if (p / "job.json").is_file()) \
            if root.is_dir() else []
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        raise CalibrationError(
            f"--calibrate: no run {run_id!r} in {root} "
            f"({'runs there: ' + shown if known else 'no runs there'}; "
            "the home is the config's 'home', KEYSHIFT_HOME)")
    return path


def _cores_of(master: str) -> int:
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master.strip())
    if m is None:
        return 1 if master.strip() == "local" else 2
    return (os.cpu_count() or 2) if m.group(1) == "*" else int(m.group(1))


def _task(t: dict[str, Any]) -> Task:
    return Task(int(t["engine"]), int(t.get("events", 0)), float(t.get("duration_s", 0.0)),
                int(t.get("restored", 0) or 0), int(t.get("restored_bytes", 0) or 0),
                float(t.get("fetch_s", 0.0) or 0.0))


def _commit_s(committed: Any) -> float:
    if not isinstance(committed, dict) or not committed:
        return 0.0
    try:
        return max(float(v) for v in committed.values())
    except (TypeError, ValueError):
        return 0.0


def _progress(path: Path) -> dict[int, float]:
    """Spark's seconds per batch that read input, from the run's ``progress.jsonl``."""
    from keyshift.control.batch_cost import read_jsonl

    out: dict[int, float] = {}
    for p in read_jsonl(path / "progress.jsonl"):
        try:
            if p.get("input_rows", 0) > 0 and p.get("trigger_s", 0) > 0:
                out[int(p["batch_id"])] = float(p["trigger_s"])
        except (ValueError, TypeError):
            continue
    return out


def read_run(path: Path, cfg: Any | None = None) -> Run:
    """The run in ``path``; ``cfg`` (a keyshift Config) fills what an older job.json lacks."""
    path = Path(path)
    try:
        job = json.loads((path / "job.json").read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"job.json: cannot read {path / 'job.json'}: {exc}") from None
    for key in ("run_id", "app", "policy", "groups", "engines", "trigger_s"):
        if key not in job:
            raise CalibrationError(f"job.json: {path / 'job.json'} has no {key!r}")
    lines_path = path / "batches.jsonl"
    raw: list[dict[str, Any]] = []
    if lines_path.is_file():
        for i, line in enumerate(lines_path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw.append(json.loads(line))
            except ValueError:
                raise CalibrationError(f"batches.jsonl: line {i} of {lines_path} is not JSON") \
                    from None
    # a re-executed batch (a restart) leaves two lines: the last attempt counts
    by_id = {int(b["batch_id"]): b for b in raw}
    raw = [by_id[k] for k in sorted(by_id)]
    raw = [b for b in raw if any(int(t.get("events", 0)) for t in b.get("tasks", []))
           or b.get("load_counts")]
    if not raw:
        raise CalibrationError(f"batches.jsonl: run {job['run_id']!r} has no batch with input "
                               f"in {lines_path}; nothing to calibrate on")
    if any("load_groups" not in b or "load_counts" not in b for b in raw):
        raise CalibrationError(
            f"batches.jsonl: run {job['run_id']!r} predates the per-group input "
            "(load_groups/load_counts) of each batch; make a new run to calibrate on")
    settings_from = "job.json"
    if "controller" in job and "per_window" in job:
        controller, per_window = dict(job["controller"]), int(job["per_window"])
    else:
        if cfg is None:
            from keyshift.config import load_config

            cfg = load_config()
        settings_from = "config"
        controller = cfg.controller.model_dump()
        per_window = max(1, round(float(cfg.controller.window_s) / float(job["trigger_s"])))
    progress = _progress(path)
    batches = []
    for b in raw:
        bid = int(b["batch_id"])
        groups = np.asarray(b["load_groups"], dtype=np.int64)
        counts = np.asarray(b["load_counts"], dtype=np.float64)
        if groups.shape != counts.shape or (groups.size and (
                groups.min() < 0 or groups.max() >= int(job["groups"]))):
            raise CalibrationError(f"batches.jsonl: batch {bid} has bad load_groups/load_counts")
        batches.append(Batch(
            batch_id=bid,
            measured_s=progress.get(bid, float(b["duration_s"])),
            duration_s=float(b["duration_s"]),
            engines_s=float(b.get("engines_s", 0.0)),
            controller_s=float(b.get("controller_s", 0.0)),
            slots=int(b.get("slots", job["engines"])),
            moved_groups=int(b.get("moved_groups", 0)),
            moved_bytes=int(b.get("moved_bytes", 0)),
            groups=groups, counts=counts,
            tasks=tuple(_task(t) for t in b.get("tasks", [])),
            split_groups=tuple(int(g) for g in b.get("split_groups", [])),
            commit_behind_s=_commit_s(b.get("committed_staged")),
            closes_window=bool(b["window_closed"]) if "window_closed" in b
            else counted_window_end(bid, per_window),
        ))
    timed_by = "triggerExecution" if all(b.batch_id in progress for b in batches) \
        else "duration_s"
    if timed_by == "duration_s":  # one measure for all batches
        batches = [replace(b, measured_s=b.duration_s) for b in batches]
    if "cores" in job:
        cores = int(job["cores"])
    else:
        if cfg is None:
            from keyshift.config import load_config

            cfg = load_config()
        cores = _cores_of(cfg.spark.master)
    return Run(
        run_id=str(job["run_id"]), path=path, app=str(job["app"]), policy=str(job["policy"]),
        app_params=dict(job.get("app_params") or {}) if isinstance(job.get("app_params"),
                                                                   dict) else {},
        groups=int(job["groups"]), engines=int(job["engines"]),
        trigger_s=float(job["trigger_s"]), per_window=per_window, controller=controller,
        policy_params=dict(job.get("policy_params") or {}), cores=max(1, cores),
        batches=tuple(batches), timed_by=timed_by, settings_from=settings_from,
        state_bytes=float(sum(t.get("state_bytes", 0) or 0 for t in raw[-1].get("tasks", []))),
    )
