"""A run's summary and HTML report (``keyshift report``, the end of ``keyshift demo``), from
what the run wrote to the warehouse.

Everything here is read back from the warehouse (``metrics``, ``decisions``, ``migrations``,
``control_state``, ``events_out``) rather than from the job's memory, so the report of a run that was
interrupted and restarted still tells the whole story, and any run can be reported, live or
not: the rows a live job has staged but not committed yet are included
(:func:`keyshift.streaming.runs.current`). The rows come from a :class:`~keyshift.streaming.runs.Rows`:
read without Spark where the warehouse allows it (``keyshift report``), through the job's
session otherwise (``keyshift demo``).
"""

from __future__ import annotations

import html
import itertools
import json
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.apps import TopK

if TYPE_CHECKING:
    import pandas as pd

    from keyshift.config import Config

    from .runs import Rows


@dataclass(frozen=True)
class RunTables:
    """The run's rows the summary and the report are built from, read from Delta once."""

    metrics: pd.DataFrame
    decisions: pd.DataFrame
    migrations: pd.DataFrame
    control: pd.DataFrame  # control_state: the scaler's observed and forecast In per window

    @classmethod
    def read(cls, rows: Rows, run_id: str) -> RunTables:
        def frame(name: str) -> pd.DataFrame:
            return rows.frame(name, run_id)

        return cls(frame("metrics").sort_values("batch_id"),
                   frame("decisions").sort_values("batch_id"), frame("migrations"),
                   frame("control_state").sort_values("batch_id"))


def counters(valid: int, dead_letters: int, processed: int | None) -> dict[str, int]:
    """A run's counts in the one vocabulary every output uses (``run --json``, ``status``,
    ``report``, the demo): ``records`` taken from Kafka = ``valid`` (parsed and routed to the
    engines; the ``metrics`` column ``events_in``) + ``dead_letters`` (refused, in
    ``dead_letter``); ``processed`` by the operator (left out where it was not read).
    ``events_in`` and ``dead_letter`` are the older names of ``valid`` and ``dead_letters``,
    kept for the scripts that read them."""
    valid, dead = int(valid), int(dead_letters)
    return {"records": valid + dead, "valid": valid, "dead_letters": dead,
            **({} if processed is None else {"processed": int(processed)}),
            "events_in": valid, "dead_letter": dead}


def batch_counters(batches: Iterable[tuple[int, int, int, int]]) -> dict[str, int]:
    """:func:`counters` of (batch id, valid, dead letters, processed) per batch, each batch
    id once (its last account: a batch run again after a restart is the same batch, and the
    job's writes of it land once), with ``batches``, the number of batch ids."""
    last = {int(b): (v, d, p) for b, v, d, p in batches}
    valid, dead, processed = (sum(x[i] for x in last.values()) for i in range(3))
    return {"batches": len(last), **counters(valid, dead, processed)}


def metrics_counters(m: pd.DataFrame) -> dict[str, int]:
    """:func:`batch_counters` of a run's ``metrics`` rows (``batch_id``, ``events_in``,
    ``dead_letter``, ``processed``)."""
    if not len(m):
        return batch_counters(())
    return batch_counters(zip(m.batch_id, m.events_in, m.dead_letter, m.processed,
                              strict=True))


