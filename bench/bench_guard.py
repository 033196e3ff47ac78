"""Scalings that did not help: engines spent on one hot key with and without the guard.

    .venv/bin/python bench/bench_guard.py               # 30 windows, ~2 s
    .venv/bin/python bench/bench_guard.py --windows 100

The cluster simulator runs two workloads through the one control loop with the 80/40 rule
(keyshift.elastic.baselines.ThresholdScaler): one hot key (Zipf 2.0 over 256 keys at 1,000
tuples/s: the hottest key about 60 % of the input, 1.5 times what one engine serves), where
no engine count helps, and uniform keys at 3,000 tuples/s, where a ramp-up does. Each runs
without the guardrails (keyshift.control.guard) as its baseline and with them (the
defaults of [planner]: effectiveness 0.1 over 2 windows, 6 windows of cool-off). The RATIO
column is the guarded run's engine-windows over the unguarded run's, measured in the same
process; the table also gives the changes of N, the groups moved, the misses and the
verdicts. Nothing here is timed.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from keyshift.control import (
    ControlLoop,
    GuardSettings,
    LoopSettings,
    MemoryControlStore,
    ScalerStep,
    ScalingGuard,
    WindowStats,
)
from keyshift.elastic.baselines import ThresholdScaler
from keyshift.sim import Schedule, SimConfig, Simulator, SyntheticWorkload, ZipfKeys
from keyshift.sim.driver import SimulatorDriver

GROUPS, WINDOW_S, LAT_S = 256, 10.0, 1 / 400  # one engine serves 400 tuples/s
WORKLOADS = (("one hot key (Zipf 2.0)", 2.0, 1000.0), ("uniform keys", 0.0, 3000.0))


def run(zipf: float, rate: float, guarded: bool, windows: int, seed: int = 3) -> dict:
    workload = SyntheticWorkload(ZipfKeys(keys=GROUPS, groups=GROUPS, key_to_group=None,
                                          seed=seed),
                                 param=Schedule.constant(zipf), rate=Schedule.constant(rate))
    sim = Simulator(workload, None, SimConfig(engines=4, tick_s=1.0, window_s=WINDOW_S,
                                              service_rate=1 / LAT_S, overload="miss",
                                              pause_fixed_s=0.5, pause_s_per_state=0.0),
                    seed=seed)
    driver = SimulatorDriver(sim, LAT_S, WINDOW_S)
    guard = ScalingGuard(GuardSettings(effectiveness=0.1, check_windows=2,
                                       cooloff_windows=6)) if guarded else None
    driver.loop = ControlLoop(
        MemoryControlStore(), LoopSettings(window_s=WINDOW_S), None, "kg",
        ScalerStep(ThresholdScaler(max_engines=16), None, WINDOW_S, keep_on_error=False),
        realizer=driver, guard=guard)
    driver.loop.start(sim.plan)
    window = WindowStats.empty(-1, GROUPS, -1)
    out = {"engine_windows": 0, "changes": 0, "moved": 0, "missed": 0.0, "generated": 0.0,
           "ineffective": 0, "effective": 0, "final": 0}
    for _ in range(windows):
        d = driver.step(window)
        if d.realized and d.after.parallelism != d.before.parallelism:
            out["changes"] += 1
            out["moved"] += len(d.moves)
        if d.verdict is not None:
            out["ineffective" if d.verdict.ineffective else "effective"] += 1
        stats, window = driver.run_window()
        out["engine_windows"] += stats.engines
        out["missed"] += stats.missed
        out["generated"] += stats.generated
        out["final"] = stats.engines
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=30, help="statistic windows per run")
    args = ap.parse_args(argv)
    if args.windows < 1:
        ap.error("--windows: must be >= 1")
    t = Table(title=f"guardrails in the simulator, {args.windows} windows of {WINDOW_S:g} s, "
                    "4 engines at start, at most 16")
    for col in ("workload", "guard", "engine-windows", "RATIO", "final N", "changes",
                "groups moved", "missed %", "verdicts ineff. / eff."):
        t.add_column(col, justify="left" if col in ("workload", "guard") else "right")
    for label, zipf, rate in WORKLOADS:
        base = run(zipf, rate, False, args.windows)
        for guarded, r in ((False, base), (True, run(zipf, rate, True, args.windows))):
            t.add_row(f"{label}, {rate:,.0f} tuples/s", "on" if guarded else "off",
                      str(r["engine_windows"]),
                      f"{r['engine_windows'] / base['engine_windows']:.2f}", str(r["final"]),
                      str(r["changes"]), str(r["moved"]),
                      f"{100 * r['missed'] / max(r['generated'], 1):.1f}",
                      f"{r['ineffective']} / {r['effective']}")
    Console().print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
