"""The one timer of the benchmarks: the median of repeated wall-clock runs, because this
shared 2-core machine is noisy and a single run or a mean would follow the noise."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, in milliseconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return float(statistics.median(times))