def summarize(tables: RunTables, cfg: Config, run_id: str, wall_s: float | None = None,
              records: int | None = None) -> dict[str, Any]:
    """The summary object of a run (``keyshift demo --json`` and ``keyshift report --json``
    print it). ``wall_s`` is what the caller timed, by default the span of the run's batches.
    The counts come from the run's ``metrics`` rows only (:func:`metrics_counters`), so they
    are the ones ``status`` shows; ``records`` (what a caller took from Kafka) is accepted
    and not used."""
    m, mig, d = tables.metrics, tables.migrations, tables.decisions
    if wall_s is None:
        wall_s = ((m.window_end.max() - m.window_start.min()).total_seconds() if len(m)
                  else 0.0)
    done = mig[mig.status == "completed"] if len(mig) else mig
    scaled = d[(d.component == "scaler") & d.plan_version.notna()] if len(d) else d
    busy = m[m.events_in > 0] if len(m) else m
    durations = m.batch_duration_s.to_numpy() if len(m) else np.zeros(0)
    counts = metrics_counters(m)
    processed = counts["processed"]
    return {
        "run_id": run_id,
        **counts,
        "complex_events": int(m.out_events.sum()) if len(m) else 0,
        "migrations": len(done),
        "moved_groups": int(sum(len(g) for g in done.groups)) if len(done) else 0,
        "moved_bytes": int(done["bytes"].sum()) if len(done) else 0,
        "rstd_mean": float(busy.rstd.mean()) if len(busy) else 0.0,
        "rstd_max": float(busy.rstd.max()) if len(busy) else 0.0,
        # the least RSTD any plan keeping a key on one engine reaches (keyshift.control.floor;
        # None: rows written before schema version 2)
        "floor_rstd_mean": (float(busy.floor_rstd.mean()) if len(busy) and _has_floor(busy)
                            else None),
        "events_per_s": processed / wall_s if wall_s > 0 else 0.0,
        "batch_p50_s": float(np.percentile(durations, 50)) if durations.size else 0.0,
        "batch_p95_s": float(np.percentile(durations, 95)) if durations.size else 0.0,
        "engines_min": int(m.engines.min()) if len(m) else 0,
        "engines_max": int(m.engines.max()) if len(m) else 0,
        "engines_final": int(m.engines.iloc[-1]) if len(m) else 0,
        # what the run held for its engines: core-seconds as the cluster bills them, from the
        # run folder where this host has it, else from the metrics rows (schema 4 on)
        **_held(m, cfg.run_dir(run_id) / "resources.json"),
        # changes of N the engine scaler realized (0 unless [planner] enabled)
        "scale_actions": len(scaled),
        # when the first of them was decided, in seconds after the first batch started
        "first_scale_s": (round((scaled.decided_at.min() - m.window_start.min())
                                .total_seconds(), 1) if len(scaled) and len(m) else None),
        # scale-outs judged ineffective (keyshift.control.guard; each held further scale-out
        # for a cool-off): their decisions rows, action 'ineffective', say why
        "ineffective_scalings": int((d.action == "ineffective").sum()) if len(d) else 0,
        "warehouse": cfg.warehouse_uri,  # a remote one (s3a://...) has no local path
    }


def _held(m: pd.DataFrame, folder_held: Path | None = None) -> dict[str, Any]:
    """Cores held: the most, and core-seconds. The run's own count
    (``resources.json``: from each process's registration with the cluster manager, what
    ``run --json`` said) where the run folder is on this host; else each batch's cores held
    from its start to the next batch's start (the last batch's for its own duration), which
    leaves out start-up."""
    from .executors import read_held

    own = read_held(folder_held) if folder_held is not None else None
    if not len(m) or "cores_held" not in m or not m.cores_held.notna().any():
        if own is None:
            return {"cores_held_max": None, "core_seconds": None}
        return {"cores_held_max": None, "core_seconds": own["core_seconds"],
                "core_seconds_billed": own["core_seconds_billed"]}
    rows = m[m.cores_held.notna()].sort_values("batch_id")
    starts = rows.window_start.map(lambda x: x.timestamp()).to_numpy(dtype=float)
    spans = np.append(np.diff(starts), float(rows.batch_duration_s.iloc[-1]))
    from_rows = round(float((rows.cores_held.to_numpy(dtype=float)
                             * np.clip(spans, 0, None)).sum()), 1)
    out: dict[str, Any] = {"cores_held_max": int(rows.cores_held.max()),
                           "core_seconds": from_rows if own is None else own["core_seconds"]}
    if own is not None:
        out["core_seconds_billed"] = own["core_seconds_billed"]
        if not own["core_seconds_billed"]:
            out["core_seconds_note"] = ("a local master: nothing was billed by a cluster; "
                                        "these are the cores the process could use")
    return out


