"""What the DAGs' tasks do, so that the DAG files only schedule (docs/design.md, batch layer).

Each function maps a job's outcome onto Airflow's task states, because that mapping is the
operator's interface at night:

* ``skipped`` result (empty range, too little history) → ``AirflowSkipException`` with the
  reason: the task shows as skipped, the run still succeeds, nobody is paged;
* a mistake no retry can fix (missing Delta table, bad parameter or configuration) →
  ``AirflowFailException``: fails at once, without burning the retries;
* anything else (an unreachable tracking server, a Spark hiccup) → re-raised, so Airflow
  retries it with exponential back-off.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta
from typing import Any

from keyshift.config import ConfigError, load_config
from keyshift.jobs.history import DayRange, HistoryError, parse_day

log = logging.getLogger(__name__)


def nightly_range(run_date: datetime | date, days: int, last: str | None = None) -> DayRange:
    """The ``days`` whole days before the run's date, or ending with ``last`` when given.

    A run at 02:00 on the 26th covers days up to the 25th: the day that just closed,
    never the one still being written.
    """
    from airflow.sdk.exceptions import AirflowFailException

    try:
        end = parse_day(last, "to") if last else _as_date(run_date) - timedelta(days=1)
        return DayRange.ending(end, int(days))
    except ValueError as exc:
        raise AirflowFailException(f"params.{exc}") from None


def run_date_of(context: Any) -> datetime:
    """The date a run stands for: its logical date, or, for a manual run without one
    (Airflow 3 allows that), the moment it was queued."""
    return context.get("logical_date") or context["dag_run"].run_after


def _as_date(value: datetime | date) -> date:
    return value.date() if isinstance(value, datetime) else value


def _run(job: str, call: Any) -> dict[str, Any]:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from keyshift.lakehouse.logs import relay_jvm_stderr

    # Airflow logs a task's stderr as ERROR: the Spark driver's stderr (its WARN and INFO
    # lines, the JVM's own warnings) goes to the task log at each line's level instead
    relay_jvm_stderr()
    try:
        result = call()
    except (HistoryError, ConfigError, ValueError) as exc:
        raise AirflowFailException(f"{job}: {exc}") from None
    if result.get("status") == "skipped":
        log.warning("%s skipped: %s", job, result["reason"])
        raise AirflowSkipException(f"{job} skipped: {result['reason']}")
    return result


def retrain(
    run_date: datetime | date, days: int, last: str | None = None, kernel: str = "auto"
) -> dict[str, Any]:
    """The nightly retrain over the look-back window; returns the job's summary (XCom)."""
    from keyshift.jobs import retrain_models

    span = nightly_range(run_date, days, last)
    return _run("retrain_models",
                lambda: retrain_models.run(load_config(), span, kernel=kernel))


def baselines(
    run_date: datetime | date, days: int, engines: int | None = None, last: str | None = None
) -> dict[str, Any]:
    """LPTF and CLB plans over the look-back window; returns the job's summary (XCom)."""
    from keyshift.jobs import baseline_partitions

    span = nightly_range(run_date, days, last)
    return _run(
        "baseline_partitions",
        lambda: baseline_partitions.run(load_config(), span, engines=engines),
    )


def maintenance(
    tables: list[str] | None = None, retention_hours: float | None = None
) -> dict[str, Any]:
    """OPTIMIZE + VACUUM of keyshift's Delta tables (``keyshift.jobs.table_maintenance``); returns the
    job's summary (XCom). A retention under 168 h is a config error naming the key."""
    from keyshift.jobs import table_maintenance

    def call() -> dict[str, Any]:
        over = ({"warehouse": {"vacuum_retention_hours": retention_hours}}
                if retention_hours is not None else {})
        return table_maintenance.run(load_config(**over), tables)

    return _run("table_maintenance", call)


