"""``keyshift simulate``: run the cluster simulator on a synthetic workload or a trace, or one
of the papers' experiments with ``--scenario NAME``.

Parsing is two-step because each scenario adds its own options: the generic options are
parsed first (unknown ones tolerated), and when ``--scenario`` names a module from
:data:`keyshift.experiments.SCENARIOS`, a full parser made of the generic options plus the
module's ``add_arguments`` parses the command line again, strictly. Generic options default
to ``None`` so that each scenario can apply its own defaults (the paper's setup).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from typing import Any

from keyshift.cli import UsageError, _Parser, add_config_option
from keyshift.experiments import SCENARIOS
from keyshift.run_ids import run_id_arg

REQUIRED_KEYS = (
    "processed", "missed", "rstd_mean", "rstd_p95", "var_mean", "rebalances", "moved_groups",
    "moved_state", "migration_pause_s", "latency_p50_s", "latency_p95_s", "engine_seconds",
    "wall_s",
)

SUMMARY = "simulate engines under a policy, or a paper's experiment"


def _policy_names() -> list[str]:
    """Every policy of the registry: the simulator runs each kind."""
    from keyshift.policies import policy_names

    return policy_names()


def add_generic_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generic options (every scenario)")
    g.add_argument("--scenario", help=f"a paper's experiment: {', '.join(SCENARIOS)}")
    g.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    add_config_option(g)  # engines and groups of a plain or calibrated run
    g.add_argument("--report-dir", help="folder for tables and plots "
                   "(default <home>/reports/<scenario>/)")
    g.add_argument("--engines", help="number of engines N (with --calibrate: a comma list of "
                   "engine counts to project to, default 8,32,128)")
    g.add_argument("--policy", help=f"balancing policy: one of {', '.join(_policy_names())} "
                   "(shipped, or an entry point of group keyshift.policies)")
    g.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy constructor parameter (repeatable)")
    g.add_argument("--trace", help="CSV with header and columns ts (s) and key")
    g.add_argument("--speedup", type=float, help="trace time compression factor")
    g.add_argument("--rate", type=float, help="tuples/s (source rate; traces: average)")
    g.add_argument("--duration", type=float, help="simulated seconds")
    g.add_argument("--window", type=float, help="statistic window Δ in seconds")
    g.add_argument("--quick", action="store_true", help="a shorter, smaller run")
    c = p.add_argument_group("calibrated on a real run (docs/simulator.md)")
    c.add_argument("--calibrate", metavar="RUN_ID", type=run_id_arg,
                   help="fit the cost model to run RUN_ID of 'keyshift run' (its folder "
                   "<home>/runs/RUN_ID), replay its input, project it to --engines")
    c.add_argument("--cores", help="cores of the projected cluster (default: one per engine)")
    c.add_argument("--against", metavar="RUN_ID", action="append", default=[],
                   help="another run of the same operator (e.g. DLB-H on the input a KG run "
                        "had) for the fitted model to predict; repeatable")
    s = p.add_argument_group("plain simulation (no --scenario)")
    s.add_argument("--tick", type=float, help="tick in seconds (default window/10)")
    s.add_argument("--groups", type=int, help="key groups p (default groups.count)")
    s.add_argument("--keys", type=int, help="distinct synthetic keys (default p)")
    s.add_argument("--zipf", type=float, help="Zipf exponent of the synthetic keys (default 1.0)")
    s.add_argument("--service-rate", type=float,
                   help="tuples/s per engine (default 1.2 × rate / engines)")
    s.add_argument("--service-rates", help="comma list, one tuples/s per engine "
                   "(heterogeneous hosts; overrides --service-rate)")
    s.add_argument("--external", action="append", default=[], metavar="ENGINE:START:STOP:SHARE",
                   help="another tenant takes SHARE (0..1) of an engine's capacity from START "
                   "to STOP seconds (repeatable)")
    s.add_argument("--queue-limit", type=float, help="tuples per engine queue (default ∞)")
    s.add_argument("--overload", choices=["miss", "backpressure"], help="default miss")
    s.add_argument("--state", choices=["time", "length"], help="state model (default time)")
    s.add_argument("--rebalance-every", type=int, help="windows between decisions (default 1)")
    s.add_argument("--pause-per-state", type=float,
                   help="migration pause seconds per state tuple moved (default 1e-5)")


class _SimulateParser(_Parser):
    """Step one tolerates a scenario's options; step two parses them strictly."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        args = list(args) if args is not None else []
        scenario = _scenario_name(args)
        if scenario is None:
            ns, extras = super().parse_known_args(args, namespace)
            scenario = getattr(ns, "scenario", None)
            if not scenario:
                return ns, extras
        if scenario not in SCENARIOS:
            self.error(f"argument --scenario: unknown scenario {scenario!r}; "
                       f"choose one of {', '.join(SCENARIOS)}")
        try:
            module = importlib.import_module(SCENARIOS[scenario])
        except ImportError as exc:
            self.error(f"scenario {scenario} is not available ({exc})")
        full = _Parser(prog=self.prog, description=module.DESCRIPTION)
        add_generic_arguments(full)
        add = getattr(module, "add_arguments", None)
        if add is not None:
            add(full.add_argument_group(f"{scenario} options"))
        full.set_defaults(func=run, _scenario_module=module)
        return full.parse_args(args), []


