"""``keyshift airflow standalone|test|env``: Airflow on this machine, pointed at keyshift.

Airflow reads everything from ``AIRFLOW_*`` variables; getting them right by hand (home,
DAGs folder, SQLite store, port, examples off, and a KEYSHIFT_HOME that the task processes
resolve to the *same* warehouse as the person who started it) is the error-prone part, so
this command computes them once from the keyshift config and runs Airflow's own CLI:

* ``standalone`` — scheduler, DAG processor, triggerer and API server/UI on localhost;
  prints the UI address and the admin login (read from the simple auth manager's generated
  password file) once the health endpoint answers; Ctrl-C stops everything.
* ``test DAG_ID`` — one DAG run in-process (``airflow dags test``), no scheduler needed.
* ``env`` — the variables as ``export`` lines, to use the ``airflow`` CLI on the same home.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from keyshift.cli import UsageError
from keyshift.config import Config, ConfigError, load_config

SUMMARY = "run Airflow here with keyshift's DAGs, or one DAG once"

DAG_IDS = ("keyshift_nightly_retrain", "keyshift_baseline_partitions", "keyshift_table_maintenance")
ADMIN = "admin"
HEALTH_PATH = "/api/v2/monitor/health"


def dags_folder() -> Path:
    """The repository's ``dags/`` (the package is installed editable from the repo)."""
    from keyshift import jobs

    return Path(jobs.__file__).resolve().parents[1] / "dags"


def airflow_home(cfg: Config) -> Path:
    return cfg.home_path / "airflow"


