"""``keyshift cluster start|stop|status``: a Spark standalone cluster on this machine.

    keyshift cluster start --workers 2 --cores 1 --dir .keyshift/spark-cluster
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

from keyshift.cli import UsageError
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
    for action in (start, actions.add_parser("stop", help="stop the daemons and executors"),
                   actions.add_parser("status", help="workers alive, cores, applications")):
        action.add_argument("--dir", help="cluster folder: logs, worker dirs, cluster.json "
                            "(default: <home>/spark-cluster)")
        if action is not start:
            action.add_argument("--json", action="store_true", help="print JSON")
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


def run(args: argparse.Namespace) -> int:
    from keyshift.streaming.cluster import ClusterError

    cfg = load_config(args.config)
    folder = Path(args.dir) if args.dir else cfg.home_path / "spark-cluster"
    try:
        if args.action == "start":
            _check(args)
            return _start(folder, args)
        if args.action == "stop":
            return _stop(folder, args.json)
        return _status(folder, args.json)
    except ClusterError as exc:
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
            print(f"cluster: already running at {running.master_url} ({folder})")
            return 0
        running.stop()  # a stale record: leftovers of a crashed cluster go first
        running.forget()
    cluster = LocalCluster(folder, workers=args.workers, cores=args.cores,
                           memory=args.memory, startup_timeout_s=args.timeout)
    cluster.start()
    try:
        state = cluster.save()
    except BaseException:
        cluster.stop()  # a cluster nobody can find again must not keep running
        raise
    print(f"cluster: master {cluster.master_url} (web UI {cluster.ui_url}), "
          f"{args.workers} worker(s) x {args.cores} core(s), {args.memory} each; "
          f"state in {state}")
    print(f"  use it:  KEYSHIFT_SPARK__MASTER={cluster.master_url} "
          f"KEYSHIFT_SPARK__CORES_MAX={args.workers * args.cores} keyshift run ...")
    return 0


def _stop(folder: Path, as_json: bool) -> int:
    from keyshift.streaming.cluster import LocalCluster

    if not (folder / "cluster.json").is_file():
        print(json.dumps({"stopped": False, "dir": str(folder)}) if as_json
              else f"cluster: none recorded in {folder}")
        return 0
    cluster = LocalCluster.load(folder)
    url = cluster.master_url
    cluster.stop()
    left = cluster.processes()
    if not left:
        cluster.forget()
    print(json.dumps({"stopped": not left, "master_url": url, "left": left}) if as_json
          else f"cluster: stopped {url}" if not left
          else f"cluster: processes {left} did not stop")
    return 0 if not left else 1


def _status(folder: Path, as_json: bool) -> int:
    from keyshift.streaming.cluster import ClusterError, LocalCluster

    cluster = LocalCluster.load(folder)
    st: dict = {"master_url": cluster.master_url, "ui_url": cluster.ui_url, "dir": str(folder),
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
    if as_json:
        print(json.dumps(st))
    elif st["healthy"]:
        print(f"cluster: healthy at {st['master_url']} (web UI {st['ui_url']}), "
              f"{len(st['alive_workers'])}/{st['workers']} workers alive, "
              f"{st['cores_used']}/{st['cores']} cores used, applications: "
              f"{', '.join(st['applications']) or 'none'}")
    else:
        why = st.get("error") or (f"{len(st['alive_workers'])}/{st['workers']} workers alive")
        print(f"cluster: not healthy: {why}", file=sys.stderr)
    return 0 if st["healthy"] else 1
