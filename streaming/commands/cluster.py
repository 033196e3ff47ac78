"""``keyshift cluster start|stop|status``: a Spark standalone cluster on this machine.

    keyshift cluster start --workers 2 --cores 1 --dir .keyshift/spark-cluster
    keyshift cluster start --port 7077 --ui-port 8080   # the same master URL every start
    KEYSHIFT_SPARK__MASTER=spark://127.0.0.1:PORT keyshift run ...
    keyshift cluster stop --dir .keyshift/spark-cluster

So a user can try the job on a real cluster (executors in other JVMs, their own dirs) before
deploying one. ``start`` leaves the daemons running detached and records their pids and
ports in ``<dir>/cluster.json``; ``status`` and ``stop`` read that file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from keyshift.cli import UsageError, add_json_options, json_indent
from keyshift.config import load_config

SUMMARY = "start, stop or check a local Spark standalone cluster"

_MEMORY = re.compile(r"^\d+[kmgtKMGT]?$")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "cluster", help=SUMMARY,
        description="A Spark standalone master and workers on 127.0.0.1, started from the "
        "installed pyspark; each worker has its own work and local dirs under --dir.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    start = actions.add_parser("start", help="start the daemons, detached")
    start.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    start.add_argument("--cores", type=int, default=1, help="cores per worker (default 1)")
    start.add_argument("--memory", default="2g",
                       help="memory per worker for executors, e.g. 2g (default 2g)")
    start.add_argument("--timeout", type=float, default=120.0,
                       help="seconds to wait for each daemon to come up (default 120)")
    start.add_argument("--port", type=int,
                       help="the master's port, 1024-65535 and free (default: a free one, new "
                       "at each start; fix it to keep spark.master the same)")
    start.add_argument("--ui-port", type=int,
                       help="the master's web UI port, 1024-65535 and free (default: a free one)")
    for action in (start, actions.add_parser("stop", help="stop the daemons and executors"),
                   actions.add_parser("status", help="workers alive, cores, applications")):
        action.add_argument("--dir", help="cluster folder: logs, worker dirs, cluster.json "
                            "(default: <home>/spark-cluster)")
        add_json_options(action)
    p.set_defaults(func=run)
    return p


def _check(args: argparse.Namespace) -> None:
    if args.workers < 1 or args.workers > 64:
        raise UsageError(f"--workers: must be in 1..64, got {args.workers}")
    if args.cores < 1 or args.cores > 1024:
        raise UsageError(f"--cores: must be in 1..1024, got {args.cores}")
    if not _MEMORY.match(args.memory):
        raise UsageError(f"--memory: expected a size like 512m or 2g, got {args.memory!r}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout: must be > 0, got {args.timeout}")
    if args.port is not None and args.port == args.ui_port:
        raise UsageError(f"--ui-port: must differ from --port, got {args.port} for both")


def _check_ports(args: argparse.Namespace) -> None:
    """Fixed ports that cannot be the master's: one line, before anything starts."""
    from keyshift.streaming.cluster import port_problem

    for flag, port in (("--port", args.port), ("--ui-port", args.ui_port)):
        if port is not None and (why := port_problem(port)):
            raise UsageError(f"{flag}: {why}")


def run(args: argparse.Namespace) -> int:
    from keyshift.streaming.cluster import ClusterError

    cfg = load_config(args.config)
    folder = Path(args.dir) if args.dir else cfg.home_path / "spark-cluster"
    try:
        if args.action == "start":
            _check(args)
            return _start(folder, args)
        if args.action == "stop":
            return _stop(folder, args)
        return _status(folder, args)
    except ClusterError as exc:
        if args.json:  # still one object on stdout for a script that reads it
            print(json.dumps({"error": str(exc), "dir": str(folder)}, indent=json_indent(args)))
        print(f"keyshift cluster {args.action}: {exc}", file=sys.stderr)
        return 1


