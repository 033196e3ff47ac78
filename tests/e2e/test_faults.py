"""Faults injected into real components (issue 16, item 1): what the running job does, what
it says, and that its outputs are the never-faulted run's, nothing lost or doubled.

Each test runs ``keyshift run`` as a subprocess (the way a user runs it) against a broker of
its own, so that stopping that broker disturbs no other test.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from engines_support import job_env, new_topic, produce_events, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def own_broker(tmp_path, spark_config):
    from keyshift.streaming.broker import Broker, free_port

    port = free_port()
    controller = free_port()
    while controller == port:
        controller = free_port()
    cfg = spark_config.model_copy(update={"kafka": spark_config.kafka.model_copy(update={
        "port": port, "controller_port": controller})})
    broker = Broker.from_config(cfg, folder=tmp_path / "kafka")
    broker.start()
    try:
        yield cfg, broker
    finally:
        broker.stop()


class Run:
    """``keyshift run`` in a subprocess, its stderr lines collected as they come."""

    def __init__(self, cfg, topic: str, run_id: str, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        env = job_env(cfg, **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic",
             topic, "--engines", "2", "--run-id", run_id, "--available-now", "--json", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout_s: float) -> bool:
        return self.wait_for_after(0, prefix, timeout_s)

    def wait_for_after(self, start: int, prefix: str, timeout_s: float,
                       contains: str = "") -> bool:
        """Whether a line from the ``start``-th on begins with ``prefix`` (and holds
        ``contains``) within ``timeout_s`` or before the process ends."""
        def found() -> bool:
            return any(x.startswith(prefix) and contains in x for x in self.lines[start:])

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if found():
                return True
            time.sleep(0.2)
        return found()

    def finish(self, timeout_s: float = 600) -> dict:
        # stdout alone: communicate() would also read stderr, racing the reader thread for
        # lines (a run once lost its "is back" line that way)
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        assert self.proc.returncode == 0, "\n".join(self.lines[-40:])
        return json.loads(out.strip().splitlines()[-1])


def test_broker_down_mid_run_is_said_and_loses_nothing(own_broker, spark) -> None:
    """The broker stops after the first batch for 35 s: the job says within its grace that it
    waits for the broker (while it is still down), says when it is back, and ends with every
    event processed once and the complex events of one operator that saw every event in
    order (the reference the SIGKILL test compares against; a second ``keyshift run`` as the
    reference cost a JVM start and half this test's time)."""
    from engines_support import outputs, reference

    cfg, broker = own_broker
    topic = new_topic(cfg.kafka.bootstrap, partitions=2)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", 3000, "zipf:1.0")
    faulty = Run(cfg, topic, "broker-down", "--max-offsets", "300")
    assert faulty.wait_for("batch ", 300), "\n".join(faulty.lines[-40:])
    broker.stop()
    stopped = time.monotonic()
    waited = faulty.wait_for("keyshift: waiting for the Kafka broker", 30)
    while time.monotonic() - stopped < 35:
        time.sleep(0.5)
    broker.start()
    summary = faulty.finish()
    assert waited, "\n".join(faulty.lines[-40:])
    assert any(x.startswith("keyshift: the Kafka broker at") and "is back" in x
               for x in faulty.lines), "\n".join(faulty.lines[-40:])
    assert summary["events_in"] == 3000 and summary["dead_letter"] == 0
    got = outputs(spark, cfg, "broker-down")
    # the same complex events, none of them twice (both sides are sorted lists)
    assert got and got == reference("wordcount", events, cfg.groups.count, {})


@pytest.mark.timeout(1800)  # 11 starts of keyshift run: past the suite's 900 s on a busy host
def test_sigkill_at_random_points_of_a_batch_then_restart_gives_the_reference(
        spark, platform_config, tmp_path) -> None:
    """Ten SIGKILLs drawn at random (seed printed; KEYSHIFT_FAULT_SEED replays one), each
    hitting a restart of the same run: five at a phase of a batch
    (keyshift.streaming.faults), four at a random wall-clock time, 0-6 s after that
    restart's first batch line (wherever the job is then: a batch's middle, its Delta
    commits, the staged commit behind the stream, Spark's checkpoint between batches), and
    one at a random time of a restart's start-up (its recovery). DLB-H with migrations on a
    skew that shifts, so kills land before, during and after engines, migrations, the
    controller and the writes. The restarted run ends with every record once and exactly the
    complex events of one uninterrupted operator."""
    import random

    from engines_support import job_config, outputs, reference

    from keyshift.streaming.faults import ENV, PHASES

    seed = int(os.environ.get("KEYSHIFT_FAULT_SEED", random.SystemRandom().randrange(10**6)))
    print(f"kill points drawn with KEYSHIFT_FAULT_SEED={seed}")
    rng = random.Random(seed)
    phases = sorted(((rng.randrange(0, 14), rng.choice(PHASES)) for _ in range(5)))
    # a draw is ("phase", "phase@batch") or ("clock", seconds after the first batch line);
    # ("start", seconds after the process started) kills during start-up and recovery
    draws: list[tuple[str, str | float]] = [("phase", f"{p}@{b}") for b, p in phases]
    for _ in range(4):
        draws.insert(rng.randrange(len(draws) + 1), ("clock", round(rng.uniform(0, 6), 2)))
    draws.insert(rng.randrange(len(draws) + 1), ("start", round(rng.uniform(2, 15), 2)))
    print(f"draws: {draws}")
    cfg = job_config(platform_config, policy="dlb-h", theta=10.0)
    total, bad = 1800, 4
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total,
                            skew="zipf:0.2@0,1.5@300", keys=300, malformed=bad)
    run_id = f"kills-{topic}"
    env = job_env(cfg)
    log = tmp_path / "job.log"

    def run(kind: str | None = None, at: str | float | None = None) -> int:
        with open(log, "a") as out:
            out.write(f"\n=== {kind or 'no fault'} {at if at is not None else ''} ===\n")
        start = log.stat().st_size
        proc = subprocess.Popen(
            [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--policy",
             "dlb-h", "--run-id", run_id, "--topic", topic, "--engines", "4",
             "--max-offsets", "100", "--params", '{"window_s": 1.0}', "--available-now"],
            env={**env, **({ENV: at} if kind == "phase" else {})}, stdout=open(log, "a"),
            stderr=subprocess.STDOUT, start_new_session=True)  # its own group: killpg
        if kind in ("clock", "start"):
            began = time.monotonic()
            while proc.poll() is None and kind == "clock":
                with open(log, "rb") as f:
                    f.seek(start)
                    if any(x.startswith(b"batch ") for x in f.read().splitlines()):
                        break
                if time.monotonic() - began > 600:
                    break
                time.sleep(0.2)
            time.sleep(float(at))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=900)

    killed = []
    for kind, at in draws:
        rc = run(kind, at)
        assert rc in (0, -9), log.read_text()[-3000:]
        if rc == -9:
            killed.append(f"{kind} {at}")
    assert run() == 0, log.read_text()[-3000:]
    print(f"killed at {killed}")
    assert len(killed) >= 6, (draws, killed)  # most draws fall inside the input

    metrics = table_rows(spark, cfg, "metrics", run_id)
    batch_ids = [r.batch_id for r in metrics]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was recorded twice"
    assert sum(r.events_in for r in metrics) == total - bad
    assert sum(r.dead_letter for r in metrics) == bad
    mig = table_rows(spark, cfg, "migrations", run_id)
    started = {r.migration_id for r in mig if r.status == "started"}
    completed = [r.migration_id for r in mig if r.status == "completed"]
    assert started == set(completed) and len(completed) == len(set(completed))
    assert outputs(spark, cfg, run_id) == reference("wordcount", events, cfg.groups.count,
                                                    {"window_s": 1.0})