def _scenario_name(args: list[str]) -> str | None:
    """The value of --scenario, found before any parsing so that -h shows its options."""
    for i, a in enumerate(args):
        if a == "--scenario" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--scenario="):
            return a.split("=", 1)[1]
    return None


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "simulate",
        help=SUMMARY,
        description="Simulate N engines fed a key-grouped stream (synthetic Zipf keys, or a "
        "trace of yours with --trace) under a balancing policy, and print imbalance, "
        "throughput, migrations and latency. With --scenario NAME, run one of the papers' "
        "experiments and print its tables beside the published numbers; 'keyshift simulate "
        "--scenario NAME -h' lists that experiment's own options.",
    )
    p.__class__ = _SimulateParser
    add_generic_arguments(p)
    p.set_defaults(func=run, _scenario_module=None)
    return p


def _check_positive(name: str, value: float | None, integer: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--{name}: must be > 0, got {value}")
    if integer and int(value) != value:
        raise UsageError(f"--{name}: must be an integer, got {value}")


def _positive_ints(option: str, text: str) -> list[int]:
    values = []
    for part in str(text).split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise UsageError(f"--{option}: expected a positive integer or a comma list of them, "
                             f"got {text!r}") from None
        if value < 1:
            raise UsageError(f"--{option}: must be >= 1, got {value}")
        values.append(value)
    return values


def check_engines(args: argparse.Namespace) -> None:
    """--engines is one integer, or (with --calibrate) a comma list; --cores goes with
    --calibrate. Normalized in place: an int (or None), or ``args.engine_list``."""
    calibrating = getattr(args, "calibrate", None) is not None
    raw = getattr(args, "engines", None)
    cores = getattr(args, "cores", None)
    if getattr(args, "against", None) and not calibrating:
        raise UsageError("--against: only applies to --calibrate")
    if cores is not None:
        if not calibrating:
            raise UsageError("--cores: only applies to --calibrate")
        got = _positive_ints("cores", cores)
        if len(got) != 1:
            raise UsageError(f"--cores: expected one positive integer, got {cores!r}")
        args.cores = got[0]
    if calibrating:
        if getattr(args, "scenario", None):
            raise UsageError("--calibrate: cannot be combined with --scenario")
        args.engine_list = _positive_ints("engines", raw) if raw is not None else None
        args.engines = None
        return
    if raw is None or isinstance(raw, int):
        return
    got = _positive_ints("engines", raw)
    if len(got) != 1:
        raise UsageError(f"--engines: a comma list only applies to --calibrate, got {raw!r}")
    args.engines = got[0]


def check_generic(args: argparse.Namespace) -> None:
    """Validate the generic options every scenario shares (one line per bad value)."""
    check_engines(args)
    for name in ("engines", "speedup", "rate", "duration", "window", "tick", "groups", "keys",
                 "service_rate", "queue_limit", "rebalance_every"):
        _check_positive(name.replace("_", "-"), getattr(args, name, None),
                        integer=name in ("engines", "groups", "keys", "rebalance_every"))
    if getattr(args, "zipf", None) is not None and not (args.zipf >= 0):
        raise UsageError(f"--zipf: must be >= 0, got {args.zipf}")
    if getattr(args, "pause_per_state", None) is not None and not (args.pause_per_state >= 0):
        raise UsageError(f"--pause-per-state: must be >= 0, got {args.pause_per_state}")


def service_rates(args: argparse.Namespace, default: float) -> float | list[float]:
    if not args.service_rates:
        return args.service_rate or default
    try:
        return [float(x) for x in args.service_rates.split(",")]
    except ValueError:
        raise UsageError(f"--service-rates: expected numbers, got {args.service_rates!r}") from None


def external_loads(specs: list[str]) -> tuple:
    from keyshift.sim import ExternalLoad

    out = []
    for spec in specs:
        parts = spec.split(":")
        try:
            engine, start, stop, share = int(parts[0]), *map(float, parts[1:])
        except (ValueError, TypeError, IndexError):
            raise UsageError(
                f"--external: expected ENGINE:START:STOP:SHARE, got {spec!r}"
            ) from None
        if len(parts) != 4:
            raise UsageError(f"--external: expected ENGINE:START:STOP:SHARE, got {spec!r}")
        try:
            out.append(ExternalLoad(engine, start, stop, share))
        except ValueError as exc:
            raise UsageError(f"--external: {exc}") from None
    return tuple(out)


def policy_params(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings → constructor kwargs; values are parsed as JSON when they can be."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--policy-param: expected KEY=VALUE, got {pair!r}")
        try:
            out[key.replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.replace("-", "_")] = raw
    return out


def build_policy(name: str, pairs: list[str], cfg: Any = None):
    """The policy by name; with ``cfg``, its parameters from ``[controller]`` as the job's
    loop takes them (:func:`keyshift.control.policy_params`), under ``--policy-param``."""
    from keyshift.control import policy_from_config
    from keyshift.policies import PolicyInputError

    try:
        return policy_from_config(cfg, name, policy_params(pairs))
    except PolicyInputError as exc:  # "policy: unknown policy ..." or a parameter's field
        raise UsageError(f"--{exc}" if exc.field == "policy" else f"--policy: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"--policy-param: {exc}") from None


def emit(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(summary, default=_default))


def _default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def run(args: argparse.Namespace) -> int:
    check_generic(args)
    if getattr(args, "calibrate", None) is not None:
        from keyshift.commands.simulate_calibrated import calibrated

        return calibrated(args)
    module = getattr(args, "_scenario_module", None)
    if module is not None:
        try:
            summary = module.run(args)
        except ValueError as exc:  # SimError, WorkloadError, PolicyInputError: name a field
            raise UsageError(str(exc)) from None
        emit(args, summary)
        return 0
    return _plain(args)


def _plain(args: argparse.Namespace) -> int:
    from keyshift.config import load_config
    from keyshift.control import LoopSettings
    from keyshift.experiments.report import (
        markdown_table,
        report_dir,
        show_progress,
        time_series_plots,
    )
    from keyshift.sim import (
        Schedule,
        SimConfig,
        Simulator,
        SyntheticWorkload,
        TraceWorkload,
        ZipfKeys,
    )

    cfg = load_config(getattr(args, "config", None))  # ConfigError: the CLI's one-line message
    engines = args.engines or cfg.engines.initial
    groups = args.groups or cfg.groups.count
    window = args.window or 1.0
    tick = args.tick or window / 10.0
    # the job's loop on the same config: the policy's [controller] parameters, min_gain,
    # mode and θ (the papers' scenarios keep their own setups)
    policy = build_policy(args.policy or "kg", args.policy_param, cfg)
    control = LoopSettings(window_s=window, min_gain=float(cfg.controller.min_gain),
                           mode=cfg.controller.mode, theta=float(cfg.controller.theta))
    try:
        if args.trace:
            workload = TraceWorkload(args.trace, groups, args.speedup or 1.0, args.rate)
            rate = workload.rows * workload.scale / workload.duration_s
            duration = args.duration or workload.duration_s
        else:
            if args.speedup is not None:
                raise UsageError("--speedup: only applies to --trace")
            rate = args.rate or 1000.0
            keys = ZipfKeys(args.keys or groups, groups, None, seed=args.seed)
            workload = SyntheticWorkload(
                keys, Schedule.constant(1.0 if args.zipf is None else args.zipf),
                Schedule.constant(rate),
            )
            duration = args.duration or 60.0
        sim_cfg = SimConfig(
            engines=engines,
            tick_s=tick,
            window_s=window,
            service_rate=service_rates(args, 1.2 * rate / engines),
            external=external_loads(args.external),
            queue_limit=args.queue_limit or math.inf,
            overload=args.overload or "miss",
            state_model=args.state or "time",
            rebalance_every=args.rebalance_every or 1,
            pause_s_per_state=1e-5 if args.pause_per_state is None else args.pause_per_state,
        )
        sim = Simulator(workload, policy, sim_cfg, seed=args.seed, control=control)
        result = sim.run(duration, progress=show_progress(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    declined = sum(1 for d in result.decisions if d["action"] == "declined")
    recommended = sum(1 for d in result.decisions
                      if not d["applied"] and d["action"] not in ("none", "declined"))
    summary = {"policy": args.policy or "kg", "engines": engines, "groups": groups,
               "mode": control.mode, "min_gain": control.min_gain,
               "declined": declined, "recommended": recommended, **result.summary()}
    if args.report_dir:
        out = report_dir(args.report_dir, "simulate")
        time_series_plots(out, "simulate", {summary["policy"]: result}, window)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_default))
        summary["report_dir"] = str(out)
    if args.json:
        emit(args, summary)
    else:
        keys = ["processed", "missed", "throughput_mean", "rstd_mean", "rstd_p95", "imbalance",
                "rebalances", "declined", "recommended", "moved_groups", "migration_pause_s",
                "latency_p50_s", "latency_p95_s", "engine_seconds", "wall_s"]
        print(markdown_table(["metric", "value"], [[k, summary[k]] for k in keys]))
        if "report_dir" in summary:
            print(f"\nplots: {summary['report_dir']}")
    return 0