def _start(folder: Path, args: argparse.Namespace) -> int:
    from keyshift.streaming.cluster import ClusterError, LocalCluster

    try:
        running = LocalCluster.load(folder)
    except ClusterError:
        running = None
    if running is not None:
        if running.master is not None and running.master.alive():
            for flag, asked, has in (("--port", args.port, running.master.port),
                                     ("--ui-port", args.ui_port, running.master.ui_port)):
                if asked is not None and asked != has:
                    raise UsageError(f"{flag}: the cluster in {folder} already runs with "
                                     f"{has}; stop it first to move it to {asked}")
            if args.json:
                print(json.dumps({"started": False, "already_running": True,
                                  "master_url": running.master_url, "ui_url": running.ui_url,
                                  "dir": str(folder)}, indent=json_indent(args)))
            else:
                print(f"cluster: already running at {running.master_url} ({folder})")
            return 0
        running.stop()  # a stale record: leftovers of a crashed cluster go first
        running.forget()
    _check_ports(args)
    cluster = LocalCluster(folder, workers=args.workers, cores=args.cores,
                           memory=args.memory, startup_timeout_s=args.timeout,
                           port=args.port, ui_port=args.ui_port)
    cluster.start()
    try:
        state = cluster.save()
    except BaseException:
        cluster.stop()  # a cluster nobody can find again must not keep running
        raise
    use = (f"KEYSHIFT_SPARK__MASTER={cluster.master_url} "
           f"KEYSHIFT_SPARK__CORES_MAX={args.workers * args.cores} keyshift run ...")
    if args.json:
        print(json.dumps({"started": True, "already_running": False,
                          "master_url": cluster.master_url, "ui_url": cluster.ui_url,
                          "dir": str(folder), "state": str(state), "workers": args.workers,
                          "cores": args.cores, "memory": args.memory, "use": use},
                         indent=json_indent(args)))
        return 0
    print(f"cluster: master {cluster.master_url} (web UI {cluster.ui_url}), "
          f"{args.workers} worker(s) x {args.cores} core(s), {args.memory} each; "
          f"state in {state}")
    print(f"  use it:  {use}")
    return 0


def _stop(folder: Path, args: argparse.Namespace) -> int:
    from keyshift.streaming.cluster import LocalCluster

    as_json, indent = args.json, json_indent(args)
    if not (folder / "cluster.json").is_file():
        print(json.dumps({"stopped": False, "dir": str(folder)}, indent=indent) if as_json
              else f"cluster: none recorded in {folder}")
        return 0
    cluster = LocalCluster.load(folder)
    url = cluster.master_url
    cluster.stop()
    left = cluster.processes()
    if not left:
        cluster.forget()
    print(json.dumps({"stopped": not left, "master_url": url, "left": left, "dir": str(folder)},
                     indent=indent) if as_json
          else f"cluster: stopped {url}" if not left
          else f"cluster: processes {left} did not stop")
    return 0 if not left else 1


def _status(folder: Path, args: argparse.Namespace) -> int:
    from keyshift.streaming.cluster import ClusterError, LocalCluster

    cluster = LocalCluster.load(folder)
    st: dict = {"master_url": cluster.master_url, "ui_url": cluster.ui_url, "dir": str(folder),
                "port": cluster._master().port, "ui_port": cluster._master().ui_port,
                "workers": len(cluster.worker_daemons)}
    try:
        state = cluster.state()
        st.update(healthy=state.get("status") == "ALIVE" and
                  len(cluster.alive_workers()) == len(cluster.worker_daemons),
                  alive_workers=cluster.alive_workers(), cores=state.get("cores"),
                  cores_used=state.get("coresused"),
                  applications=[a.get("name") for a in state.get("activeapps", [])])
    except ClusterError as exc:
        st.update(healthy=False, error=str(exc))
    if args.json:
        print(json.dumps(st, indent=json_indent(args)))
    elif st["healthy"]:
        print(f"cluster: healthy at {st['master_url']} (web UI {st['ui_url']}), "
              f"{len(st['alive_workers'])}/{st['workers']} workers alive, "
              f"{st['cores_used']}/{st['cores']} cores used, applications: "
              f"{', '.join(st['applications']) or 'none'}")
    else:
        why = st.get("error") or (f"{len(st['alive_workers'])}/{st['workers']} workers alive")
        print(f"cluster: not healthy: {why}", file=sys.stderr)
    return 0 if st["healthy"] else 1