def report_run(rows: Rows, cfg: Config, run_id: str, folder: Path,
               app: str | None = None, wall_s: float | None = None, records: int | None = None,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read the run, summarize it and write its report into ``folder``: the one way
    ``keyshift demo`` and ``keyshift report`` make a report. Returns the summary, with the
    report's path under ``report``; ``extra`` adds to the summary (the demo's own numbers)."""
    tables = RunTables.read(rows, run_id)
    summary = summarize(tables, cfg, run_id, wall_s, records)
    summary.update(_cost(cfg, run_id, tables.metrics))
    summary.update(extra or {})
    page = write_report(rows, cfg, run_id, tables, folder, summary, app)
    summary["report"] = str(page)
    return summary


def _cost(cfg: Config, run_id: str, m: pd.DataFrame) -> dict[str, Any]:
    """Where a batch's time went, the events' wait and the balancer's verdict
    (keyshift.control.batch_cost) from the run folder when it is on this host; else the
    wait from the ``metrics`` rows (the median of the batches' p50 and p95, schema 5 on)."""
    from keyshift.control.batch_cost import folder_cost

    cost = folder_cost(cfg.run_dir(run_id), cfg.controller.window_s)
    if cost is not None:
        return cost
    timed = m[m.e2e_p50_s.notna()] if len(m) and "e2e_p50_s" in m else m.iloc[0:0]
    return {"e2e_p50_s": float(timed.e2e_p50_s.median()) if len(timed) else None,
            "e2e_p95_s": float(timed.e2e_p95_s.median()) if len(timed) else None}


def write_report(rows: Rows, cfg: Config, run_id: str, tables: RunTables,
                 folder: Path, summary: dict[str, Any], app: str | None) -> Path:
    """PNG plots and ``report.html`` in the run folder; returns the HTML path (``rows``
    gives ``events_out`` for the click-stream app's top-k table)."""
    folder.mkdir(parents=True, exist_ok=True)
    m = tables.metrics
    images = _plots(cfg, run_id, tables, folder)
    extra = ""
    if app == "clicks":
        out = rows.frame("events_out", run_id, ["detail"])
        top = TopK(10)
        top.update(json.loads(x)["pattern"] for x in out.detail)
        extra = _table(["pattern", "count"], top.top(), "Top-10 click patterns (top-k operator)")
    body = (
        f"<h1>keyshift run {html.escape(run_id)}</h1>"
        + _table(["metric", "value"], [(k, human(v)) for k, v in summary.items()
                                       if k not in ("stages", "balancer")], "Summary")
        + _cost_note(summary)
        + _floor_note(m, app, summary.get("policy"), _app_params(cfg.run_dir(run_id)))
        + "".join(f'<h2>{html.escape(c)}</h2><img src="{f}" alt="{html.escape(c)}">'
                  for f, c in images)
        + _changes(tables)
        + extra
    )
    page = folder / "report.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>keyshift run {html.escape(run_id)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style>"
        f"</head><body>{body}</body></html>"
    )
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    return page


def _plots(cfg: Config, run_id: str, tables: RunTables, folder: Path) -> list[tuple[str, str]]:
    """The report's PNGs in ``folder``: (file, caption) of each one drawn."""
    m, d = tables.metrics, tables.decisions
    images = []
    if len(m):
        import matplotlib

        matplotlib.use("Agg")
        t = (m.window_end - m.window_end.iloc[0]).dt.total_seconds().to_numpy()
        _timeline_plot(m, d, t, folder / "timeline.png")
        images.append(("timeline.png", "RSTD, throughput and batch duration over time"))
        _engine_loads_plot(m, t, folder / "engine_loads.png")
        images.append(("engine_loads.png", "events per engine per batch"))
        if _forecast_plot(tables.control, cfg.controller.window_s, m.window_start.min(),
                          folder / "forecast.png"):
            images.append(("forecast.png", "Input rate: the scaler's forecast vs actual"))
    if _stages_plot(cfg.run_dir(run_id), folder / "stages.png"):
        images.append(("stages.png", "Where each batch's time went (seconds per stage)"))
    return images