def test_an_unwritable_table_past_outage_s_stops_cleanly_and_a_restart_resumes(
        spark, platform_config, tmp_path) -> None:
    """After the first batch, ``events_out``'s log directory becomes a regular file (the test
    runs as root, so file modes would not stop a write) and stays one: the batch that appends
    to it fails, the job says once that it waits for the warehouse, tries again for
    ``warehouse.outage_s`` (5 s here), then stops with one line naming the table's path and
    how to resume; once the table is back a restart of the same run id ends with every
    record once and the complex events of one uninterrupted operator."""
    from engines_support import outputs, reference

    cfg = platform_config.model_copy(update={"home": str(tmp_path / "home")})
    total = 1200
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total, skew="zipf:1.0",
                            keys=200)
    args = ["--max-offsets", "200", "--params", '{"window_s": 1.0}']
    broken = Run(cfg, topic, "unwritable", *args, env={"KEYSHIFT_WAREHOUSE__OUTAGE_S": "5"})
    assert broken.wait_for("batch ", 300), "\n".join(broken.lines[-40:])
    log_dir = cfg.warehouse_path / "events_out" / "_delta_log"
    assert log_dir.is_dir(), cfg.table_path("events_out")
    log_dir.rename(log_dir.with_name("_delta_log.aside"))
    log_dir.write_text("not a directory")
    broken.proc.wait(timeout=600)
    broken._reader.join(timeout=10)
    assert broken.proc.returncode not in (0, None)
    waits = [x for x in broken.lines if x.startswith("keyshift: waiting for the warehouse")]
    assert len(waits) == 1 and "5 s" in waits[0], broken.lines
    assert not any("answers again" in x for x in broken.lines)
    said = [x for x in broken.lines if x.startswith("keyshift run:")]
    assert len(said) == 1 and "events_out" in said[0] and "--run-id" in said[0], broken.lines
    assert not any(x.lstrip().startswith(("at org.apache", "Traceback")) for x in broken.lines)

    log_dir.unlink()
    log_dir.with_name("_delta_log.aside").rename(log_dir)
    summary = Run(cfg, topic, "unwritable", *args).finish()
    assert summary["events_in"] + summary["dead_letter"] <= total  # the rest, not all again
    metrics = table_rows(spark, cfg, "metrics", "unwritable")
    assert len({r.batch_id for r in metrics}) == len(metrics)
    assert sum(r.events_in for r in metrics) == total
    assert outputs(spark, cfg, "unwritable") == reference("wordcount", events,
                                                          cfg.groups.count, {"window_s": 1.0})


