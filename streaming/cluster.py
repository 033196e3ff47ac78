"""A Spark standalone cluster on this machine, started from the pip-installed Spark.

Why: the engines must be correct on any task placement (docs/design.md, "Cluster-safe state"),
and ``local[N]`` cannot show that: one JVM, one local dir, no executor ever lost. A real
standalone cluster, one master and N workers, each worker with its own work and local dirs,
is the smallest setup where a task can land on another executor, and where a worker can be
killed while a job runs. pyspark ships Spark's jars and ``bin/spark-class``, so the daemons
run from the installed package (SPARK_HOME = the pyspark package folder), with no download.

Every daemon listens on free ports of 127.0.0.1 only (RPC and web UI; ``SPARK_LOCAL_IP`` keeps
the UIs and the executors on loopback too) and runs in its own process group: the executors a
worker launches stay in its group, so :meth:`LocalCluster.kill_worker` takes the worker and its
executors down at once, as a lost host would. Each daemon logs to ``<folder>/<name>.log``;
a daemon that does not come up within the timeout is a :class:`ClusterError` with its log tail.

The master's web UI serves its state as JSON at ``/json/`` (``aliveworkers``, ``workers``,
``activeapps``): readiness and liveness are read from there, never from log lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyspark

from .broker import free_port

HOST = "127.0.0.1"
STATE_FILE = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STOP_GRACE_S = 10.0


class ClusterError(RuntimeError):
    """A daemon did not start, or the cluster cannot be reached; the message says why."""


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (jars/, bin/spark-class)."""
    return Path(pyspark.__file__).resolve().parent


def spark_class() -> Path:
    path = spark_home() / "bin" / "spark-class"
    if not path.is_file():
        raise ClusterError(f"{path} is missing: is pyspark installed with its bin/ scripts?")
    return path


@dataclass
class Daemon:
    """One master or worker JVM: where it listens, where it logs, its process (group) id."""

    name: str
    port: int
    ui_port: int
    log: str
    pid: int = 0
    work_dir: str = ""
    local_dir: str = ""
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        """True while the daemon's JVM runs (a reaped or zombie child counts as dead)."""
        if self._proc is not None:
            return self._proc.poll() is None
        if not self.pid:
            return False
        return _is_spark_daemon(self.pid)

    def public(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not f.name.startswith("_")}


def _is_spark_daemon(pid: int) -> bool:
    """Whether ``pid`` still is a Spark deploy daemon (guards against a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and b"org.apache.spark.deploy." in cmdline


def group_members(pgids: set[int]) -> list[int]:
    """Pids of live (non-zombie) processes in the given process groups, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z" and int(fields[2]) in pgids:
            out.append(int(entry))
    return sorted(out)


