"""A single-node KRaft Kafka broker on localhost, run from jars cached from Maven Central.

Why not a container or a downloaded tarball: the machine reaches Maven Central only, and
``kafka_2.13`` with its runtime dependencies is exactly a broker. The broker runs as one
``java -cp`` process in combined broker+controller mode (static quorum of one voter), with
its data, ``server.properties``, pid file and log under one folder. Every failure mode the
user can hit (no Java, no Maven, port taken, broker dies on start) ends in a
:class:`BrokerError` with one readable sentence, and every wait has a deadline.

The clients' side (security options, metadata, topics, offsets) is
:mod:`keyshift.streaming.kafka_client`; the broker can offer a SASL_PLAINTEXT listener with
PLAIN for one user (the controller listener stays PLAINTEXT on localhost), and SSL /
SASL_SSL listeners beside it from a PEM keystore (issue 26 item 4).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshift.config import Config
from keyshift.lakehouse.jars import JarResolutionError, cache_dir, resolve

from .kafka_client import BrokerError, jaas_line, metadata

log = logging.getLogger(__name__)

LOG4J_SLF4J = "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"
HEAP = "-Xmx512m"



def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 (22 characters).

    Like Kafka's own ``Uuid.randomUuid()``, an id starting with '-' is drawn again: the
    storage tool's argument parser would read it as an option (1 start in 64 failed so).
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid

@dataclass(frozen=True)
class Broker:
    """Where one broker lives: its ports and its folder (data, config, pid, log)."""

    host: str
    port: int
    controller_port: int
    folder: Path
    version: str
    cache: Path
    startup_timeout_s: float = 60.0
    # (user, password): the client listener is SASL_PLAINTEXT with PLAIN for this one user
    sasl_plain: tuple[str, str] | None = None
    # TLS listeners besides the client listener (which stays PLAINTEXT or SASL_PLAINTEXT and
    # carries the broker's own connections): ((protocol, port), ...) with protocol SSL or
    # SASL_SSL (PLAIN for the ``sasl_plain`` user), and the PEM file holding the broker's
    # unencrypted PKCS#8 private key and its certificate chain (``ssl.keystore.type=PEM``,
    # Kafka >= 2.7). Not offered by ``keyshift kafka start``: the TLS tests start it so.
    tls_listeners: tuple[tuple[str, int], ...] = ()
    tls_keystore: Path | None = None

    @classmethod
    def from_config(cls, cfg: Config, folder: Path | None = None) -> Broker:
        """The local broker of ``cfg``; with ``kafka.security_protocol = SASL_PLAINTEXT`` and
        ``sasl_mechanism = PLAIN`` its listener asks for the configured user."""
        k = cfg.kafka
        sasl = None
        if k.security_protocol == "SASL_PLAINTEXT" and k.sasl_mechanism == "PLAIN":
            sasl = (k.sasl_username, k.sasl_password.get_secret_value())
        return cls(
            host=k.host, port=k.port, controller_port=k.controller_port,
            folder=Path(folder) if folder else cfg.home_path / "kafka",
            version=k.version, cache=cfg.cache_path / "jars",
            startup_timeout_s=k.startup_timeout_s, sasl_plain=sasl,
        )

    def __repr__(self) -> str:  # the dataclass repr would print the password
        sasl = "" if self.sasl_plain is None else f", sasl_plain=({self.sasl_plain[0]!r}, ***)"
        tls = "".join(f", {proto}:{port}" for proto, port in self.tls_listeners)
        return f"Broker({self.bootstrap!r}{tls}, folder={str(self.folder)!r}{sasl})"

    @property
    def security(self) -> dict[str, Any]:
        """kafka-python settings to talk to this broker's client listener."""
        if self.sasl_plain is None:
            return {}
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": self.sasl_plain[0],
                "sasl_plain_password": self.sasl_plain[1]}

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.folder / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def properties_file(self) -> Path:
        return self.folder / "server.properties"

    # --- life cycle -----------------------------------------------------------------
    def start(self) -> str:
        """Start the broker unless it is already healthy; returns what happened."""
        if self.sasl_plain is not None:
            check_sasl_plain_user(*self.sasl_plain)
        # a closed port is answered at once; the client's own "no broker" takes its whole
        # timeout (3 s of every start)
        listening = _port_in_use(self.host, self.port)
        if listening and self.healthy(timeout_s=3):
            found = self.find()
            return f"already running at {self.bootstrap} (pid {found[0] if found else 'unknown'})"
        pid = self.pid()
        if pid is not None:  # our process is alive but not answering: still starting up?
            if self._wait_healthy(pid, self.startup_timeout_s):
                return f"already running at {self.bootstrap} (pid {pid})"
            raise BrokerError(
                f"broker process {pid} is alive but does not answer on {self.bootstrap}; "
                f"see {self.log_file} or run 'keyshift kafka stop'"
            )
        self._check_tls()
        java = _java()
        ports = [(port, f"kafka.{name} {port}", f"set KEYSHIFT_KAFKA__{name.upper()} to "
                  "another port") for name, port in (("port", self.port),
                                                     ("controller_port", self.controller_port))]
        ports += [(port, f"the {proto} listener's port {port}", "choose another port")
                  for proto, port in self.tls_listeners]
        for port, where, fix in ports:
            # the client port was probed above: no second connection to a stranger's socket
            if listening if port == self.port else _port_in_use(self.host, port):
                raise BrokerError(
                    f"{where} on {self.host} is already taken by another process "
                    f"(not a keyshift broker); free it or {fix}"
                )
        classpath = self.jars()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if not (self.data_dir / "meta.properties").is_file():
            self._format(java, classpath)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                [java, HEAP, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
                 f"-Dkafka.logs.dir={self.folder}",
                 "-cp", classpath, "kafka.Kafka", str(self.properties_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.folder,
            )
        self.pid_file.write_text(str(proc.pid))
        if not self._wait_healthy(proc.pid, self.startup_timeout_s, proc):
            self.stop()
            raise BrokerError(
                f"broker did not become healthy on {self.bootstrap} within "
                f"{self.startup_timeout_s:.0f}s; last log lines:\n{self._tail()}"
            )
        return f"started at {self.bootstrap} (pid {proc.pid}, data in {self.data_dir})"

    def stop(self, timeout_s: float = 30.0) -> str:
        """SIGTERM (a clean controlled shutdown), then SIGKILL if it does not exit in time.

        The broker is found as :meth:`status` finds it, by its address: this folder's pid
        file, else the keyshift broker listening on the port (started from another home).
        Nothing listening is "not running"; a listener keyshift did not start is a
        :class:`BrokerError` (it is not stopped), never a quiet "not running"."""
        found = self.find()
        if found is None:
            self.pid_file.unlink(missing_ok=True)
            listener = _listener_pid(self.port)
            if listener is not None or _port_in_use(self.host, self.port):
                who = f"process {listener}" if listener is not None else "a process"
                raise BrokerError(
                    f"not stopped: {self.bootstrap} is served by {who} that keyshift did not "
                    f"start (no pid file in {self.folder} nor in the folder of the process "
                    "names it); stop it by hand")
            return "not running"
        pid, folder = found
        try:
            _signal_group(pid, signal.SIGTERM)
        except ProcessLookupError:
            (folder / "broker.pid").unlink(missing_ok=True)
            return "not running"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        how = "stopped"
        if _alive(pid):
            _signal_group(pid, signal.SIGKILL)
            how = "killed (did not stop within {:.0f}s)".format(timeout_s)
            while _alive(pid):
                time.sleep(0.1)
        (folder / "broker.pid").unlink(missing_ok=True)
        where = "" if folder == self.folder else f", started from {folder}"
        return f"{how} (pid {pid}{where})"

    def find(self) -> tuple[int, Path] | None:
        """The keyshift broker at this broker's address and its folder: this folder's pid
        file, else the process listening on ``port`` when keyshift started it from another
        folder (a ``kafka.Kafka`` process whose folder's ``broker.pid`` names it); None when
        neither. So ``stop`` finds the broker ``status`` reports, whatever home started it."""
        pid = self.pid()
        if pid is not None:
            return pid, self.folder
        listener = _listener_pid(self.port)
        if listener is None:
            return None
        folder = _keyshift_broker_folder(listener)
        return None if folder is None else (listener, folder)

    def pid(self) -> int | None:
        """Pid of our broker process when it is alive (a stale pid file is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def healthy(self, timeout_s: float = 5.0) -> bool:
        """A real metadata round trip, not just an open port."""
        try:
            metadata(self.bootstrap, timeout_s, security=self.security)
        except BrokerError:
            return False
        return True

    def status(self, timeout_s: float = 5.0) -> dict:
        found = self.find()
        pid = found[0] if found else None
        try:
            meta = metadata(self.bootstrap, timeout_s, security=self.security)
        except BrokerError as exc:
            return {"healthy": False, "bootstrap": self.bootstrap, "pid": pid, "error": str(exc)}
        return {"healthy": True, "bootstrap": self.bootstrap, "pid": pid, **meta}

    # --- helpers --------------------------------------------------------------------
    def jars(self) -> str:
        """The broker's classpath (jars fetched from Maven Central on first use)."""
        coords = [f"org.apache.kafka:kafka_2.13:{self.version}", LOG4J_SLF4J]
        try:
            jars = resolve(coords, cache_dir(self.cache, f"kafka-{self.version}", coords))
        except JarResolutionError as exc:
            raise BrokerError(f"cannot get the Kafka broker jars: {exc}") from None
        return os.pathsep.join(str(j) for j in jars)

    def _listener_properties(self) -> dict[str, str]:
        """The client listener: PLAINTEXT, or SASL_PLAINTEXT with PLAIN and one user (the
        JAAS line of ``listener.name.sasl_plaintext.plain``, the same user for the broker's
        own inter-broker connections). The controller listener stays PLAINTEXT: it listens
        on this host only and no client talks to it.

        With ``tls_listeners``, an ``SSL`` and/or ``SASL_SSL`` listener (named as its
        protocol) on its own port beside them, serving ``tls_keystore`` (PEM: key and
        certificate chain) without asking clients for a certificate; ``SASL_SSL`` takes the
        same PLAIN user (``listener.name.sasl_ssl.plain.sasl.jaas.config``). Without them
        the properties are exactly those of before."""
        if self.sasl_plain is None:
            name = "PLAINTEXT"
            extra = {}
        else:
            name = "SASL_PLAINTEXT"
            user, password = self.sasl_plain
            extra = {
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_line(
                    "PLAIN", user, password, **{f"user_{user}": password}),
            }
        self._check_tls()
        tls = [f"{proto}://{self.host}:{port}" for proto, port in self.tls_listeners]
        protocols = [name, *(proto for proto, _ in self.tls_listeners)]
        for proto, _ in self.tls_listeners:
            if proto == "SASL_SSL":  # the same one PLAIN user as on the SASL_PLAINTEXT listener
                extra["listener.name.sasl_ssl.plain.sasl.jaas.config"] = extra[
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config"]
        if self.tls_listeners:
            # one key and certificate for every TLS listener; clients are not asked for one
            extra.update({"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": str(self.tls_keystore),
                          "ssl.client.auth": "none"})
        return {
            "listeners": ",".join([f"{name}://{self.host}:{self.port}", *tls,
                                   f"CONTROLLER://{self.host}:{self.controller_port}"]),
            "advertised.listeners": ",".join([f"{name}://{self.host}:{self.port}", *tls]),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": name,
            "listener.security.protocol.map": ",".join(
                ["CONTROLLER:PLAINTEXT", *(f"{p}:{p}" for p in protocols)]),
            **extra,
        }

    def _check_tls(self) -> None:
        """The TLS listeners: SSL or SASL_SSL (this one needs ``sasl_plain``), each once, on
        their own ports, with a PEM keystore file."""
        if not self.tls_listeners:
            return
        protos = [proto for proto, _ in self.tls_listeners]
        ports = [self.port, self.controller_port, *(port for _, port in self.tls_listeners)]
        if any(p not in ("SSL", "SASL_SSL") for p in protos) or len(set(protos)) < len(protos):
            raise BrokerError(f"TLS listeners: SSL and/or SASL_SSL, each once, got {protos}")
        if len(set(ports)) < len(ports):
            raise BrokerError("TLS listeners: every listener needs a port of its own")
        if "SASL_SSL" in protos and self.sasl_plain is None:
            raise BrokerError("TLS listeners: SASL_SSL needs the SASL/PLAIN user (sasl_plain)")
        if self.tls_keystore is None or not Path(self.tls_keystore).is_file():
            raise BrokerError(f"TLS listeners: no PEM keystore file (private key and "
                              f"certificate chain) at {self.tls_keystore}")

    def _write_config(self) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            **self._listener_properties(),
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # a typo'd topic is refused, never created on first use (issue 46 item 10)
            "auto.create.topics.enable": "false",
            "log.retention.hours": "24",
            "message.max.bytes": str(1 << 20),
        }
        # the file may hold a password: readable by its owner only, written so from the start
        fd = os.open(self.properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{k}={_properties_value(v)}\n" for k, v in props.items()))
        (self.folder / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.file.type = File\n"
            "appender.file.name = file\n"
            f"appender.file.fileName = {self.folder / 'server.log'}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = file\n"
        )

    def _format(self, java: str, classpath: str) -> None:
        cluster_id = new_cluster_id()
        try:
            proc = subprocess.run(
                [java, HEAP, "-cp", classpath,
                 f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
                 "kafka.tools.StorageTool", "format", "-t", cluster_id,
                 "-c", str(self.properties_file), "--ignore-formatted"],
                capture_output=True, text=True, timeout=120, check=False,
            )
        except subprocess.TimeoutExpired:
            raise BrokerError("formatting the broker's storage timed out after 120s") from None
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting the broker's storage in {self.data_dir} failed: "
                f"{(proc.stderr or proc.stdout).strip()[-500:]}"
            )

    def _wait_healthy(
        self, pid: int, timeout_s: float, proc: subprocess.Popen | None = None
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise BrokerError(
                    f"broker exited with status {proc.returncode} during start; last log "
                    f"lines:\n{self._tail()}"
                )
            if proc is None and not _alive(pid):
                return False
            # refused at once until the port listens (check_listening): the broker is found
            # within 0.1 s of answering
            if self.healthy(timeout_s=2):
                return True
            time.sleep(0.1)
        return False

    def _tail(self, lines: int = 15) -> str:
        texts = []
        for f in (self.log_file, self.folder / "server.log"):
            if f.is_file():
                texts += f.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(texts[-lines:]) or "(no log output)"


_SASL_USER = re.compile(r"^[A-Za-z0-9._@-]{1,128}$")


def check_sasl_plain_user(user: str, password: str) -> None:
    """The local broker's PLAIN user: a plain name (it becomes part of a JAAS option name)
    and a non-empty password without line breaks."""
    if not _SASL_USER.match(user):
        raise BrokerError("SASL user: letters, digits and . _ @ - only (1-128 characters)")
    if not password or "\n" in password or "\r" in password:
        raise BrokerError("SASL password: must be non-empty, without line breaks")


def _properties_value(value: str) -> str:
    """A Java .properties value: a backslash is an escape there, so it is doubled."""
    return value.replace("\\", "\\\\")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (for tests and side-by-side brokers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def _listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` of this host (Linux: ``/proc/net/tcp*`` and the
    processes' socket descriptors); None when there is none, it is not visible, or not Linux."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # local_address is ADDR:PORT in hex; state 0A is LISTEN; column 9 the inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:  # gone meanwhile, or not ours to look into
            continue
    return None


def _keyshift_broker_folder(pid: int) -> Path | None:
    """The folder of the broker ``pid`` when keyshift started it: a ``kafka.Kafka`` process
    whose ``server.properties`` lies in a folder whose ``broker.pid`` holds ``pid``."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "kafka.Kafka" not in args or args.index("kafka.Kafka") + 1 >= len(args):
        return None
    folder = Path(args[args.index("kafka.Kafka") + 1]).parent
    try:
        return folder if int((folder / "broker.pid").read_text().strip()) == pid else None
    except (OSError, ValueError):
        return None


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group the broker leads (keyshift starts it in a new session),
    or to the process alone when it leads none."""
    if os.getpgid(pid) == pid:  # ProcessLookupError: gone
        os.killpg(pid, sig)
    else:
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError(
            "Java 17 or newer is needed to run the Kafka broker and was not found on PATH "
            "(apt-get install openjdk-17-jre-headless)"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except subprocess.TimeoutExpired:
        raise BrokerError("'java -version' did not answer within 30s") from None
    first = out.splitlines()[0] if out else ""
    try:
        major = int(first.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        log.warning("could not read the Java version from %r; trying anyway", first)
        return java
    if major < 17:
        raise BrokerError(f"Kafka {'4.x'} needs Java 17 or newer, found: {first}")
    return java
