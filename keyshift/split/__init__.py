"""The weighted split for stateless, ordered data-parallel regions (blocking-rate paper).

A splitter that must keep tuple order downstream cannot learn its workers' capacities from
throughput (the ordered merge equalises it, §4.3); it learns them from how long each send
blocks. :mod:`blocking` turns blocking-rate samples into monotone functions of the weight,
:mod:`fox` solves the minimax allocation over them, :mod:`cluster` pools similar connections,
:mod:`splitter` is the per-interval controller and :mod:`region` a model of the region itself.
"""

from keyshift.split.blocking import BlockingRateModel, fit_function
from keyshift.split.cluster import cluster_connections, function_distance
from keyshift.split.errors import SplitInputError
from keyshift.split.fox import check_problem, fox_minimax, objective
from keyshift.split.region import Interval, OrderedRegion
from keyshift.split.splitter import WeightedSplit, even_weights

__all__ = [
    "BlockingRateModel",
    "Interval",
    "OrderedRegion",
    "SplitInputError",
    "WeightedSplit",
    "check_problem",
    "cluster_connections",
    "even_weights",
    "fit_function",
    "fox_minimax",
    "function_distance",
    "objective",
]