def _changes(tables: RunTables) -> str:
    """The decisions that changed the plan and the completed migrations, as tables."""
    d, mig = tables.decisions, tables.migrations
    dec_rows = [] if not len(d) else [
        (str(r.batch_id), r.action,
         f"{r.rstd_before:.1f}" if r.rstd_before == r.rstd_before else "",
         f"{r.rstd_after:.1f}" if r.rstd_after == r.rstd_after else "",
         human(r.moved_groups), r.reason)
        for r in d[d.action != "none"].itertuples()
    ]
    mig_rows = [] if not len(mig) else [
        (r.migration_id, human(len(r.groups)), human(r.bytes), r.status,
         human((r.ended_at - r.started_at).total_seconds()) if r.ended_at is not None else "")
        for r in mig[mig.status == "completed"].itertuples()
    ]
    return (_table(["batch", "action", "RSTD before", "RSTD after", "moved groups", "reason"],
                   dec_rows, "Decisions that changed the plan")
            + _table(["migration", "groups", "bytes", "status", "seconds"], mig_rows,
                     "Migrations"))


def _cost_note(summary: dict[str, Any]) -> str:
    """The batch's stack and the balancer's verdict, in words and a table."""
    from keyshift.control.batch_cost import STAGES, cost_lines

    lines = cost_lines(summary)
    if not lines:
        return ""
    stages = summary.get("stages") or {}
    table = _table(["stage", "median seconds per batch"],
                   [(k, human(stages[k])) for k in (*STAGES, "control") if k in stages],
                   "Where a batch's time goes") if stages else ""
    return "".join(f"<p>{html.escape(x)}</p>" for x in lines) + table


def _stages_plot(run_dir: Path, path: Path) -> bool:
    """Each timed batch's stages stacked (keyshift.control.batch_cost); False without."""
    from keyshift.control.batch_cost import STAGES, per_batch_stages, read_jsonl

    rows = per_batch_stages(read_jsonl(run_dir / "batches.jsonl"),
                            read_jsonl(run_dir / "progress.jsonl"))
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([b for b, _ in rows])
    fig, ax = plt.subplots(figsize=(10, 4))
    bottom = np.zeros(x.size)
    for k in STAGES:
        y = np.array([s[k] for _, s in rows])
        if y.any():
            ax.bar(x, y, bottom=bottom, label=k, width=0.9)
            bottom += y
    ax.set_xlabel("batch")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _timeline_plot(m: pd.DataFrame, d: pd.DataFrame, t: np.ndarray, path: Path) -> None:
    """RSTD (with the floor and the rebalances), events/s with the live engines, and the
    batch duration with Lat, one above the other on the batches' time."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    ax[0].plot(t, m.rstd, marker=".", label="imbScore / RSTD (%)")
    moved_at = d[d.moved_groups.fillna(0) > 0] if len(d) else d
    for _, row in moved_at.iterrows():
        hit = m.batch_id == row.batch_id
        if hit.any():
            ax[0].axvline(t[hit.to_numpy()][0], color="tab:red", alpha=0.3)
    if _has_floor(m):  # rows of schema version 2 on: the floor of each batch
        ax[0].plot(t, m.floor_rstd, linestyle="--", color="tab:gray",
                   label="floor: least RSTD of any plan keeping a key on one engine")
    ax[0].legend(loc="upper right", fontsize=8)
    ax[0].set_ylabel("RSTD (%)")
    ax[0].set_title("Load imbalance per batch (red: a rebalance was decided)")
    ax[1].plot(t, m.processed / m.batch_duration_s.clip(lower=1e-3), marker=".")
    ax[1].set_ylabel("events/s (per batch)")
    live = ax[1].twinx()  # N, which the engine scaler changes when [planner] is on
    live.step(t, m.engines, where="post", color="tab:green", label="live engines")
    top = int(m.engines.max())
    held = m.cores_held if "cores_held" in m else None
    if held is not None and held.notna().any():  # what N cost (streaming/executors.py)
        live.step(t, held.astype(float), where="post", color="tab:purple", linestyle="--",
                  label="cores held")
        top = max(top, int(held.max()))
    live.set_ylabel("live engines, cores held")
    live.set_ylim(0, max(top, 1) + 1)
    live.legend(loc="upper right")
    ax[2].plot(t, m.batch_duration_s, marker=".", label="batch duration (s)")
    ax[2].set_ylabel("batch duration (s)")
    ax[2].set_xlabel("seconds since the first batch")
    lat = ax[2].twinx()  # Lat is per tuple: milliseconds, not the batch's seconds
    lat.plot(t, 1000 * m.latency_s, marker=".", color="tab:orange",
             label="engine time per event (ms)")
    lat.set_ylabel("Lat (ms per event)")
    ax[2].legend(loc="upper left")
    lat.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _engine_loads_plot(m: pd.DataFrame, t: np.ndarray, path: Path) -> None:
    """Events per engine slot per batch, stacked (slots a scale-out added start at 0)."""
    import matplotlib.pyplot as plt

    loads = [np.asarray(x, dtype=float) for x in m.engine_loads]
    width = max(len(x) for x in loads)
    grid = np.zeros((len(loads), width))
    for i, x in enumerate(loads):
        grid[i, : len(x)] = x
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.stackplot(t, grid.T, labels=[f"engine {e}" for e in range(width)])
    ax.set_ylabel("events per batch")
    ax.set_xlabel("seconds since the first batch")
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    ax.set_title("Load per engine slot")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _has_floor(m: pd.DataFrame) -> bool:
    return "floor_rstd" in m and bool(m.floor_rstd.notna().any())


def _app_params(run_dir: Path) -> dict[str, Any]:
    """The operator's parameters of the run (its ``job.json``, on the driver's host)."""
    from keyshift.streaming.runs import run_meta

    params = run_meta(run_dir).get("app_params")
    return params if isinstance(params, dict) else {}


def _floor_note(m: pd.DataFrame, app: str | None, policy: str | None,
                params: Mapping[str, Any] | None = None) -> str:
    """The report's section of :func:`floor_text`."""
    text = floor_text(m, app, policy, params)
    return f"<h2>The floor</h2><p>{html.escape(text)}</p>" if text else ""


