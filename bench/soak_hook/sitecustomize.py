"""Python-heap tracing inside the soak's ``keyshift run`` (``bench_soak.py --trace-python``).

Why a ``sitecustomize``: the soak starts the job as a user does (the ``keyshift`` script in a
subprocess), so the only way in without a debug switch in the product is the interpreter's
own start-up hook. The bench puts this folder first on the job's ``PYTHONPATH`` and sets
``SOAK_TRACE_PYTHON`` to ``<dir>,<baseline_s>,<every_s>``; any other Python that finds this
file (the JVM's ``pyspark.daemon`` workers inherit ``PYTHONPATH``) does nothing, because the
variable is taken out of the environment here, before the job starts its JVM.

In the job: ``tracemalloc`` from start-up, a baseline snapshot ``baseline_s`` after start
(past the JVM's and the stores' warm-up), then every ``every_s`` a JSON report
``<dir>/trace-<n>.json``: the process RSS, the bytes tracemalloc traces, the allocation sites
that grew most since the baseline (by traceback) and the object types whose count grew
most (``gc.get_objects``, what objgraph's growth counts). Memory outside tracemalloc's view
(Arrow buffers, py4j sockets, C extensions) shows as RSS growth without traced growth.
"""

from __future__ import annotations

import os
import sys

_SPEC = os.environ.pop("SOAK_TRACE_PYTHON", None)
FRAMES = 8
TOP = 25


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _type_counts() -> dict[str, int]:
    import gc
    from collections import Counter

    return dict(Counter(type(o).__qualname__ for o in gc.get_objects()))


def _own() -> list:
    """Filters that leave out what the tracing itself allocates: tracemalloc's snapshots and
    the source lines ``linecache`` keeps once a report has formatted a traceback."""
    import linecache
    import tracemalloc

    return [tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, linecache.__file__)]


def _report(baseline, base_types: dict[str, int], base_rss: int, elapsed_s: float) -> dict:
    import tracemalloc

    types = _type_counts()  # first: the snapshot's own objects are not the job's
    snap = tracemalloc.take_snapshot().filter_traces(_own())
    grew = snap.compare_to(baseline, "traceback")[:TOP]
    type_growth = sorted(((n - base_types.get(t, 0), t, n) for t, n in types.items()),
                         reverse=True)[:TOP]
    arrow = None
    if "pyarrow" in sys.modules:
        arrow = sys.modules["pyarrow"].total_allocated_bytes()
    return {
        "elapsed_s": round(elapsed_s, 1),
        "rss_bytes": _rss_bytes(),
        "rss_growth_bytes": _rss_bytes() - base_rss,
        "traced_bytes": sum(s.size for s in snap.statistics("filename")),
        "traced_growth_bytes": sum(s.size_diff for s in snap.compare_to(baseline, "filename")),
        "pyarrow_allocated_bytes": arrow,
        "objects": sum(types.values()),
        "objects_growth": sum(types.values()) - sum(base_types.values()),
        "top_sites": [{"size_diff": s.size_diff, "count_diff": s.count_diff, "size": s.size,
                       "traceback": s.traceback.format(most_recent_first=True)[:FRAMES * 2]}
                      for s in grew],
        "top_types": [{"type": t, "count_diff": d, "count": n} for d, t, n in type_growth],
    }


def _trace(folder: str, baseline_s: float, every_s: float) -> None:
    import json
    import threading
    import time
    import tracemalloc

    tracemalloc.start(FRAMES)
    started = time.monotonic()

    def loop() -> None:
        time.sleep(baseline_s)
        baseline = tracemalloc.take_snapshot().filter_traces(_own())
        base_types, base_rss = _type_counts(), _rss_bytes()
        n = 0
        while True:
            time.sleep(every_s)
            n += 1
            report = _report(baseline, base_types, base_rss, time.monotonic() - started)
            path = os.path.join(folder, f"trace-{n:03d}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(report, f, indent=1)
            os.replace(path + ".tmp", path)  # the bench never reads a half-written report

    threading.Thread(target=loop, name="soak-trace", daemon=True).start()


if _SPEC and len(sys.argv) > 1 and sys.argv[1] == "run":
    _dir, _baseline, _every = _SPEC.split(",")
    os.makedirs(_dir, exist_ok=True)
    _trace(_dir, float(_baseline), float(_every))
