"""Soak: a long `keyshift run` at a steady rate with migrations; memory, stores and latency must stay flat.

Issue 16 item 5. A private broker (free ports, temporary home) gets one topic; ``keyshift
produce`` sends wordcount events to it at ``--rate`` events/s for ``--duration`` seconds,
with a Zipf exponent that alternates between 0.2 and 1.5 every ``--shift-s`` seconds, each
1.5 phase on another hot set (the skew's ``+R`` rotation), so DLB-H keeps migrating
groups. ``keyshift run --policy dlb-h`` reads it with a ``--trigger-s`` trigger, a
subprocess as a user starts it. Every ``--sample-s`` seconds the bench records, from outside the job:

* memory of the job's process tree in three parts, each with its own way to grow: the
  Python driver (the ``keyshift run`` process), its JVM (in ``local[*]`` the executors live
  there too; its heap used and committed and its metaspace read with the JDK's ``jstat``:
  a JVM grows its committed heap lazily towards its ``-Xmx``, the bench prints the cap it
  runs with) and the Python workers (``pyspark.daemon`` / worker processes); ``driver`` is
  Python driver + JVM, as earlier runs reported it. ``--trace-python`` adds tracemalloc
  and object counts inside the Python driver (``bench/soak_hook``): what grew since the
  warm-up, by allocation site;
* engine store bytes: the run's durable changelog (``<warehouse>/_engine_state/<run>``)
  and the executors' caches (``keyshift-engines/<run>`` under Spark's local dirs);
* files staged and not yet committed (``<warehouse>/_runs/<run>/staged``);
* Delta files per table (data ``*.parquet`` and ``_delta_log/*.json``);
* batches and events read so far, the p95 of the batches since the previous sample (the
  job's ``batches.jsonl``) and migrations so far (batches that moved groups);
* Kafka: what the producer has put in the topic (its end offsets), how many of those the
  job has not read yet (``behind``), the job's own ``keyshift_kafka_lag_records`` gauge
  scraped from its live metrics endpoint (the same gap as Spark saw it planning the last
  batch), and ``producer_short``, the nominal ``--rate`` × time minus what was produced:
  a job that keeps up has ``behind`` flat; a producer below its rate shows here instead.

One row per sample as it is taken, a table at the end, and a FLATNESS line per series: the
Theil–Sen slope (robust to one odd sample) over the samples after ``--warmup-s``, per minute
and as % of their mean, judged FLAT when |slope| × the minutes those samples span <
``--tolerance`` (10 %) of their mean. Delta file counts (until table maintenance compacts
the tables) and the counters (batches, events read and produced, the producer's deficit,
migrations) grow by design: their growth per minute is printed, not judged. At the end
the job gets SIGTERM (its clean stop between batches), then the broker stops; the raw
numbers stay in the bench's home (``soak.json``), which is printed.

    .venv/bin/python bench/bench_soak.py                                   # 30 minutes
    .venv/bin/python bench/bench_soak.py --duration 180 --sample-s 15 --warmup-s 60
    .venv/bin/python bench/bench_soak.py --duration 900 --trace-python     # what Python keeps
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_stream's helpers, also when imported by a test

from bench_stream import config_env, keyshift_exe, parse_run_json, percentile

PARTITIONS = 4
LOW, HIGH = 0.2, 1.5  # the alternating Zipf exponents
ROTATE = 97  # keys the hot set moves on between two high phases
# series that only grow while the job runs (Delta files until maintenance compacts them)
# the producer's deficit against its nominal rate adds up when it sends below the rate
GROWING = ("batches", "events", "produced", "producer_short", "migrations")


# --- pure helpers (tests/benches/test_bench_soak.py) --------------------------------------------
def shifting_skew(duration_s: float, shift_s: float, low: float = LOW,
                  high: float = HIGH, rotate: int = ROTATE) -> str:
    """A ``--skew`` schedule that alternates ``low`` and ``high`` every ``shift_s`` seconds
    over ``duration_s``, each ``high`` phase on another hot set (ranks rotated ``rotate``
    keys further each time): each switch changes which groups are loaded, so DLB-H has to
    migrate again and again in one run (with one hot set, one rebalance serves every phase)."""
    if shift_s <= 0 or duration_s <= 0:
        raise ValueError(f"shift_s and duration_s must be > 0, got {shift_s}, {duration_s}")
    steps, t, i = [], 0.0, 0
    while t < duration_s:
        if i % 2 == 0:
            steps.append(f"{low:g}@{t:g}")
        else:
            steps.append(f"{high:g}@{t:g}" + (f"+{rotate * (i // 2)}" if i // 2 else ""))
        t += shift_s
        i += 1
    return "zipf:" + ",".join(steps)


@dataclass(frozen=True)
class Flatness:
    """One series' trend after the warm-up: ``verdict`` is FLAT, GROWS, SHRINKS,
    ``grows by design`` or ``n/a (...)``."""

    series: str
    samples: int
    span_min: float
    mean: float
    slope_per_min: float
    verdict: str

    @property
    def slope_pct_of_mean(self) -> float:
        return 100.0 * self.slope_per_min / self.mean if self.mean else math.nan


def flatness(series: str, t_min: Sequence[float], ys: Sequence[float], warmup_min: float,
             tolerance: float = 0.10, by_design: bool = False) -> Flatness:
    """The rule of the issue's target "flat after the first 5 minutes": fit a line to the
    samples at or after ``warmup_min``; the series is FLAT when the fitted change over the
    span those samples cover, |slope| × span, is under ``tolerance`` × their mean. The
    Theil–Sen slope (median of the pairwise slopes), not least squares or first-versus-last,
    so that one noisy sample (a GC, a minute whose batches migrated) does not decide while a
    steady leak does. ``by_design`` series (Delta files, counters) get their slope and no
    verdict."""
    import numpy as np
    from scipy.stats import theilslopes

    # nan: not measurable at that sample (no JVM yet, a gauge not yet set)
    pts = [(t, y) for t, y in zip(t_min, ys, strict=True)
           if t >= warmup_min and not math.isnan(y)]
    if len(pts) < 3:
        return Flatness(series, len(pts), 0.0, math.nan, math.nan,
                        f"n/a ({len(pts)} samples after the warm-up, need 3)")
    t = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)
    slope = float(theilslopes(y, t).slope)
    span = float(t[-1] - t[0])
    mean = float(y.mean())
    if by_design:
        verdict = "grows by design"
    elif abs(slope) * span <= tolerance * abs(mean):
        verdict = "FLAT"
    else:
        verdict = "GROWS" if slope > 0 else "SHRINKS"
    return Flatness(series, len(pts), span, mean, slope, verdict)


def new_batches(text: str, seen: int) -> tuple[list[dict[str, Any]], int]:
    """The batch records of ``batches.jsonl`` (its ``text``) after the first ``seen``
    complete lines, and the new count; a last line without its newline (the job is writing
    it) waits for the next sample."""
    complete = text.split("\n")[:-1]
    records = [json.loads(ln) for ln in complete[seen:] if ln.strip()]
    return records, max(seen, len(complete))


# --- what one sample reads ------------------------------------------------------------
def tree_bytes(root: Path) -> tuple[int, int]:
    """Bytes and files under ``root`` (0, 0 when it does not exist); files that vanish while
    walking (a compaction, a commit) are skipped."""
    total = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return total, files


def cache_folders(spark_local: Path, run_id: str) -> list[Path]:
    """The executors' engine caches of the run: ``keyshift-engines/<run>`` under Spark's
    per-application files folder (inside ``spark.local.dir``), or under the temp dir where
    a task ran without one (keyshift.streaming.engine_state.cache_root)."""
    found = [Path(folder) / run_id for folder, dirs, _ in os.walk(spark_local)
             if Path(folder).name == "keyshift-engines" and run_id in dirs]
    fallback = Path(tempfile.gettempdir()) / "keyshift-engines" / run_id
    return found + ([fallback] if fallback.is_dir() else [])


def delta_files(warehouse: Path) -> dict[str, dict[str, int]]:
    """Per Delta table of the warehouse: its data files and its commit files."""
    out: dict[str, dict[str, int]] = {}
    if not warehouse.is_dir():
        return out
    for table in sorted(p for p in warehouse.iterdir()
                        if p.is_dir() and not p.name.startswith("_")
                        and (p / "_delta_log").is_dir()):
        parquet = sum(1 for folder, _, names in os.walk(table) if "_delta_log" not in folder
                      for n in names if n.endswith(".parquet"))
        commits = sum(1 for n in os.listdir(table / "_delta_log") if n.endswith(".json"))
        out[table.name] = {"parquet": parquet, "log_json": commits}
    return out


def rss_split(pid: int) -> tuple[int, int, int, int | None]:
    """RSS bytes of the process tree of ``pid`` in three parts, and the JVM's pid (None
    before it runs): the Python driver (the ``keyshift run`` process and anything else that
    is neither Java nor a Python worker), the JVM (``java``: in ``local[*]`` driver and
    executors in one), and the Python workers (``pyspark.daemon`` / ``pyspark.worker``
    processes and their children). Apart, because each grows for other reasons: a JVM's
    heap grows lazily towards its ``-Xmx``, a Python process only by what it keeps."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0, None
    workers: set[int] = set()
    jvms: set[int] = set()
    for p in procs:
        try:
            cmd = p.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        line = " ".join(cmd)
        if "pyspark.daemon" in line or "pyspark.worker" in line:
            workers.add(p.pid)
            try:
                workers.update(c.pid for c in p.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        elif cmd and Path(cmd[0]).name == "java":
            jvms.add(p.pid)
    python = jvm = worker = 0
    for p in procs:
        try:
            rss = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        if p.pid in workers:
            worker += rss
        elif p.pid in jvms:
            jvm += rss
        else:
            python += rss
    return python, jvm, worker, min(jvms) if jvms else None


_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def xmx_bytes(args: Sequence[str]) -> int | None:
    """The heap cap of a ``java`` command line (its last ``-Xmx``, as the JVM reads it), in
    bytes; None without one (the JVM then caps the heap at a quarter of the machine's RAM)."""
    found = None
    for a in args:
        if a.startswith("-Xmx"):
            size = a[4:].lower()
            unit = size[-1] if size and size[-1] in _UNITS else ""
            found = int(size[:len(size) - len(unit)]) * _UNITS[unit]
    return found


def parse_jstat_gc(text: str) -> dict[str, float]:
    """``jstat -gc`` output (a header line and a value line; KB) as column -> value."""
    lines = [ln.split() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 2 or len(lines[0]) != len(lines[-1]):
        raise ValueError(f"not jstat -gc output: {text[:200]!r}")
    return {k: float(v) if v != "-" else 0.0 for k, v in zip(lines[0], lines[-1], strict=True)}


def heap_mb(gc: dict[str, float]) -> tuple[float, float, float]:
    """From ``jstat -gc`` columns, in MB: the Java heap used and committed (survivors, eden,
    old), and the metaspace used (classes: Spark compiles new ones for new query plans, and
    they stay while their loader lives, so a long run's metaspace must level off too)."""
    used = sum(gc[k] for k in ("S0U", "S1U", "EU", "OU"))
    committed = sum(gc[k] for k in ("S0C", "S1C", "EC", "OC"))
    return used / 1024, committed / 1024, gc["MU"] / 1024


def jvm_heap(jvm_pid: int | None, collect: bool = False) -> tuple[float, float, float]:
    """The JVM's heap used, heap committed and metaspace used in MB, read with the JDK's
    ``jstat`` from outside (nan when there is no JVM yet or no ``jstat``). ``collect``: a
    full GC first (``jcmd GC.run``), so that "used" is the live heap, not whatever garbage
    the last collection left; it pauses the job and lets G1 shrink the heap, so it is for a
    diagnostic run, not the soak's verdict on RSS."""
    import shutil

    jstat, jcmd = shutil.which("jstat"), shutil.which("jcmd")
    if jvm_pid is None or jstat is None or (collect and jcmd is None):
        return math.nan, math.nan, math.nan
    try:
        if collect:
            subprocess.run([jcmd, str(jvm_pid), "GC.run"], capture_output=True, timeout=120,
                           check=True)
        out = subprocess.run([jstat, "-gc", str(jvm_pid)], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        return heap_mb(parse_jstat_gc(out))
    except (subprocess.SubprocessError, OSError, ValueError, KeyError):
        return math.nan, math.nan, math.nan


_NMT_LINE = re.compile(r"^(?:(?P<total>Total):|-\s+(?P<name>\S.*?)\s+\()\s*"
                       r"reserved=\d+KB, committed=(?P<committed>\d+)KB")


def parse_nmt_summary(text: str) -> dict[str, float]:
    """``jcmd <pid> VM.native_memory summary`` as category -> committed MB (``Total``, ``Java
    Heap``, ``Class``, ``Thread``, ``Code``, ``GC``, ``Internal``, ``Other``, ``Symbol``,
    ``Arena Chunk``, ...): where a JVM's memory outside the heap goes, which RSS and
    ``jstat`` cannot tell apart."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = _NMT_LINE.match(line.strip())
        if m:
            found[m.group("total") or m.group("name")] = int(m.group("committed")) / 1024
    if "Total" not in found:
        raise ValueError(f"not a native memory summary: {text[:200]!r}")
    return found


def jvm_native(jvm_pid: int | None) -> dict[str, float]:
    """The JVM's committed memory per NMT category in MB (empty when the JVM runs without
    ``-XX:NativeMemoryTracking=summary``, which ``--nmt`` gives it, or there is no ``jcmd``)."""
    import shutil

    jcmd = shutil.which("jcmd")
    if jvm_pid is None or jcmd is None:
        return {}
    try:
        out = subprocess.run([jcmd, str(jvm_pid), "VM.native_memory", "summary"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return parse_nmt_summary(out)
    except (subprocess.SubprocessError, OSError, ValueError):
        return {}


def nonheap_mb(native: dict[str, float]) -> float:
    """Committed outside the Java heap (NMT's total minus its Java Heap); nan without NMT."""
    if "Total" not in native:
        return math.nan
    return native["Total"] - native.get("Java Heap", 0.0)


_FULL_GC = re.compile(r"Pause Full \(.*?\) (?P<before>\d+)M->(?P<after>\d+)M\((?P<heap>\d+)M\)")


def last_full_gc_mb(log: Path) -> float:
    """The heap left by the last full GC in a JVM's ``-Xlog:gc`` file (``Pause Full
    (Diagnostic Command) 834M->245M(1899M)``: 245), in MB; nan without one. What a full
    collection leaves is the live heap at that instant; ``jstat`` read afterwards also counts
    whatever the running batch allocated since, which put 250–830 MB of "used" after
    consecutive forced GCs of one steady run."""
    if not log.is_file():
        return math.nan
    found = math.nan
    with log.open(errors="replace") as f:
        for line in f:
            if m := _FULL_GC.search(line):
                found = float(m.group("after"))
    return found


def gauge_value(exposition: str, name: str, run_id: str) -> float:
    """The value of gauge ``name`` for ``run_id`` in a Prometheus text exposition (the job's
    live metrics endpoint); nan when the job has not set it yet."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if s.name == name and s.labels.get("run_id") == run_id:
                return float(s.value)
    return math.nan


def scrape(url: str, timeout_s: float = 5.0) -> str:
    """The text of the job's ``/metrics`` ("" when it does not answer)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError):
        return ""


def distinct_free_ports(free_port, n: int) -> list[int]:
    """``n`` different free ports (``free_port`` may hand out the same one twice)."""
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


def process_args(pid: int) -> list[str]:
    """The command line of ``pid`` ([] once it has gone)."""
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def heap_cap_text(java_args: Sequence[str]) -> str:
    """What heap cap the driver JVM runs with, and the spark.driver.memory it came from."""
    cap = xmx_bytes(java_args)
    conf = next((a.split("=", 1)[1] for a in java_args
                 if a.startswith("spark.driver.memory=")), None)
    told = f" (spark.driver.memory={conf})" if conf else ""
    if cap is None:
        return f"no -Xmx{told}: the heap may grow to a quarter of the machine's RAM"
    return f"-Xmx {cap / 1024 ** 2:,.0f} MB{told}"


def trace_summary(folder: Path, top: int = 12) -> list[str]:
    """Lines about the last Python heap report of ``--trace-python`` (bench/soak_hook)."""
    reports = sorted(folder.glob("trace-*.json"))
    if not reports:
        return [f"python trace: no report in {folder} (the run ended before the first)"]
    mb = 1024 * 1024
    lines = []
    for path in reports:
        r = json.loads(path.read_text())
        lines.append(f"python trace {path.name} at {r['elapsed_s'] / 60:.1f} min: RSS "
                     f"{r['rss_bytes'] / mb:.1f} MB ({r['rss_growth_bytes'] / mb:+.1f} since the "
                     f"baseline), traced {r['traced_bytes'] / mb:.1f} MB "
                     f"({r['traced_growth_bytes'] / mb:+.2f}), objects {r['objects']:,} "
                     f"({r['objects_growth']:+,})"
                     + (f", Arrow {r['pyarrow_allocated_bytes'] / mb:.1f} MB"
                        if r.get("pyarrow_allocated_bytes") is not None else ""))
    last = json.loads(reports[-1].read_text())
    lines.append(f"python trace: the {top} allocation sites that grew most since the baseline:")
    for site in last["top_sites"][:top]:
        where = " <- ".join(ln.strip() for ln in site["traceback"][::2][:3])
        lines.append(f"  {site['size_diff'] / 1024:+9.1f} KB {site['count_diff']:+7d} blocks"
                     f"  {where}")
    lines.append(f"python trace: the {top} object types whose count grew most:")
    lines.extend(f"  {t['count_diff']:+8,d}  {t['type']} ({t['count']:,})"
                 for t in last["top_types"][:top])
    return lines


@dataclass
class Sample:
    t_min: float
    driver_rss_mb: float  # Python driver + JVM, as the earlier runs reported it
    driver_py_rss_mb: float
    jvm_rss_mb: float
    jvm_heap_used_mb: float
    jvm_heap_committed_mb: float
    jvm_metaspace_mb: float
    worker_rss_mb: float
    state_durable_mb: float
    state_cache_mb: float
    staged_files: int
    delta_parquet: int
    delta_log_json: int
    batches: int
    events: int
    produced: int
    behind: int
    lag_records: float
    producer_short: int
    batch_p95_s: float
    migrations: int
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    # --nmt: JVM committed memory outside the heap, and per NMT category (MB)
    jvm_nonheap_mb: float = math.nan
    native: dict[str, float] = field(default_factory=dict)
    # --live-heap: the heap the forced full GC left (the JVM's own gc log)
    jvm_live_heap_mb: float = math.nan


class Sampler:
    """Reads one run's numbers from outside the job, as the sample loop calls it.

    Two views of Kafka: ``behind`` is what the producer has put in the topic (its end
    offsets, ``ends``) minus the events the job's batches read, counted at the sample; the
    job's own ``keyshift_kafka_lag_records`` gauge (``metrics_url``) is the topic's end at the
    scrape minus where the last batch ended. ``producer_short`` is the nominal ``rate`` × time
    minus what was produced: a producer below its rate, not a slow job."""

    def __init__(self, pid: int, home: Path, warehouse: Path, run_id: str,
                 rate: float, ends: Any = None,
                 metrics_url: str | None = None, live_heap: bool = False,
                 nmt: bool = False) -> None:
        self.pid, self.home, self.warehouse, self.run_id = pid, home, warehouse, run_id
        self.rate, self.ends, self.metrics_url = rate, ends, metrics_url
        self.live_heap, self.nmt = live_heap, nmt
        self.batches_file = home / "runs" / run_id / "batches.jsonl"
        self.seen = self.batches = self.events = self.migrations = 0
        self.jvm_pid: int | None = None

    def take(self, t_min: float) -> Sample:
        python, jvm, worker, self.jvm_pid = rss_split(self.pid)
        used, committed, metaspace = jvm_heap(self.jvm_pid, collect=self.live_heap)
        native = jvm_native(self.jvm_pid) if self.nmt else {}
        live = (last_full_gc_mb(self.home / "logs" / f"gc-{self.jvm_pid}.log")
                if self.live_heap and self.jvm_pid is not None else math.nan)
        durable, _ = tree_bytes(self.warehouse / "_engine_state" / self.run_id)
        cache = sum(tree_bytes(p)[0] for p in cache_folders(self.home / "spark-local",
                                                              self.run_id))
        _, staged = tree_bytes(self.warehouse / "_runs" / self.run_id / "staged")
        tables = delta_files(self.warehouse)
        lag = (gauge_value(scrape(self.metrics_url), "keyshift_kafka_lag_records", self.run_id)
               if self.metrics_url else math.nan)
        text = self.batches_file.read_text() if self.batches_file.is_file() else ""
        fresh, self.seen = new_batches(text, self.seen)
        self.batches += len(fresh)
        # input events as bench_stream.read_batches counts them (a restored task read none)
        self.events += sum(int(t.get("events", 0)) for b in fresh for t in b.get("tasks", [])
                           if not t.get("restore"))
        self.migrations += sum(1 for b in fresh if b.get("moved_groups", 0) > 0)
        # the topic's end after the batches were read: a record counted read is in it
        produced = (sum(self.ends.offsets().values()) if self.ends is not None
                    else self.events)
        mb = 1024 * 1024
        return Sample(
            t_min=round(t_min, 3), driver_rss_mb=(python + jvm) / mb,
            driver_py_rss_mb=python / mb, jvm_rss_mb=jvm / mb, jvm_heap_used_mb=used,
            jvm_heap_committed_mb=committed, jvm_metaspace_mb=metaspace, worker_rss_mb=worker / mb,
            state_durable_mb=durable / mb, state_cache_mb=cache / mb, staged_files=staged,
            delta_parquet=sum(t["parquet"] for t in tables.values()),
            delta_log_json=sum(t["log_json"] for t in tables.values()),
            batches=self.batches, events=self.events, produced=produced,
            behind=max(0, produced - self.events), lag_records=lag,
            producer_short=round(self.rate * t_min * 60) - produced,
            batch_p95_s=percentile([float(b["duration_s"]) for b in fresh], 95),
            migrations=self.migrations, tables=tables, jvm_nonheap_mb=nonheap_mb(native),
            native=native, jvm_live_heap_mb=live)


# --- the report ------------------------------------------------------------------------
SERIES = ("driver_rss_mb", "driver_py_rss_mb", "jvm_rss_mb", "jvm_heap_used_mb",
          "jvm_heap_committed_mb", "jvm_live_heap_mb", "jvm_metaspace_mb", "jvm_nonheap_mb",
          "worker_rss_mb",
          "state_durable_mb",
          "state_cache_mb", "staged_files", "batch_p95_s", "behind", "lag_records",
          "delta_parquet", "delta_log_json", "batches", "events", "produced",
          "producer_short", "migrations")
HEAD = {"driver_rss_mb": "driver MB", "driver_py_rss_mb": "python MB", "jvm_rss_mb": "JVM MB",
        "jvm_heap_used_mb": "heap used", "jvm_heap_committed_mb": "heap comm.",
        "jvm_live_heap_mb": "live heap", "jvm_metaspace_mb": "metasp.",
        "jvm_nonheap_mb": "non-heap",
        "worker_rss_mb": "workers MB",
        "state_durable_mb": "state MB", "state_cache_mb": "cache MB", "staged_files": "staged",
        "batch_p95_s": "p95 s", "behind": "behind", "lag_records": "lag gauge",
        "events": "read", "produced": "produced", "producer_short": "prod. short",
        "delta_parquet": "parquet", "delta_log_json": "log json", "batches": "batches",
        "migrations": "migr."}


def row_text(s: Sample) -> str:
    return (f"{s.t_min:5.1f} min  driver {s.driver_rss_mb:6.0f} MB (python "
            f"{s.driver_py_rss_mb:4.0f}, JVM {s.jvm_rss_mb:5.0f}: heap "
            f"{s.jvm_heap_used_mb:5.0f}/{s.jvm_heap_committed_mb:5.0f}"
            + ("" if math.isnan(s.jvm_live_heap_mb) else f", live {s.jvm_live_heap_mb:4.0f}")
            + ", metaspace "
            f"{s.jvm_metaspace_mb:3.0f}"
            + ("" if math.isnan(s.jvm_nonheap_mb) else f", non-heap {s.jvm_nonheap_mb:4.0f}")
            + ")  workers "
            f"{s.worker_rss_mb:4.0f} MB  state {s.state_durable_mb:5.2f} MB  cache "
            f"{s.state_cache_mb:5.2f} MB  staged {s.staged_files:3d}  parquet "
            f"{s.delta_parquet:5d}  log {s.delta_log_json:5d}  batches {s.batches:4d}  "
            f"read {s.events:7d} of {s.produced:7d} produced (behind {s.behind:5d}, gauge "
            f"{s.lag_records:5.0f}; producer short {s.producer_short:5d})  p95 "
            f"{s.batch_p95_s:5.2f}s  migrations {s.migrations}")


def judge(samples: Sequence[Sample], warmup_min: float, tolerance: float) -> list[Flatness]:
    t = [s.t_min for s in samples]
    # p95 of an interval without batches is 0 (a stall): kept, it is what happened
    return [flatness(name, t, [float(getattr(s, name)) for s in samples], warmup_min,
                     tolerance, by_design=name.startswith("delta_") or name in GROWING)
            for name in SERIES]


def flatness_line(f: Flatness, tolerance: float) -> str:
    if f.verdict.startswith("n/a"):
        return f"FLATNESS {f.series}: {f.verdict}"
    rule = ("Delta files grow by design until table maintenance compacts them"
            if f.series.startswith("delta_") else "a counter")
    if f.verdict == "grows by design":
        return (f"FLATNESS {f.series}: {f.slope_per_min:+,.2f}/min over {f.span_min:.1f} min "
                f"({f.samples} samples; {rule}, not judged)")
    return (f"FLATNESS {f.series}: slope {f.slope_per_min:+.4g}/min = "
            f"{f.slope_pct_of_mean:+.2f} %/min of its mean {f.mean:.4g}, over "
            f"{f.span_min:.1f} min, {f.samples} samples: "
            f"{f.verdict} (rule: |slope| x {f.span_min:.1f} min "
            f"{'<=' if f.verdict == 'FLAT' else '>'} {tolerance:.0%} of the mean)")


def native_growth(samples: Sequence[Sample], warmup_min: float, tolerance: float,
                  top: int = 8) -> list[str]:
    """``--nmt``: the JVM's NMT categories after the warm-up, fastest-growing first (Theil–Sen
    slope, judged as every series): which part of the memory outside the heap moves."""
    names = sorted({k for s in samples for k in s.native if k != "Total"})
    t = [s.t_min for s in samples]
    found = [flatness(f"nmt {n}", t, [s.native.get(n, math.nan) for s in samples],
                      warmup_min, tolerance) for n in names]
    found = [f for f in found if not math.isnan(f.slope_per_min)]
    found.sort(key=lambda f: -abs(f.slope_per_min))
    return [f"NMT {f.series[4:]}: {f.slope_per_min:+.3f} MB/min, mean {f.mean:.1f} MB, "
            f"{f.verdict}" for f in found[:top]]


def print_table(console, samples: Iterable[Sample]) -> None:
    from rich.table import Table

    table = Table(title="soak samples")
    table.add_column("min", justify="right")
    for name in SERIES:
        table.add_column(HEAD[name], justify="right")
    for s in samples:
        table.add_row(f"{s.t_min:.1f}", *[
            f"{getattr(s, n):.2f}" if isinstance(getattr(s, n), float) else
            str(getattr(s, n)) for n in SERIES])
    console.print(table, width=300)  # one line per sample, however many series


# --- the run ---------------------------------------------------------------------------
def stop(proc: subprocess.Popen, timeout_s: float) -> int:
    """SIGTERM (the job's clean stop between batches), SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    ap.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--warmup-s", type=float, default=300.0,
                    help="samples before this are not judged (default 300)")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="FLAT when |slope| x span < this fraction of the mean (0.10)")
    ap.add_argument("--rate", type=float, default=300.0, help="events/s (default 300)")
    ap.add_argument("--shift-s", type=float, default=180.0,
                    help=f"seconds between switches of the Zipf exponent ({LOW:g} <-> {HIGH:g})")
    ap.add_argument("--trigger-s", type=float, default=2.0, help="micro-batch trigger (2)")
    ap.add_argument("--window-s", type=float, default=10.0,
                    help="controller statistic window: DLB-H may rebalance once per window")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--groups", type=int, default=4096)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--driver-memory", default=None,
                    help="the job's [spark] driver_memory, its JVM's -Xmx (default: config's)")
    ap.add_argument("--trace-python", action="store_true",
                    help="tracemalloc and object counts in the job's Python driver "
                         "(bench/soak_hook): what grew since the warm-up, every "
                         "--trace-every-s, printed at the end; slows the driver a little")
    ap.add_argument("--live-heap", action="store_true",
                    help="a full GC of the driver JVM before each sample (jcmd GC.run); the "
                         "heap it leaves, from the JVM's gc log, is the live heap; pauses the "
                         "job, lets the heap shrink")
    ap.add_argument("--nmt", action="store_true",
                    help="the driver JVM with -XX:NativeMemoryTracking=summary (via "
                         "JDK_JAVA_OPTIONS); each sample reads its committed memory per "
                         "category (jcmd VM.native_memory): what grows outside the heap")
    ap.add_argument("--trace-every-s", type=float, default=300.0,
                    help="seconds between two Python heap reports (default 300)")
    ap.add_argument("--json", dest="json_out", default=None,
                    help="also write the raw numbers here (always: <home>/soak.json)")
    args = ap.parse_args(argv)
    for name in ("duration", "sample_s", "rate", "shift_s", "trigger_s", "window_s",
                 "tolerance", "trace_every_s"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')}: must be > 0")
    if args.warmup_s < 0:
        ap.error("--warmup-s: must be >= 0")
    for name in ("engines", "groups"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: must be >= 1")
    if args.sample_s > args.duration:
        ap.error("--sample-s: longer than --duration, no sample would be taken")

    from rich.console import Console

    from keyshift.config import load_config
    from keyshift.streaming import broker as brokers
    from keyshift.streaming import kafka_client as clients

    console = Console(width=200)
    home = Path(tempfile.mkdtemp(prefix="keyshift-bench-soak-"))
    port, controller_port, metrics_port = distinct_free_ports(brokers.free_port, 3)
    spark = {"master": args.master, "trigger_s": args.trigger_s}
    if args.driver_memory:
        spark["driver_memory"] = args.driver_memory
    overrides = {
        "home": str(home),
        "groups": {"count": args.groups},
        "kafka": {"port": port, "controller_port": controller_port},
        "spark": spark,
        "controller": {"window_s": args.window_s},
        # a port of its own: the default one may be another job's (then the gauge is off)
        "metrics": {"port": metrics_port},
    }
    cfg = load_config(env={}, **overrides)
    warehouse = cfg.warehouse_path
    env = config_env(overrides)
    trace_dir = home / "trace"
    if args.trace_python:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE / "soak_hook"), env.get("PYTHONPATH")) if p)
        env["SOAK_TRACE_PYTHON"] = f"{trace_dir},{args.warmup_s:g},{args.trace_every_s:g}"
    # read by every `java` the job starts (%p: one gc log per JVM): the driver's is sampled
    java_opts = ([f"-Xlog:gc:file={home / 'logs'}/gc-%p.log"] if args.live_heap else []) + \
        (["-XX:NativeMemoryTracking=summary"] if args.nmt else [])
    if java_opts:
        env["JDK_JAVA_OPTIONS"] = " ".join([*filter(None, [env.get("JDK_JAVA_OPTIONS")]),
                                            *java_opts])
    topic = f"soak-{uuid.uuid4().hex[:6]}"
    run_id = f"soak-{uuid.uuid4().hex[:6]}"
    skew = shifting_skew(args.duration, args.shift_s)
    logs = home / "logs"
    logs.mkdir()
    broker = brokers.Broker.from_config(cfg)
    console.print(f"soak: broker {broker.start()}; home {home}")
    samples: list[Sample] = []
    producer = job = ends = None
    jvm_args: list[str] = []
    summary: dict[str, Any] = {}
    failure = ""
    outs = {name: logs / name for name in ("run.out", "run.log", "produce.log")}
    with (open(outs["run.out"], "w") as run_out, open(outs["run.log"], "w") as run_log,
          open(outs["produce.log"], "w") as produce_log):
        try:
            clients.create_topic(cfg.kafka.bootstrap, topic, PARTITIONS)
            # stdout to a file, not a pipe: a run of hours would fill a pipe nobody reads
            job = subprocess.Popen(
                [keyshift_exe(), "run", "--app", "wordcount", "--topic", topic,
                 "--policy", "dlb-h", "--engines", str(args.engines), "--run-id", run_id,
                 "--json"], stdout=run_out, stderr=run_log, env=env)
            producer = subprocess.Popen(
                [keyshift_exe(), "produce", "--app", "wordcount", "--topic", topic,
                 "--rate", f"{args.rate:g}", "--duration", f"{args.duration:g}",
                 "--skew", skew, "--seed", str(args.seed), "--no-progress"],
                stdout=produce_log, stderr=subprocess.STDOUT, env=env)
            console.print(f"soak: run {run_id} (dlb-h, {args.engines} engines, trigger "
                          f"{args.trigger_s:g}s) on {topic}, {args.rate:g} events/s for "
                          f"{args.duration:g}s, skew {LOW:g}<->{HIGH:g} every "
                          f"{args.shift_s:g}s; a sample every {args.sample_s:g}s")
            ends = clients.TopicEnds(cfg.kafka.bootstrap, topic,
                                     clients.client_options(cfg.kafka))
            sampler = Sampler(job.pid, home, warehouse, run_id, args.rate, ends,
                              f"http://{cfg.metrics.host}:{metrics_port}/metrics",
                              live_heap=args.live_heap, nmt=args.nmt)
            t0 = time.monotonic()
            next_at = args.sample_s
            while next_at <= args.duration + 1e-9:
                time.sleep(max(0.0, t0 + next_at - time.monotonic()))
                if job.poll() is not None:
                    failure = f"keyshift run exited {job.returncode} after {next_at / 60:.1f} min"
                    break
                samples.append(sampler.take((time.monotonic() - t0) / 60))
                if not jvm_args and sampler.jvm_pid is not None:
                    jvm_args = process_args(sampler.jvm_pid)
                    console.print(f"soak: driver JVM pid {sampler.jvm_pid}: "
                                  f"{heap_cap_text(jvm_args)}", highlight=False)
                console.print(row_text(samples[-1]), highlight=False, soft_wrap=True)
                sys.stdout.flush()  # rows as they come also when stdout is a file
                next_at += args.sample_s
        except KeyboardInterrupt:
            failure = "interrupted"
        finally:
            if job is not None and (code := stop(job, timeout_s=300)) != 0 and not failure:
                failure = f"keyshift run exited {code} at its stop"
            if producer is not None:
                stop(producer, timeout_s=30)
            broker.stop()
    if job is not None and job.returncode == 0:
        try:
            summary = parse_run_json(outs["run.out"].read_text())
        except ValueError as exc:
            failure = failure or str(exc)

    warmup_min = args.warmup_s / 60
    verdicts = judge(samples, warmup_min, args.tolerance)
    print_table(console, samples)
    for f in verdicts:
        console.print(flatness_line(f, args.tolerance), highlight=False)
    for line in native_growth(samples, warmup_min, args.tolerance):
        console.print(line, highlight=False)
    rates = {f.series: f.slope_per_min for f in verdicts
             if f.series in ("events", "produced") and not math.isnan(f.slope_per_min)}
    if rates:
        console.print(f"soak: per minute after the warm-up: nominal {args.rate * 60:,.0f}, "
                      f"produced {rates.get('produced', math.nan):,.0f}, read "
                      f"{rates.get('events', math.nan):,.0f}", highlight=False)
    if args.trace_python:
        for line in trace_summary(trace_dir):
            console.print(line, highlight=False, markup=False)
    if summary:
        console.print(f"soak: the job read {summary.get('events_in', 0):,} events in "
                      f"{summary.get('batches', 0)} batches, {summary.get('migrations', 0)} "
                      f"migrations ({summary.get('moved_groups', 0)} groups), "
                      f"{summary.get('dead_letter', 0)} dead letters; batch p95 "
                      f"{summary.get('batch_p95_s', 0):.2f}s over the run")
    raw = {"args": vars(args), "run_id": run_id, "jvm_args": jvm_args, "topic": topic, "skew": skew,
           "home": str(home), "samples": [asdict(s) for s in samples],
           "flatness": [{**asdict(f), "slope_pct_of_mean": f.slope_pct_of_mean}
                        for f in verdicts],
           "summary": summary, "failure": failure}
    text = json.dumps(raw, indent=1, default=str)
    (home / "soak.json").write_text(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    console.print(f"soak: raw numbers in {home / 'soak.json'}; logs in {logs}, "
                  f"run folder {cfg.run_dir(run_id)}; warehouse {warehouse}")
    if failure:
        console.print(f"[red]soak: {failure}[/]; see {logs / 'run.log'}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
