"""``keyshift mlflow ui``: MLflow's own UI on the project's model store.

A reviewer promotes forecasters in the MLflow registry (docs/models.md, "What a reviewer sees
in MLflow"); the store is wherever the configuration puts it (``mlflow.tracking_uri``, by
default a SQLite file in the keyshift home, artifacts beside it), and ``mlflow ui`` started by
hand opens an empty ``./mlruns`` instead. This command starts it on the configured store and
artifact root, bound to 127.0.0.1, with MLflow's telemetry off. ``--print`` prints the command
instead of running it (for a service unit or another host).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from keyshift.cli import UsageError

SUMMARY = "MLflow's UI on the project's model store"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("mlflow", help=SUMMARY, description=(
        "MLflow's UI on the configured tracking store and artifact root (mlflow.tracking_uri,"
        " by default the SQLite file in the keyshift home), bound to 127.0.0.1, with MLflow's"
        " telemetry off: where a reviewer promotes forecasters."))
    cmd = p.add_subparsers(dest="mlflow_command", metavar="ACTION", required=True)
    ui = cmd.add_parser("ui", help="serve MLflow's UI of the configured tracking store")
    ui.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    ui.add_argument("--print", dest="print_only", action="store_true",
                    help="print the command (one line) and exit")
    ui.set_defaults(func=run_ui)
    return p


def ui_command(tracking_uri: str, artifact_root: Path, port: int) -> list[str]:
    """The ``mlflow ui`` command line for a store (the console script of this interpreter's
    environment first, so the pinned MLflow serves the store it wrote)."""
    exe = Path(sys.executable).with_name("mlflow")
    mlflow = str(exe) if exe.exists() else (shutil.which("mlflow") or "mlflow")
    return [mlflow, "ui", "--backend-store-uri", tracking_uri,
            "--default-artifact-root", artifact_root.as_uri(),
            "--host", "127.0.0.1", "--port", str(port)]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_ui(args: argparse.Namespace) -> int:
    from keyshift.config import ConfigError, load_config

    if not 1024 <= args.port <= 65535:
        raise UsageError(f"--port: must be in 1024..65535, got {args.port}")
    try:
        cfg = load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    cmd = ui_command(cfg.mlflow_tracking_uri, cfg.mlflow_artifact_root, args.port)
    if args.print_only:
        print(shlex.join(cmd))
        return 0
    if not _port_free(args.port):
        raise UsageError(f"--port: {args.port} is in use on 127.0.0.1; pick another")
    if not cfg.mlflow.tracking_uri and not (cfg.home_path / "mlflow.db").exists():
        print(f"keyshift: no model store yet at {cfg.mlflow_tracking_uri} (nothing trained); "
              "the UI starts empty", file=sys.stderr)
    print(f"MLflow UI of {cfg.mlflow_tracking_uri} at http://127.0.0.1:{args.port}/ "
          "(Ctrl-C stops it)", flush=True)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0
    except FileNotFoundError:
        raise UsageError("mlflow: the 'mlflow' command is not installed (pip install "
                         "'keyshift[models]')") from None