def floor_text(m: pd.DataFrame, app: str | None, policy: str | None,
               params: Mapping[str, Any] | None = None) -> str:
    """What the balancer could not do in this run: the batches whose hottest key group
    alone outweighed the mean engine load (keyshift.control.floor), and the lever past it:
    a policy splitting the hot key (dc, wc) for an operator with a summary, else the form or
    the hooks that would give it one (``report`` and ``status --run-id`` say it)."""
    if not len(m) or not _has_floor(m):
        return ""
    busy = m[(m.events_in > 0) & m.floor_ratio.notna()]
    bound = busy[busy.floor_ratio > 1.0]
    if not len(bound):
        return ("No key group outweighed the mean engine load in any batch: the floor "
                "(dashed on the RSTD plot) is 0 and a plan keeping each key on one engine "
                "can balance this input.")
    top = bound.loc[bound.hot_group_share.idxmax()]
    text = (f"In {len(bound)} of {len(busy)} batches one key group alone outweighed the mean "
            f"engine load (at most group {int(top.hot_group)} with "
            f"{top.hot_group_share:.0%} of batch {int(top.batch_id)}, "
            f"{top.floor_ratio:.2f}x the mean). No plan that keeps a key on one engine can "
            "make the busiest engine lighter than that group: the dashed line on the RSTD "
            "plot is the least RSTD such a plan reaches.")
    summarizes = _summarizes(app, params)
    if _splits_hot_keys(policy):
        text += (f" This run's policy {policy} splits a hot key's events over engines, "
                 "which is how its RSTD can go below the floor.")
    elif summarizes:
        text += (f" {app} summarizes part of a key's events, so the policies dc and wc "
                 "(--policy dc | wc) would split the hot key over engines and go below it.")
    elif summarizes is None:
        text += f" {unknown_operator(app)}"
    elif app:
        text += split_hint(app)
    return text


def split_hint(app: str) -> str:
    """The lever past the floor for an operator without summary hooks: its splittable form
    when it declares one (``split_params``), else the Operator API's hooks."""
    from keyshift.apps import known_operator

    cls = known_operator(app)
    form = getattr(cls, "split_params", None) if cls is not None else None
    if form:
        return (f" {app} in this form offers no summary of part of a key's events; its form "
                f"--params '{json.dumps(dict(form))}' does, and the policies dc and wc "
                "(--policy dc | wc) would split the hot key over engines (docs/operators.md).")
    return (f" {app} offers no summary of part of a key's events, so its hot key cannot be "
            "split: declaring the Operator API's summary hooks (summarize, combine, "
            "apply_summary; docs/operators.md) would let dc and wc split it.")


