"""``keyshift simulate --calibrate RUN_ID [--engines 8,32,128] [--cores C] [--json]``: the
cost model fitted to a real run, its replay against the run, and the projection to more
engines (:mod:`keyshift.sim.calibrate`; docs/simulator.md, "Calibrated on a real run")."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from keyshift.cli import UsageError

TERMS = (
    ("batch_fixed_s", "F", "s per batch: prep, writes, commit (batch − engine stage)"),
    ("stage_fixed_s", "S0", "s per batch: engine stage beyond its tasks"),
    ("stage_event_s", "s_in", "s per event / C: input read and routing"),
    ("task_fixed_s", "t0", "s per engine task"),
    ("event_s", "c_ev", "s per event in an engine task (the operator)"),
    ("restore_group_s", "c_rg", "s per group restored by a task"),
    ("restore_byte_s", "c_rb", "s per byte restored by a task"),
    ("migration_s", "m_mig", "s per batch that migrates"),
    ("move_group_s", "m_g", "s per moved group (driver side)"),
    ("move_byte_s", "m_B", "s per moved byte (driver side)"),
    ("controller_s", "k", "s per statistic window's last batch"),
    ("commit_share", "κ", "s per second of a background commit ending in the batch"),
    ("warmup_s", "W", "s, the run's first batch"),
)


def calibrated(args: argparse.Namespace) -> int:
    from keyshift.config import load_config
    from keyshift.sim.calibrate import DEFAULT_ENGINES, CalibrationError, calibrate

    cfg = load_config(getattr(args, "config", None))  # ConfigError: the CLI's one-line message
    engines = args.engine_list or list(DEFAULT_ENGINES)
    try:
        out = calibrate(cfg.home_path, args.calibrate, engines, args.cores, cfg,
                        getattr(args, "against", None) or [])
    except CalibrationError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(_plain(out), allow_nan=True))
    else:
        show(out)
    return 0


def _plain(value: Any) -> Any:
    """numpy scalars to Python numbers, recursively (the per-batch list included)."""
    import numpy as np

    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _num(x: float) -> str:
    if not isinstance(x, int | float) or not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:,.3f}" if abs(x) < 100 else f"{x:,.0f}"


def show(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    m, cal = out["model"], out["calibration"]
    console.print(f"run [bold]{out['run_id']}[/]: {out['app']} with {out['policy']}, "
                  f"{out['engines_measured']} engines on {out['cores_measured']} cores, "
                  f"{cal['measured']['batches']} batches timed by {out['timed_by']}")
    t = Table(title="fitted cost model")
    for col in ("term", "value", "unit and source"):
        t.add_column(col)
    for key, name, what in TERMS:
        t.add_row(name, _num(m[key]), what)
    console.print(t)
    notes = []
    if not m["s_in_fitted"]:
        notes.append("s_in not identifiable (batch sizes too even): folded into S0")
    if not m["per_group_fitted"]:
        notes.append("migration cost per migration only (too few migrations of different sizes)")
    for n in notes:
        console.print(f"  {n}")
    t = Table(title="calibration: the run's input replayed under its own policy")
    for col in ("", "batch p50 s", "batch p95 s", "events/s"):
        t.add_column(col, justify="right")
    for label, s in (("measured", cal["measured"]), ("predicted", cal["predicted"])):
        t.add_row(label, _num(s["batch_p50_s"]), _num(s["batch_p95_s"]),
                  _num(s["events_per_s"]))
    t.add_row("rel. error", _num(cal["batch_p50_rel_err"]), _num(cal["batch_p95_rel_err"]),
              _num(cal["events_per_s_rel_err"]))
    h = cal["holdout"]
    if "skipped" not in h:
        t.add_row(f"held out (fit {h['fit_batches']}, score {h['eval_batches']})",
                  _num(h["batch_p50_rel_err"]), _num(h["batch_p95_rel_err"]),
                  _num(h["events_per_s_rel_err"]))
    console.print(t)
    if cal.get("against"):
        t = Table(title="the fitted model predicts other runs it never saw")
        for col in ("run", "policy", "engines", "events/s meas / pred", "p50 err", "p95 err",
                    "events/s err"):
            t.add_column(col, justify="right")
        for a in cal["against"]:
            t.add_row(a["run_id"], a["policy"], str(a["engines"]),
                      f"{_num(a['measured']['events_per_s'])} / "
                      f"{_num(a['predicted']['events_per_s'])}",
                      _num(a["batch_p50_rel_err"]), _num(a["batch_p95_rel_err"]),
                      _num(a["events_per_s_rel_err"]))
        console.print(t)
    t = Table(title="projection: input per batch × engines / "
                    f"{out['engines_measured']}, first batch left out")
    for col in ("engines", "cores", "policy", "events/s", "batch p95 s", "RSTD %"):
        t.add_column(col, justify="right")
    for r in out["projection"]:
        t.add_row(str(r["engines"]), str(r["cores"]), r["policy"], _num(r["events_per_s"]),
                  _num(r["batch_p95_s"]), f"{r['rstd']:.1f}")
    console.print(t)