@pytest.fixture()
def tmpfs_home(tmp_path):
    """A runtime home whose warehouse is a 256 MiB tmpfs of its own, which a test can make
    read-only or fill up (the tests run as root: file modes stop no write). Skipped where
    this machine does not let the test mount one."""
    home = tmp_path / "home"
    warehouse = home / "warehouse"
    warehouse.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(warehouse)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs for the warehouse: {done.stderr.strip()}")
    try:
        yield home
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(warehouse)], capture_output=True)
        subprocess.run(["umount", "-l", str(warehouse)], capture_output=True)


def _remount(warehouse, mode: str) -> None:
    """``mount -o remount,<mode>``; a read-only remount waits while a file is open for
    writing (EBUSY), as an operator's would."""
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(["mount", "-o", f"remount,{mode}", str(warehouse)],
                              capture_output=True, text=True)
        if done.returncode == 0:
            return
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.05)


class _Full:
    """The warehouse's filesystem filled to its last byte, and kept full while it lasts (what
    the job deletes meanwhile, a staged file or a temporary one, is taken again at once), as
    with another writer on the same volume; :meth:`end` deletes the filler."""

    def __init__(self, warehouse) -> None:
        self.filler = warehouse / ".filler"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_full, daemon=True)

    def _top_up(self, f) -> None:
        for size in (1 << 20, 4096, 512):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def _keep_full(self) -> None:
        with open(self.filler, "ab", buffering=0) as f:
            while not self._stop.wait(0.05):
                self._top_up(f)

    def begin(self) -> None:
        with open(self.filler, "wb", buffering=0) as f:
            self._top_up(f)
        self._thread.start()

    def end(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.filler.unlink()


def _outages_mid_run(spark, platform_config, home, run_id: str,
                     outages: list[tuple[Callable[[], None], Callable[[], None]]],
                     ) -> list[list[str]]:
    """``keyshift run`` over 2,000 events in batches of 100; after its first batch, and again
    after the first batch that follows each recovery, the warehouse fails (an outage's
    ``begin``) for 20 s, then is back (its ``end``). For each outage the job must say once
    that it waits (while the outage lasts) and once that it goes on, in that order; it ends
    with exit 0, every record once (batch ids unique in metrics, key loads once per batch,
    group and engine) and the complex events of one uninterrupted operator. Returns, per
    outage, the job's "waiting" and "answers again" lines. One run for several outages: a
    job must ride out an outage after it has already ridden out another one, and the suite
    starts one driver instead of one per outage."""
    from engines_support import outputs, reference

    cfg = platform_config.model_copy(update={"home": str(home)})
    total = 2000
    topic = new_topic(cfg.kafka.bootstrap)
    events = produce_events(cfg.kafka.bootstrap, topic, "wordcount", total, skew="zipf:1.0",
                            keys=200)
    job = Run(cfg, topic, run_id, "--max-offsets", "100", "--params", '{"window_s": 1.0}')
    seen = 0  # lines read up to the last outage's end
    for begin, end in outages:
        assert job.wait_for_after(seen, "batch ", 300), "\n".join(job.lines[-40:])
        begin()
        began = time.monotonic()
        try:
            waited = job.wait_for_after(seen, "keyshift: waiting for the warehouse", 20)
            while time.monotonic() - began < 20:
                time.sleep(0.2)
        finally:
            end()
        assert waited, "\n".join(job.lines[-40:])  # said while the warehouse was still out
        assert job.wait_for_after(seen, "keyshift: the warehouse", 300, contains="answers again")
        seen = len(job.lines)
    summary = job.finish()
    waits = [x for x in job.lines if x.startswith("keyshift: waiting for the warehouse")]
    backs = [x for x in job.lines if "answers again" in x]
    print("\n".join([*waits, *backs]))
    assert len(waits) == len(backs) == len(outages), job.lines
    order = [job.lines.index(x) for pair in zip(waits, backs) for x in pair]
    assert order == sorted(order), job.lines  # wait, back, wait, back, ...
    assert not any(x.startswith("keyshift run:") for x in job.lines), job.lines
    assert summary["failed"] is False

    metrics = table_rows(spark, cfg, "metrics", run_id)
    assert len({r.batch_id for r in metrics}) == len(metrics), "a batch was recorded twice"
    assert sum(r.events_in for r in metrics) == total
    loads = [(r.batch_id, r.group, r.engine) for r in table_rows(spark, cfg, "key_loads", run_id)]
    assert loads and len(loads) == len(set(loads))
    got = outputs(spark, cfg, run_id)
    assert got and got == reference("wordcount", events, cfg.groups.count, {"window_s": 1.0})
    return [list(pair) for pair in zip(waits, backs)]


def test_a_read_only_then_a_full_warehouse_for_20_s_each_are_ridden_out(
        spark, platform_config, tmpfs_home):
    """Issue 26 item 3, both outages in one run: the warehouse's filesystem is remounted
    read-only for 20 s (EROFS for the Delta appends, the engines' state, the staged rows,
    Spark's checkpoint), and later it is full to its last byte for 20 s (ENOSPC), then the
    filler is deleted."""
    warehouse = tmpfs_home / "warehouse"
    full = _Full(warehouse)
    read_only, no_space = _outages_mid_run(
        spark, platform_config, tmpfs_home, "read-only-then-full",
        [(lambda: _remount(warehouse, "ro"), lambda: _remount(warehouse, "rw")),
         (full.begin, full.end)])
    assert "Read-only file system" in read_only[0], read_only
    assert "No space left on device" in no_space[0], no_space
