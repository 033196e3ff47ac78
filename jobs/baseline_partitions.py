"""Batch job: offline LPTF and CLB plans from the ``key_loads`` history → Delta ``plans``.

Why offline plans at all: LPTF is the offline baseline of dlb §5 (train on yesterday's load,
apply today) and CLB (elb-clb Algorithm 2) needs the covariance of every group's load
series over many windows — both are too heavy, or too history-hungry, for the per-window
controller. The job writes each as a new version in scope ``baseline`` together with the
history range it saw and the imbalance it would have had there (mean per-window RSTD and
var(L)), beside KG's, so the speed layer and a person can compare them before using one.

Idempotent: a re-run over the same range with the same engine count finds the same plan
already stored (same policy, source range, engines and assignment) and adds nothing.

Run by hand::

    python -m keyshift.jobs.baseline_partitions --from 2026-11-01 --to 2026-11-25 [--engines 8]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keyshift.config import Config, load_config
from keyshift.control.once import decide_once
from keyshift.jobs.history import (
    DayRange,
    HistoryError,
    LoadHistory,
    add_range_arguments,
    imbalance_on_history,
    range_from_args,
    read_key_loads,
)
from keyshift.lakehouse.delta import (
    append_rows,
    plan_of,
    plan_row,
    read_table,
    table_exists,
)
from keyshift.plan import Plan
from keyshift.policies import Window, make_policy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCOPE = "baseline"
POLICIES = ("lptf", "clb")
DEFAULT_DAYS = 7


@dataclass(frozen=True)
class BaselinePlan:
    """One computed plan with what it would have done on the history."""

    policy: str
    plan: Plan
    expected: dict[str, float]
    moved_groups: int
    elapsed_ms: float
    info: dict[str, Any]


def compute_baselines(
    history: LoadHistory,
    engines: int,
    policies: Sequence[str] = POLICIES,
    policy_params: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, float], list[BaselinePlan]]:
    """KG's imbalance on the history, and each policy's plan with its own.

    Every policy starts from KG (``Plan.hashed``), the plan a deployment begins with, so
    ``moved_groups`` says how much state adopting the plan would move. LPTF sees the range's
    total load per group; CLB sees the per-bucket series (its covariance input) with the
    mean bucket as the current window (only the before/after report reads it).
    """
    if engines < 1:
        raise ValueError(f"engines: must be >= 1, got {engines}")
    params = policy_params or {}
    start = Plan.hashed(history.groups, engines)
    kg = imbalance_on_history(start, history.loads)
    out = []
    for name in policies:
        if name == "clb":
            window = Window(history.loads.mean(axis=0), history.state, history.loads)
        else:
            window = Window(history.loads.sum(axis=0), history.state)
        decision = decide_once(make_policy(name, **params.get(name, {})), start, window, name)
        out.append(
            BaselinePlan(
                policy=name,
                plan=decision.plan,
                expected=imbalance_on_history(decision.plan, history.loads),
                moved_groups=len(decision.moves),
                elapsed_ms=decision.elapsed_ms,
                info=decision.to_dict()["info"],
            )
        )
    return kg, out


def _stored_plans(spark: SparkSession, cfg: Config) -> list[dict[str, Any]]:
    """The ``baseline`` scope's rows (none before the first plan is written)."""
    if not table_exists(spark, cfg, "plans"):
        return []
    from pyspark.sql import functions as F

    rows = read_table(spark, cfg, "plans").where(F.col("scope") == SCOPE).collect()
    return [r.asDict() for r in rows]


