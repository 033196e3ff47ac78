"""The cluster simulator (pure numpy, deterministic per seed): engines, queues, key-group
state and migrations, driven by the same policy objects the streaming job uses.

Entry points: :class:`Simulator` (``run`` / ``step_window`` / ``set_engines``),
:class:`SimConfig`, and the workloads in :mod:`keyshift.sim.workload`. See docs/simulator.md.
"""

from keyshift.sim.result import SimResult, WindowStats, latency_percentile
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
    "WindowStats",
    "Workload",
    "WorkloadError",
    "ZipfKeys",
    "latency_percentile",
    "zipf_cycle",
]