def _splits_hot_keys(policy: str | None) -> bool:
    """Whether the run's policy splits hot keys (kind ``splitter``: dc, wc, or an installed
    package's); a name no longer installed does not."""
    from keyshift.policies import PolicyInputError, PolicyKind, policy_kind

    try:
        return bool(policy) and policy_kind(policy) is PolicyKind.SPLITTER
    except PolicyInputError:
        return False


def _summarizes(app: str | None, params: Mapping[str, Any] | None = None) -> bool | None:
    """Whether the run's operator has the summary hooks a hot-key split needs; None when
    this host does not know the operator. ``app`` was read from the warehouse (or a run's
    file): it is looked up among the shipped and installed operators, never imported
    (:func:`keyshift.apps.known_operator`), so a forged row cannot run code here."""
    if not app:
        return False
    from keyshift.apps import known_operator

    cls = known_operator(app)
    if cls is None:
        return None
    try:
        if params:  # the run's own form (heavy with mergeable: true is another class)
            cls = type(cls(**params))
        return bool(cls.summarizes())
    except Exception:  # noqa: BLE001 -- an installed operator whose hook fails: not checked
        return None


def unknown_operator(app: str) -> str:
    """The sentence the report says of an operator name this host does not know."""
    return (f"Operator {app} is not one this host knows (shipped, or an installed entry "
            "point of group keyshift.operators); its summary hooks are not checked.")


def _forecast_plot(control: pd.DataFrame, window_s: float, origin: pd.Timestamp,
                   path: Path) -> bool:
    """The scaler's forecast In of each window next to the In it then measured (both per
    second of Δ), with the engines that ran each window, from ``control_state``; False when
    the scaler forecast nothing.

    A row's ``fc_in`` is the forecast of the window the decision entered, i.e. the window
    after the one its ``obs_*`` describe, so it is drawn at the next window's start: a
    forecast and the measurement of the same window share an x. Windows are counted in
    batches, so on a host slower than the trigger they last longer than Δ and the x axis
    (wall clock) stretches; In per Δ is what the scaler plans with either way."""
    import matplotlib.pyplot as plt

    rows = control[control.obs_t.notna()] if len(control) else control
    made = rows[rows.fc_in.fillna(0) > 0] if len(rows) else rows
    if not len(made):
        return False
    start = (origin.tz_localize("UTC") if origin.tzinfo is None else origin).timestamp()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    t = (rows.obs_t - start).to_numpy()
    nxt = dict(itertools.pairwise(t))  # a window's start -> the next window's
    fc_t = [nxt.get(x, x + window_s) for x in (made.obs_t - start).to_numpy()]
    ax.plot(t, rows.obs_in / window_s, marker=".", label="actual")
    ax.plot(fc_t, made.fc_in / window_s, marker="x", linestyle="--",
            label="forecast (scaler)")
    ax.set_ylabel("In per Δ (events/s)")
    ax.set_xlabel("seconds since the first batch started (window starts)")
    ax.legend(loc="upper left")
    live = ax.twinx()
    live.plot(t, rows.obs_engines, drawstyle="steps-post", marker="_", color="tab:green",
              label="engines")  # a marker: a run of one window still shows its N
    live.set_ylabel("engines that ran the window")
    live.set_ylim(0, max(int(rows.obs_engines.max()), 1) + 1)
    live.legend(loc="upper right")
    ax.set_title("Input rate per window: forecast vs actual")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def human(value: Any) -> str:
    """A value as a person reads it in the report: whole numbers with thousands separators,
    others rounded (3 significant places at most, never more than 3 decimals), yes or no,
    n/a for none, a mapping as ``key: value`` pairs; ``summary.json`` and ``--json`` keep
    the exact values."""
    if value is None or (isinstance(value, numbers.Real) and value != value):
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        v = float(value)
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {human(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(human(v) for v in value)
    return str(value)


def _table(head: list[str], rows: list, title: str) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    tr = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<h2>{html.escape(title)}</h2><table><tr>{th}</tr>{tr or '<tr><td>none</td></tr>'}</table>"