def report(result: dict[str, Any]) -> str:
    """One human line per run for the task log and the run's XCom (what the night produced)."""
    if result.get("job") == "baseline_partitions":
        kg = result["kg"]["expected_rstd"]
        parts = [
            f"{p['policy']} v{p['version']}{' (new)' if p['new'] else ''}: "
            f"RSTD {p['expected_rstd']:.1f}% (KG {kg:.1f}%), moves {p['moved_groups_from_kg']}"
            for p in result["plans"]
        ]
        line = f"baselines on {result['range']}, {result['engines']} engines: " + "; ".join(parts)
        groups, engines = result.get("groups"), result["engines"]
        if groups and any(p["policy"] == "clb" for p in result["plans"]):
            # Checked (issue 46 item 11): CLB repartitions from scratch and ignores state
            # movement (elb-clb §4, amortised over its period), so its plan owes nothing to
            # KG's hash and moves about (1 - 1/N) of the groups: 3,079 of 4,096 on 4 engines
            # is that, not a fault.
            line += (f" (of {groups} groups; CLB ignores state movement, elb-clb §4: a plan "
                     f"that owes nothing to KG's hash moves about (1 - 1/{engines}) of them, "
                     f"{round(groups * (1 - 1 / engines))})")
    else:
        parts = []
        for workload, outcome in (result.get("workloads") or {}).items():
            models = (outcome.get("models") or {}).get("models") or {}
            said = []
            for which, m in models.items():
                metrics = m.get("metrics", {})
                moved = "moved" if m.get("champion_moved") else "kept"
                label = f"v{m['version']}" if m.get("version") else "no new version"
                said.append(
                    f"{which} {m.get('name')} {label} ({m.get('forecaster') or m.get('kernel')}): "
                    f"CC {metrics.get('cc', float('nan')):.3f}, RMSE {metrics.get('rmse', float('nan')):.4g}"
                    f" on the held-out tail; champion {moved} ({m.get('reason')})")
            parts.append(f"{workload}: " + ("; ".join(said) or outcome.get("reason", "")))
        line = (f"retrain on {result['range']} ({result['windows']} windows): "
                + (" | ".join(parts) or str(result.get("reason"))))
    log.info("%s", line)
    return line


# --- What every keyshift DAG shares (imported by the DAG files when they are parsed, so
# only the standard library, keyshift.config and Airflow's SDK are used here) ---

#: URI of the asset a successful nightly retrain emits (new versions registered, champion
#: decided); the baseline partitions DAG is scheduled on it instead of on a clock.
MODELS_ASSET_URI = "keyshift://models/champions"

#: The report tasks only turn a job's summary into one line: a few minutes are plenty.
REPORT_TIMEOUT = timedelta(minutes=5)

#: Appended to every keyshift DAG's docs (its page in the UI): the first thing a new user
#: of Airflow meets is a run that stays queued.
PAUSED_NOTE = """
**First use:** Airflow creates a DAG *paused*. A run triggered while it is paused waits,
queued, until it is unpaused: the toggle beside the DAG's name in the UI, or
`airflow dags unpause DAG_ID` (with `keyshift airflow env`'s variables). Unpausing starts no
run for nights already missed; the first scheduled run is the next one on the clock.
"""


def nightly(cron: str) -> Any:
    """The schedule of a nightly DAG: ``cron`` in UTC, and no run for a time already past
    when the DAG first appears or is first unpaused (no ``start_date``, which would make
    Airflow run the latest missed time at once even with ``catchup=False``).

    ``run_immediately`` is a zero timedelta, not False: in Airflow 3.3 False takes the
    same undocumented buffer as None (the past time runs at once when it is within a tenth
    of the interval, at least 5 min, of now: 2.4 h for a nightly DAG), so a DAG unpaused at
    02:16 ran for 02:00 on the spot (apache/airflow PR #64162 makes False mean "never"). A
    zero buffer is "never" on every version."""
    from airflow.sdk import CronTriggerTimetable

    return CronTriggerTimetable(cron, timezone="UTC", run_immediately=timedelta(0))


def job_timeout(key: str) -> timedelta:
    """A job task's ``execution_timeout`` from ``[airflow] <key>`` (minutes): a hung Spark
    job fails (and is retried) instead of blocking every later run (``max_active_runs=1``).
    Read when the DAG file is parsed, so a bad value is an import error naming the key."""
    return timedelta(minutes=getattr(load_config().airflow, key))


def log_failure(context: Any) -> None:
    """``on_failure_callback`` of every task: one line with the DAG, task, run, try and
    error, the line to grep for (or alert on) in the task log."""
    ti = context["ti"]
    error = context.get("exception")
    text = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
    what = f"{type(error).__name__}: {text}" if error is not None else "no exception recorded"
    log.error("keyshift task failed: dag=%s task=%s run=%s try=%s error=%s",
              ti.dag_id, ti.task_id, ti.run_id, ti.try_number, what)


def default_args() -> dict[str, Any]:
    """Owner, retries with exponential back-off (2 min × 2ⁿ, at most 30 min) and the failure
    line. No ``execution_timeout``: each task sets its own (a job's from ``[airflow]``, a
    report's :data:`REPORT_TIMEOUT`); one here is what the DAG's details page shows, and a
    5 minutes there beside a 3 h retrain misleads."""
    return {
        "owner": "keyshift",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=30),
        "on_failure_callback": log_failure,
    }
