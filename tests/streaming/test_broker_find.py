"""``keyshift kafka stop`` finds the broker ``keyshift kafka status`` reports (issue 28 item
3), without Java: a stand-in process listens on the broker's port with a broker's command
line (``... kafka.Kafka <folder>/server.properties``), started from another home."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keyshift.cli import main
from keyshift.streaming import broker as broker_mod
from keyshift.streaming.broker import Broker, free_port

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="Linux /proc")

LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "time.sleep(600)\n")


def _listener(port: int, folder: Path) -> subprocess.Popen:
    """A process that listens on ``port`` with the command line of a broker in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.properties").write_text("# stand-in\n")
    proc = subprocess.Popen([sys.executable, "-c", LISTEN, str(port), "kafka.Kafka",
                             str(folder / "server.properties")], start_new_session=True)
    deadline = time.monotonic() + 30
    while broker_mod._listener_pid(port) != proc.pid:
        assert time.monotonic() < deadline and proc.poll() is None, "stand-in did not listen"
        time.sleep(0.05)
    return proc


@pytest.fixture()
def other_home(tmp_path, monkeypatch):
    """The CLI's view: home B (KEYSHIFT_HOME), run from a folder outside any project, while
    the broker on the port was started from home A."""
    port = free_port()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KEYSHIFT_CONFIG", raising=False)
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path / "b"))
    monkeypatch.setenv("KEYSHIFT_KAFKA__PORT", str(port))
    monkeypatch.setenv("KEYSHIFT_KAFKA__CONTROLLER_PORT", str(free_port()))
    # the stand-in speaks no Kafka: status's metadata round trip is faked, only that
    monkeypatch.setattr(broker_mod, "metadata", lambda *a, **k: {
        "cluster_id": "c", "brokers": 1, "topics": []})
    return port, tmp_path / "a" / "kafka"


def test_stop_finds_the_broker_status_reports_started_from_another_home(other_home, capsys):
    port, folder_a = other_home
    proc = _listener(port, folder_a)
    try:
        (folder_a / "broker.pid").write_text(str(proc.pid))
        assert main(["kafka", "status", "--json"]) == 0
        st = json.loads(capsys.readouterr().out)
        assert st["healthy"] and st["pid"] == proc.pid
        assert main(["kafka", "stop"]) == 0
        out = capsys.readouterr().out
        assert f"stopped (pid {proc.pid}, started from {folder_a})" in out
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert not (folder_a / "broker.pid").exists()
        # nothing listens any more: stop is idempotent
        assert main(["kafka", "stop"]) == 0
        assert "not running" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()


def test_stop_of_a_listener_keyshift_did_not_start_fails_and_leaves_it(other_home, capsys):
    port, folder_a = other_home
    proc = _listener(port, folder_a)  # no broker.pid names it: not ours
    try:
        assert main(["kafka", "status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["pid"] is None  # "not ours"
        assert main(["kafka", "stop"]) == 1
        err = capsys.readouterr().err
        assert f"not stopped: 127.0.0.1:{port} is served by process {proc.pid}" in err
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_this_homes_pid_file_is_stopped_as_before(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True)
    try:
        b = Broker(host="127.0.0.1", port=free_port(), controller_port=free_port(),
                   folder=tmp_path / "kafka", version="4.1.1", cache=tmp_path / "cache")
        b.folder.mkdir()
        b.pid_file.write_text(str(proc.pid))
        assert b.find() == (proc.pid, b.folder)
        assert b.stop() == f"stopped (pid {proc.pid})"
        assert not b.pid_file.exists() and b.find() is None
        assert b.stop() == "not running"
    finally:
        proc.kill()
        proc.wait()