def airflow_env(cfg: Config, port: int | None = None) -> dict[str, str]:
    """The ``AIRFLOW_*`` and ``KEYSHIFT_*`` variables of a local Airflow for this config."""
    home = airflow_home(cfg)
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file(cfg)),
        "AIRFLOW__API__PORT": str(port or cfg.airflow.port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://localhost:{port or cfg.airflow.port}",
        # the log servers of task and triggerer logs (airflow.*_log_server_port)
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(cfg.airflow.worker_log_server_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(cfg.airflow.trigger_log_server_port),
        # Tasks run in child processes, possibly in another working directory: pin the
        # keyshift home (and through it the warehouse and MLflow store) absolutely.
        "KEYSHIFT_HOME": str(cfg.home_path),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # MLflow writes its INFO lines ("Successfully registered model ...") to stderr
        # through a handler of its own, and Airflow logs a task's stderr as ERROR: a green
        # retrain showed eight red lines. Unconfigured, MLflow's loggers propagate to the
        # task's logging at their own levels. Its usage telemetry stays off.
        "MLFLOW_CONFIGURE_LOGGING": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }


def password_file(cfg: Config) -> Path:
    return airflow_home(cfg) / "simple_auth_manager_passwords.json.generated"


def read_password(cfg: Config) -> str | None:
    """The admin password Airflow's simple auth manager generated, once it has."""
    path = password_file(cfg)
    try:
        return json.loads(path.read_text()).get(ADMIN)
    except (OSError, ValueError):
        return None


def airflow_bin() -> str:
    exe = Path(sys.executable).with_name("airflow")
    if exe.exists():
        return str(exe)
    found = shutil.which("airflow")
    if not found:
        raise UsageError("airflow: the 'airflow' command is not installed (pip install "
                         "'keyshift[airflow]')")
    return found


def healthy(port: int, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(  # noqa: S310 (localhost only)
            f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=timeout_s
        ) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def paused_hint() -> str:
    """What a first-time user needs before triggering: Airflow creates DAGs paused, and a run
    triggered on a paused DAG sits queued without saying why."""
    return ("DAGs start paused: a run you trigger waits, queued, until its DAG is unpaused "
            "(the toggle beside its name in the UI, or: eval \"$(keyshift airflow env)\"; "
            + "; ".join(f"airflow dags unpause {d}" for d in DAG_IDS) + ")")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("airflow", help=SUMMARY)
    cmd = p.add_subparsers(dest="airflow_command", metavar="ACTION", required=True)
    s = cmd.add_parser("standalone", help="start Airflow (UI, scheduler) on localhost")
    s.add_argument("--port", type=int, default=None, help="UI port (default: airflow.port)")
    s.add_argument("--ready-timeout-s", type=float, default=300.0,
                   help="give up when the UI is not healthy after this long")
    s.add_argument("--exit-when-ready", action="store_true",
                   help="stop again once the UI is healthy (a smoke test of the setup)")
    s.set_defaults(func=run_standalone)
    t = cmd.add_parser("test", help="run one DAG once, in-process (airflow dags test)")
    t.add_argument("dag_id", choices=DAG_IDS, metavar="DAG_ID", help=f"one of {', '.join(DAG_IDS)}")
    t.add_argument("--date", default=None, help="logical date YYYY-MM-DD (default: now)")
    t.add_argument("--conf", default=None, help='run params as JSON, e.g. \'{"engines": 8}\'')
    t.set_defaults(func=run_test)
    e = cmd.add_parser("env", help="print the Airflow environment as export lines")
    e.set_defaults(func=run_env)
    return p


def _cfg(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _environ(env: dict[str, str]) -> dict[str, str]:
    """The caller's environment plus ours; standalone starts its parts as ``airflow`` from
    PATH, so this interpreter's bin folder goes first."""
    out = dict(os.environ)
    out.update(env)
    out["PATH"] = os.pathsep.join([str(Path(airflow_bin()).parent), out.get("PATH", "")])
    return out


def run_env(args: argparse.Namespace) -> int:
    for key, value in airflow_env(_cfg(args)).items():
        print(f"export {key}={value!r}".replace("'", '"'))
    return 0


def migrate(cfg: Config, env: dict[str, str]) -> None:
    """Create or upgrade the SQLite metadata store (idempotent, a few seconds)."""
    airflow_home(cfg).mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([airflow_bin(), "db", "migrate"], env=_environ(env),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UsageError(f"airflow db migrate failed: {tail[0][:300]}")


def run_test(args: argparse.Namespace) -> int:
    cfg = _cfg(args)
    env = airflow_env(cfg)
    if args.conf:
        try:
            json.loads(args.conf)
        except ValueError as exc:
            raise UsageError(f"conf: not JSON ({exc})") from None
    migrate(cfg, env)
    cmd = [airflow_bin(), "dags", "test", args.dag_id]
    if args.date:
        cmd.append(args.date)
    if args.conf:
        cmd += ["--conf", args.conf]
    return subprocess.run(cmd, env=_environ(env), check=False).returncode


def run_standalone(args: argparse.Namespace) -> int:
    cfg = _cfg(args)
    port = args.port or cfg.airflow.port
    if not 1 <= port <= 65535:
        raise UsageError(f"port: must be in 1..65535, got {port}")
    if healthy(port, timeout_s=1.0):
        raise UsageError(f"port: something already serves Airflow on {port} (use --port)")
    env = airflow_env(cfg, port)
    migrate(cfg, env)
    log_path = airflow_home(cfg) / "standalone.log"
    print(f"starting Airflow standalone (home {airflow_home(cfg)}, DAGs {dags_folder()}); "
          f"logs: {log_path}", flush=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([airflow_bin(), "standalone"], env=_environ(env),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # A SIGTERM (from a supervisor, or `timeout`) must stop Airflow too, not orphan it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _serve(proc, cfg, port, args.ready_timeout_s, args.exit_when_ready, log_path)
    finally:
        _stop(proc)


def _serve(proc: subprocess.Popen, cfg: Config, port: int, timeout_s: float,
           exit_when_ready: bool, log_path: Path) -> int:
    deadline = time.monotonic() + timeout_s
    while not healthy(port):
        if proc.poll() is not None:
            print(f"keyshift airflow: Airflow exited with status {proc.returncode} before the "
                  f"UI came up; see {log_path}", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"keyshift airflow: the UI on port {port} was not healthy after "
                  f"{timeout_s:.0f}s; see {log_path}", file=sys.stderr)
            return 1
        time.sleep(1.0)
    password = read_password(cfg) or f"(see {password_file(cfg)})"
    print(f"Airflow UI: http://localhost:{port}\nlogin: {ADMIN} / {password}\n"
          f"DAGs: {', '.join(DAG_IDS)}\n{paused_hint()}", flush=True)
    if exit_when_ready:
        return 0
    print("Ctrl-C stops Airflow.", flush=True)
    return proc.wait()


def _stop(proc: subprocess.Popen, grace_s: float = 45.0) -> None:
    """Stop the whole process group Airflow started (scheduler, API server, triggerer).

    The parts outlive ``airflow standalone`` by several seconds while they shut down, so
    wait for the group to empty and only then return; SIGKILL what is left after the grace.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is None:
            time.sleep(0.5)
            continue
        try:
            os.killpg(proc.pid, 0)  # anyone left in the group?
        except ProcessLookupError:
            return
        time.sleep(0.5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
