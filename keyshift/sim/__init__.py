"""The cluster simulator (pure numpy, deterministic per seed): engines, queues, key-group
state and migrations, decided by the streaming job's own control loop
(:mod:`keyshift.sim.driver`) with the same policy objects.

Entry points: :class:`Simulator` (``run`` / ``step_window`` / ``set_engines``),
:class:`SimConfig`, and the workloads in :mod:`keyshift.sim.workload`. See docs/simulator.md.
"""

from keyshift.sim.result import SimResult, WindowOutcome, latency_percentile
from keyshift.sim.simulator import ExternalLoad, SimConfig, SimError, Simulator
from keyshift.sim.workload import (
    GaussianKeys,
    KeyDistribution,
    Schedule,
    SyntheticWorkload,
    TraceWorkload,
    Workload,
    WorkloadError,
    ZipfKeys,
    zipf_cycle,
)

__all__ = [
    "ExternalLoad",
    "GaussianKeys",
    "KeyDistribution",
    "Schedule",
    "SimConfig",
    "SimError",
    "SimResult",
    "Simulator",
    "SyntheticWorkload",
    "TraceWorkload",
    "WindowOutcome",
    "Workload",
    "WorkloadError",
    "ZipfKeys",
    "latency_percentile",
    "zipf_cycle",
]