def _same(row: dict[str, Any], candidate: BaselinePlan, history: LoadHistory) -> bool:
    stored = plan_of(row)
    return (
        row["policy"] == candidate.policy
        and stored.slots == candidate.plan.slots
        and _utc(row["source_from"]) == history.source_from
        and _utc(row["source_to"]) == history.source_to
        and np.array_equal(stored.assignment, candidate.plan.assignment)
    )


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def run(
    cfg: Config,
    days: DayRange,
    engines: int | None = None,
    policies: Sequence[str] = POLICIES,
    bucket_s: int = 3600,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Compute and store the baseline plans for ``days``; returns a JSON-able summary.

    ``status`` is ``written`` (at least one new version), ``unchanged`` (all already
    stored) or ``skipped`` (no key-load windows in the range). A missing ``key_loads``
    table raises :class:`keyshift.jobs.history.HistoryError`.
    """
    engines = cfg.engines.initial if engines is None else int(engines)
    if not 1 <= engines <= cfg.engines.max:
        raise ValueError(f"engines: must be in 1..{cfg.engines.max} (engines.max), got {engines}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"policies: unknown {', '.join(unknown)}; choose from lptf, clb")
    if spark is None:
        from keyshift.lakehouse.session import get_spark

        spark = get_spark(cfg, app_name="keyshift-baseline-partitions")
    history = read_key_loads(spark, cfg, days, bucket_s=bucket_s)
    summary: dict[str, Any] = {"job": "baseline_partitions", "range": str(days),
                               "engines": engines, "scope": SCOPE}
    if history is None:
        return {**summary, "status": "skipped",
                "reason": f"key_loads holds no windows in {days}: nothing to plan on"}
    skipped = {}
    if "clb" in policies and history.windows < 2:
        skipped["clb"] = (f"CLB needs the load series of at least 2 buckets, the range has "
                          f"{history.windows}; use a longer range or a smaller --bucket-s")
        policies = [p for p in policies if p != "clb"]
    params = {"clb": {"threshold": cfg.controller.clb_theta,
                      "subsets": cfg.controller.clb_subsets or None}}
    kg, plans = compute_baselines(history, engines, policies, params)
    stored = _stored_plans(spark, cfg)
    version = max((r["version"] for r in stored), default=0)
    now = datetime.now(UTC)
    rows, results = [], []
    for bp in plans:
        existing = next((r for r in stored if _same(r, bp, history)), None)
        if existing is None:
            version += 1
            rows.append(_row(bp, version, history, now))
        results.append({
            "policy": bp.policy,
            "version": int(existing["version"] if existing else version),
            "new": existing is None,
            "expected_rstd": bp.expected["rstd"],
            "expected_var": bp.expected["var"],
            "rstd_max": bp.expected["rstd_max"],
            "moved_groups_from_kg": bp.moved_groups,
            "elapsed_ms": bp.elapsed_ms,
            "info": bp.info,
        })
    if not plans:
        return {**summary, "status": "skipped", "reason": "; ".join(skipped.values())}
    if rows:
        append_rows(spark, cfg, "plans", rows)
    return {
        **summary,
        "status": "written" if rows else "unchanged",
        "windows": history.windows,
        "groups": history.groups,
        "bucket_s": bucket_s,
        "source_from": history.source_from.isoformat(),
        "source_to": history.source_to.isoformat(),
        "kg": {"expected_rstd": kg["rstd"], "expected_var": kg["var"],
               "rstd_max": kg["rstd_max"]},
        "plans": results,
        "skipped_policies": skipped,
    }


def _row(bp: BaselinePlan, version: int, history: LoadHistory, now: datetime) -> dict[str, Any]:
    """The ``plans`` row of a baseline plan: the history it saw and what it would have done."""
    reason = (f"offline {bp.policy} on {history.windows} buckets of {history.bucket_s}s; "
              f"mean per-window RSTD {bp.expected['rstd']:.1f}% "
              f"(max {bp.expected['rstd_max']:.1f}%); {bp.moved_groups} groups move from KG")
    return plan_row(replace(bp.plan, version=version), SCOPE, bp.policy, reason,
                    created_at=now, source_from=history.source_from,
                    source_to=history.source_to, expected_rstd=bp.expected["rstd"],
                    expected_var=bp.expected["var"])


def print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result["status"] == "skipped":
        console.print(f"[yellow]baseline_partitions skipped[/]: {result['reason']}")
        return
    t = Table(title=f"baseline plans on {result['range']} ({result['windows']} buckets, "
                    f"{result['engines']} engines) — {result['status']}")
    for col in ("policy", "version", "RSTD%", "max%", "var(L)", "moved", "vs KG"):
        t.add_column(col, justify="right" if col != "policy" else "left")
    kg = result["kg"]
    t.add_row("kg", "-", f"{kg['expected_rstd']:.2f}", f"{kg['rstd_max']:.2f}",
              f"{kg['expected_var']:.4g}", "0", "1.00")
    for p in result["plans"]:
        ratio = p["expected_rstd"] / kg["expected_rstd"] if kg["expected_rstd"] else float("nan")
        t.add_row(p["policy"], f"{p['version']}{' (new)' if p['new'] else ''}",
                  f"{p['expected_rstd']:.2f}", f"{p['rstd_max']:.2f}",
                  f"{p['expected_var']:.4g}", str(p["moved_groups_from_kg"]), f"{ratio:.2f}")
    console.print(t)
    console.print("RSTD%: mean per-bucket imbalance (dlb Eq. 2) on the history; max%: worst "
                  "bucket; moved: groups moved from KG; vs KG: RSTD ratio.")
    for name, why in result.get("skipped_policies", {}).items():
        console.print(f"[yellow]{name} skipped[/]: {why}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_range_arguments(p)
    p.add_argument("--engines", type=int, default=None,
                   help="engine count of the plans (default: engines.initial)")
    p.add_argument("--policies", default=",".join(POLICIES),
                   help="comma-separated subset of lptf,clb (default: both)")
    p.add_argument("--bucket-s", type=int, default=3600,
                   help="aggregate statistic windows into buckets of this many seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


# what fails a run without being the caller's input: status 1
RUNTIME_ERRORS: tuple[type[BaseException], ...] = (HistoryError,)


def run_from_args(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_config(args.config)
    days = range_from_args(args, DEFAULT_DAYS)
    policies = [s.strip() for s in args.policies.split(",") if s.strip()]
    return run(cfg, days, engines=args.engines, policies=policies, bucket_s=args.bucket_s)


def main(argv: list[str] | None = None) -> int:
    from keyshift.jobs.report import run_job

    p = argparse.ArgumentParser(prog="python -m keyshift.jobs.baseline_partitions",
                                description=__doc__.split("\n")[0])
    add_arguments(p)
    p.set_defaults(config=None)
    return run_job("baseline_partitions", p.parse_args(argv), run_from_args, print_summary,
                   RUNTIME_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
