"""Input workloads of the live system: skew schedules, skewed key sampling, realistic event
generators for the four applications, bad-record injection, and readers of the real data sets
for replays. Pure core (numpy only; ``wordfreq`` is imported lazily by the text generators),
so producers, tests and benchmarks all draw the same streams for the same seed.
"""

from keyshift.workloads.bad import BAD_KINDS, bad_record
from keyshift.workloads.events import GENERATORS, EventGenerator, make_generator
from keyshift.workloads.replay import REPLAYS, replay_events
from keyshift.workloads.skew import KeySampler, SkewSchedule, WorkloadInputError

__all__ = [
    "BAD_KINDS", "GENERATORS", "REPLAYS", "EventGenerator", "KeySampler", "SkewSchedule",
    "WorkloadInputError", "bad_record", "make_generator", "replay_events",
]
