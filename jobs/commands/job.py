"""``keyshift job retrain|baselines|maintenance|history``: the batch jobs by hand, same code
as the DAGs.

``history`` writes a synthetic ``metrics`` + ``key_loads`` history (daily cycle, Zipf keys)
into the configured warehouse, so the nightly DAGs have something to chew on before a
streaming job has run for days.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from keyshift.cli import add_log_options
from keyshift.config import load_config
from keyshift.lakehouse.logs import one_line_failure

SUMMARY = "run a nightly batch job by hand (retrain, plans, upkeep)"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from keyshift.jobs import baseline_partitions, retrain_models, table_maintenance

    p = sub.add_parser("job", help=SUMMARY)
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True)
    r = jobs.add_parser("retrain", help="refit both GPs on the metrics history → MLflow")
    retrain_models.add_arguments(r)
    r.set_defaults(func=run, job_run=retrain_models.run_from_args,
                   job_print=retrain_models.print_summary,
                   job_errors=retrain_models.runtime_errors)
    b = jobs.add_parser("baselines", help="LPTF and CLB plans from key_loads → Delta plans")
    baseline_partitions.add_arguments(b)
    b.set_defaults(func=run, job_run=baseline_partitions.run_from_args,
                   job_print=baseline_partitions.print_summary,
                   job_errors=lambda: baseline_partitions.RUNTIME_ERRORS)
    m = jobs.add_parser("maintenance",
                        help="compact (OPTIMIZE) and vacuum keyshift's Delta tables")
    table_maintenance.add_arguments(m)
    m.set_defaults(func=run, job_run=table_maintenance.run_from_args,
                   job_print=table_maintenance.print_summary,
                   job_errors=lambda: table_maintenance.RUNTIME_ERRORS)
    h = jobs.add_parser("history", help="a topic's own past as input rates (--topic), or a "
                                         "synthetic metrics + key_loads history")
    h.add_argument("--topic", default=None,
                   help="count this topic's records per window since --days ago into "
                        "input_rates: the input-rate forecaster's history before any run")
    h.add_argument("--workload", default="",
                   help="with --topic: whose history it is (default: mlflow.workload, else "
                        "controller.app on the topic, <operator>.<topic>)")
    h.add_argument("--to", dest="last", metavar="YYYY-MM-DD",
                   help="synthetic: last day of the history (default: yesterday, UTC)")
    h.add_argument("--days", type=float, default=None,
                   help="days of history (default 3; with --topic 7)")
    h.add_argument("--window-s", type=int, default=None,
                   help="window length, seconds (default 600; with --topic controller.window_s)")
    h.add_argument("--engines", type=int, default=None, help="default: engines.initial")
    h.add_argument("--seed", type=int, default=7,
                   help="random seed of the synthetic loads and keys (default 7)")
    h.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    h.set_defaults(func=run, job_run=_history, job_print=_print_history,
                   job_errors=_history_errors)
    for job in (r, b, m, h):
        add_log_options(job)
    return p


def _history(args: argparse.Namespace) -> dict:
    from keyshift.jobs.history import (
        SyntheticHistory,
        parse_day,
        write_synthetic_history,
    )
    from keyshift.lakehouse.session import get_spark

    cfg = load_config(args.config)
    if args.topic is not None:
        from keyshift.jobs import topic_rates

        if args.last:
            raise ValueError("to: the topic's history ends now (--to is the synthetic one's)")
        workload = args.workload or cfg.mlflow.workload
        if workload:
            from keyshift.workload_names import check_workload

            check_workload(workload)
        return topic_rates.run(cfg, args.topic, days=args.days or topic_rates.DEFAULT_DAYS,
                               workload=workload, window_s=args.window_s)
    last = (parse_day(args.last, "to") if args.last
            else datetime.now(UTC).date() - timedelta(days=1))
    days = 3 if args.days is None else args.days
    if days != int(days) or days < 1:
        raise ValueError(f"days: whole days >= 1 for a synthetic history, got {days!r}")
    spec = SyntheticHistory(days=int(days), window_s=args.window_s or 600, seed=args.seed,
                            engines=args.engines or cfg.engines.initial)
    return write_synthetic_history(get_spark(cfg, app_name="keyshift-history"), cfg, last, spec)


def _print_history(result: dict) -> None:
    if result.get("job") == "topic_rates":
        from keyshift.jobs.topic_rates import print_summary

        print_summary(result)
        return
    print(f"wrote {result['metrics_rows']} metrics and {result['key_loads_rows']} key_loads rows "
          f"for {result['days']} into {result['warehouse']}")


def _history_errors() -> tuple[type[BaseException], ...]:
    from keyshift.jobs.history import HistoryError

    return (HistoryError,)


@one_line_failure("job")
def run(args: argparse.Namespace) -> int:
    from keyshift.jobs.report import run_job
    from keyshift.lakehouse.logs import configure_spark_logging, log_file

    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    configure_spark_logging(log_file(cfg, f"job-{args.job}"), args.log_level)
    return run_job(f"keyshift job {args.job}", args, args.job_run, args.job_print,
                   args.job_errors())