def _tail(path: str | Path, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


class LocalCluster:
    """A standalone master and ``workers`` workers on 127.0.0.1, under ``folder``.

    Parameters are kept in the constructor, nothing starts before :meth:`start`. ``cores``
    and ``memory`` are per worker (Spark's ``--cores``/``--memory``); ``daemon_memory`` is
    the heap of the master and worker JVMs themselves (``SPARK_DAEMON_MEMORY``). ``python``
    is the interpreter the executors' Python workers run (``PYSPARK_PYTHON``; default this
    interpreter, i.e. the venv's). ``port`` and ``ui_port`` fix the master's RPC and web UI
    ports (default: free ones, new at each start), so a ``spark.master`` URL stays valid
    across restarts. Use as a context manager, or call :meth:`stop`.
    """

    def __init__(self, folder: str | os.PathLike[str], workers: int = 2, cores: int = 1,
                 memory: str = "2g", daemon_memory: str = "512m",
                 startup_timeout_s: float = 90.0, python: str | None = None,
                 port: int | None = None, ui_port: int | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers: must be >= 1, got {workers}")
        if cores < 1:
            raise ValueError(f"cores: must be >= 1, got {cores}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s: must be > 0, got {startup_timeout_s}")
        self.folder = Path(folder).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.startup_timeout_s = startup_timeout_s
        self.python = python or sys.executable
        self.port, self.ui_port = port, ui_port
        self.master: Daemon | None = None
        self.worker_daemons: list[Daemon] = []
        self._groups: set[int] = set()  # every process group started, kept after stop

    # --- addresses -------------------------------------------------------------------
    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self._master().port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self._master().ui_port}"

    def _master(self) -> Daemon:
        if self.master is None:
            raise ClusterError("the cluster is not started")
        return self.master

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Start the master, then the workers; return once every worker has registered."""
        if self.master is not None:
            raise ClusterError(f"the cluster in {self.folder} is already started")
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "conf").mkdir(exist_ok=True)  # SPARK_CONF_DIR: no stray spark-env.sh
        try:
            self.master = self._launch(
                "master", [MASTER_CLASS], work_dir="", local_dir="", port=self.port,
                ui_port=self.ui_port)
            self._wait_master()
            for i in range(self.workers):
                work = self.folder / f"worker-{i}" / "work"
                local = self.folder / f"worker-{i}" / "local"
                work.mkdir(parents=True, exist_ok=True)
                local.mkdir(parents=True, exist_ok=True)
                self.worker_daemons.append(self._launch_worker(f"worker-{i}", work, local))
            self._wait_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _env(self, work_dir: str, local_dir: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.folder / "conf"),
            "SPARK_LOCAL_IP": HOST,  # web UIs and executors bind to loopback, not 0.0.0.0
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "PYSPARK_PYTHON": self.python,
        })
        # Inherited settings of another Spark would point the daemons elsewhere.
        for name in ("SPARK_WORKER_DIR", "SPARK_LOCAL_DIRS", "SPARK_MASTER_OPTS",
                     "SPARK_WORKER_OPTS", "SPARK_ENV_LOADED", "PYSPARK_GATEWAY_PORT",
                     "PYSPARK_GATEWAY_SECRET"):
            env.pop(name, None)
        # The REST submission server listens on a fixed port (6066) when on: two clusters on
        # one machine would collide, and nothing here submits through it.
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        if work_dir:
            env["SPARK_WORKER_DIR"] = work_dir
            env["SPARK_LOCAL_DIRS"] = local_dir
        return env

    def _launch_worker(self, name: str, work: str | Path, local: str | Path) -> Daemon:
        return self._launch(
            name, [WORKER_CLASS, "--cores", str(self.cores), "--memory", self.memory,
                   "--work-dir", str(work)],
            work_dir=str(work), local_dir=str(local), master=True)

    def _launch(self, name: str, args: list[str], work_dir: str, local_dir: str,
                master: bool = False, port: int | None = None,
                ui_port: int | None = None) -> Daemon:
        port = port or free_port(HOST)
        ui_port = ui_port or free_port(HOST)
        while ui_port == port:
            ui_port = free_port(HOST)
        log = self.folder / f"{name}.log"
        cmd = [str(spark_class()), args[0], "--host", HOST, "--port", str(port),
               "--webui-port", str(ui_port), *args[1:]]
        if master:
            cmd.append(self.master_url)
        with open(log, "ab") as out:
            # Own session = own process group: kill_worker kills the worker's executors too,
            # and a detached cluster outlives the command that started it.
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self._env(work_dir, local_dir), cwd=str(self.folder),
                start_new_session=True)
        self._groups.add(proc.pid)
        return Daemon(name=name, port=port, ui_port=ui_port, log=str(log), pid=proc.pid,
                      work_dir=work_dir, local_dir=local_dir, _proc=proc)

    def _deadline_error(self, daemon: Daemon, what: str) -> ClusterError:
        state = "exited" if not daemon.alive() else f"still running, pid {daemon.pid}"
        return ClusterError(
            f"Spark {daemon.name} did not {what} within {self.startup_timeout_s:.0f}s "
            f"({state}); last lines of {daemon.log}:\n{_tail(daemon.log)}")

    def _wait_master(self) -> None:
        master = self._master()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not master.alive():
                raise self._deadline_error(master, "start")
            try:
                if self.state().get("status") == "ALIVE":
                    return
            except ClusterError:
                pass
            time.sleep(0.5)
        raise self._deadline_error(master, "start")

    def _wait_workers(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            for w in self.worker_daemons:
                if not w.alive():
                    raise self._deadline_error(w, "register with the master")
            alive = set(self.alive_workers())
            if len(alive) == len(self.worker_daemons):
                return
            if time.monotonic() >= deadline:
                late = next(w for i, w in enumerate(self.worker_daemons) if i not in alive)
                raise self._deadline_error(late, "register with the master")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM every daemon's process group, SIGKILL what is left after a grace period."""
        daemons = [d for d in (*self.worker_daemons, self.master) if d is not None and d.pid]
        # Our own children are ours for sure; pids read back from a state file only while
        # their group still runs Spark.
        pgids = {d.pid for d in daemons if d._proc is not None or group_is_spark(d.pid)}
        for pgid in pgids:
            _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while group_members(pgids) and time.monotonic() < deadline:
            for d in daemons:
                d.alive()  # reaps our own children so they do not linger as zombies
            time.sleep(0.2)
        for pgid in pgids:
            _signal_group(pgid, signal.SIGKILL)
        for d in daemons:
            if d._proc is not None:
                try:
                    d._proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        self.master = None
        self.worker_daemons = []

    def __enter__(self) -> LocalCluster:
        return self.start() if self.master is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- faults and status -----------------------------------------------------------
    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and the executors it launched (its whole process group)."""
        if not 0 <= i < len(self.worker_daemons):
            raise IndexError(f"worker: {i} is not in 0..{len(self.worker_daemons) - 1}")
        w = self.worker_daemons[i]
        _signal_group(w.pid, signal.SIGKILL)
        if w._proc is not None:
            w._proc.wait(timeout=STOP_GRACE_S)

    def restart_worker(self, i: int) -> None:
        """Start worker ``i`` again (new ports, same work and local dirs) after a kill, and
        wait until it has registered: a fault test leaves a shared cluster whole again."""
        if not 0 <= i < len(self.worker_daemons):
            raise IndexError(f"worker: {i} is not in 0..{len(self.worker_daemons) - 1}")
        old = self.worker_daemons[i]
        if old.alive():
            raise ClusterError(f"{old.name} is still running (pid {old.pid})")
        self.worker_daemons[i] = self._launch_worker(old.name, old.work_dir, old.local_dir)
        self._wait_workers()

    def state(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The master's own view (its web UI's JSON): workers, cores, applications."""
        url = f"{self.ui_url}/json/"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                return json.load(resp)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ClusterError(f"the Spark master's UI at {url} does not answer: {exc}") from None

    def alive_workers(self) -> list[int]:
        """Indices of this cluster's workers that the master lists as ALIVE right now."""
        ports = {w.port: i for i, w in enumerate(self.worker_daemons)}
        out = [ports[w["port"]] for w in self.state().get("workers", [])
               if w.get("state") == "ALIVE" and w.get("port") in ports]
        return sorted(out)

    def processes(self) -> list[int]:
        """Pids of every live process the cluster started (daemons, executors, Python
        workers), also after :meth:`stop`: an empty list then means nothing was left behind."""
        daemons = [d for d in (*self.worker_daemons, self.master) if d is not None and d.pid]
        for d in daemons:
            d.alive()
        return group_members(self._groups | {d.pid for d in daemons})

    # --- detached use (keyshift cluster start|stop|status) -------------------------------
    def save(self) -> Path:
        """Write pids and ports to ``<folder>/cluster.json`` (for a later stop or status)."""
        path = self.folder / STATE_FILE
        path.write_text(json.dumps({
            "master_url": self.master_url, "ui_url": self.ui_url,
            "cores": self.cores, "memory": self.memory, "python": self.python,
            "master": self._master().public(),
            "workers": [w.public() for w in self.worker_daemons],
        }, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> LocalCluster:
        """The cluster a detached start recorded in ``folder``; ClusterError when none."""
        path = Path(folder).resolve() / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except OSError:
            raise ClusterError(f"no cluster state in {path} (was 'keyshift cluster start "
                               f"--dir {folder}' run?)") from None
        except ValueError as exc:
            raise ClusterError(f"{path} is not valid JSON: {exc}") from None
        cluster = cls(folder, workers=len(data["workers"]), cores=data["cores"],
                      memory=data["memory"], python=data["python"])
        cluster.master = Daemon(**data["master"])
        cluster.worker_daemons = [Daemon(**w) for w in data["workers"]]
        cluster._groups = {d.pid for d in (cluster.master, *cluster.worker_daemons)
                           if group_is_spark(d.pid)}
        return cluster

    def forget(self) -> None:
        (self.folder / STATE_FILE).unlink(missing_ok=True)


PORTS = (1024, 65535)


def port_problem(port: int, host: str = HOST) -> str | None:
    """Why ``port`` cannot be a daemon's fixed port on ``host`` (None: it can): outside
    1024..65535 (below needs root), or something listens on it or holds it already."""
    import socket

    low, high = PORTS
    if not low <= port <= high:
        return f"must be in {low}..{high}, got {port}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as the JVM binds (SO_REUSEADDR): a port whose last connections linger in TIME_WAIT
        # after a stop is free for a new master, one that something listens on is not
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return f"{host}:{port} is taken ({exc.strerror or exc})"
    return None


def group_is_spark(pgid: int) -> bool:
    """Whether a process group still holds Spark processes: a pid read back from a state
    file may have been reused by an unrelated program, which must never be signalled."""
    for pid in group_members({pgid}):
        try:
            if b"org.apache.spark." in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
