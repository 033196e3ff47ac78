"""A single-node KRaft Kafka broker on localhost, run from jars cached from Maven Central.

Why not a container or a downloaded tarball: the machine reaches Maven Central only, and
``kafka_2.13`` with its runtime dependencies is exactly a broker. The broker runs as one
``java -cp`` process in combined broker+controller mode (static quorum of one voter), with
its data, ``server.properties``, pid file and log under one folder. Every failure mode the
user can hit (no Java, no Maven, port taken, broker dies on start) ends in a
:class:`BrokerError` with one readable sentence, and every wait has a deadline.

Security (issue 16 item 4): :func:`client_options` and :func:`spark_options` turn the
``[kafka]`` security keys into kafka-python and Spark Kafka source settings, so the admin
client, the producer and the Spark source speak SASL (PLAIN, SCRAM) and TLS alike. The local
broker can offer a SASL_PLAINTEXT listener with PLAIN for one user (the controller listener
stays PLAINTEXT on localhost), and SSL / SASL_SSL listeners beside it from a PEM keystore
(issue 26 item 4). A TLS client that the broker's listener refuses is told why
(:func:`tls_problem`: the certificate is not trusted or not for this host, or the listener
does not speak TLS). Secrets never appear in a message: errors name keys, not values.
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
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshift.config import Config, KafkaConfig
from keyshift.errors import ConfigError
from keyshift.lakehouse.jars import JarResolutionError, cache_dir, resolve

from .broker_watch import nobody_listens, reachable

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

class BrokerError(RuntimeError):
    """The broker cannot be started, reached or stopped; the message says why."""


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def client_options(kafka: KafkaConfig) -> dict[str, Any]:
    """kafka-python keyword arguments (admin client, producer) for ``kafka``'s security keys;
    empty for PLAINTEXT. A PEM file that does not exist is a BrokerError naming its key."""
    if kafka.security_protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL_"):
        out.update(sasl_mechanism=kafka.sasl_mechanism,
                   sasl_plain_username=kafka.sasl_username,
                   sasl_plain_password=kafka.sasl_password.get_secret_value())
    if kafka.security_protocol.endswith("SSL"):
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(kafka, key):
                out[key] = str(_pem_file(kafka, key))
        out["ssl_check_hostname"] = True
    return out


def spark_options(kafka: KafkaConfig) -> dict[str, str]:
    """Spark Kafka source options (``kafka.``-prefixed consumer settings) for ``kafka``'s
    security keys; empty for PLAINTEXT.

    SASL: the mechanism and a JAAS line with PLAIN's or SCRAM's login module. TLS: PEM as the
    Kafka client reads it since 2.7 (KIP-651): the CA bundle as a PEM trust store by
    location, the client certificate and key as PEM strings (the location form would need
    both in one file). On a cluster the CA file must exist on every executor at that path.
    """
    if kafka.security_protocol == "PLAINTEXT":
        return {}
    out = {"kafka.security.protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL_"):
        out["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        out["kafka.sasl.jaas.config"] = jaas_line(
            kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password.get_secret_value())
    if kafka.security_protocol.endswith("SSL"):
        if kafka.ssl_cafile:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.location"] = str(_pem_file(kafka, "ssl_cafile"))
        if kafka.ssl_certfile:
            out["kafka.ssl.keystore.type"] = "PEM"
            out["kafka.ssl.keystore.certificate.chain"] = _pem_file(
                kafka, "ssl_certfile").read_text()
            out["kafka.ssl.keystore.key"] = _pem_file(kafka, "ssl_keyfile").read_text()
    return out


def jaas_line(mechanism: str, username: str, password: str, **extra: str) -> str:
    """``sasl.jaas.config`` for PLAIN or SCRAM: the login module and quoted options (a quote
    or backslash in a value escaped, as Kafka's JAAS parser reads them)."""
    module = _LOGIN_MODULES.get(mechanism)
    if module is None:
        raise BrokerError(f"kafka.sasl_mechanism: {mechanism!r} is not one of "
                          f"{sorted(_LOGIN_MODULES)}")
    pairs = {"username": username, "password": password, **extra}
    body = " ".join(f'{k}="{_jaas_quote(v)}"' for k, v in pairs.items())
    return f"{module} required {body};"


def environment_security() -> dict[str, Any]:
    """:func:`client_options` of the environment's configuration ($KEYSHIFT_CONFIG and
    ``KEYSHIFT_KAFKA__*``): what a caller that passes no ``security`` gets, so every client
    of a secured cluster authenticates even where only a bootstrap string is at hand."""
    from keyshift.config import load_config

    try:
        return client_options(load_config().kafka)
    except ConfigError as exc:
        raise BrokerError(str(exc).replace("\n", " ")) from None


def _jaas_quote(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise BrokerError("kafka.sasl_username / kafka.sasl_password: a line break is not "
                          "allowed in a SASL credential")
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _pem_file(kafka: KafkaConfig, key: str) -> Path:
    path = Path(getattr(kafka, key)).expanduser()
    if not path.is_file():
        raise BrokerError(f"kafka.{key}: no PEM file at {path}")
    return path.resolve()


def auth_hint(exc: BaseException, bootstrap: str, security: Mapping[str, Any]) -> str:
    """Why a client got no answer, in one clause. A broker that refuses a SASL login just
    closes the connection (kafka-python then reports only "Unable to bootstrap"), so when
    the port accepts TCP connections the cause is the handshake: for a TLS client
    (``SSL``, ``SASL_SSL``) a TLS handshake of our own with the same settings
    (:func:`tls_problem`) says whether it is the certificate (not trusted, not for this
    host) or a listener that does not speak TLS; else wrong credentials, or security
    settings that do not match the listener. Names keys, never values."""
    text = repr(exc)
    keys = "kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username and the password"
    protocol = security.get("security_protocol", "PLAINTEXT")
    secured = protocol != "PLAINTEXT"
    # the TCP probe only for a secured client: a PLAINTEXT health check runs in loops (and
    # against ports that must not get extra connections, see Broker.start's port check)
    if secured and protocol.endswith("SSL") and reachable(bootstrap, timeout_s=1.0):
        problem = tls_problem(bootstrap, security)
        if problem is not None:
            return problem
    if re.search(r"(?i)sasl|authenticat", text) or (secured and reachable(bootstrap, timeout_s=1.0)):
        return (f"the broker accepts connections but refuses this client's handshake: "
                f"authentication failed or the security settings do not match (check {keys})")
    return text


class HandshakeError(BrokerError):
    """The broker answers TCP but the TLS or SASL handshake fails: the settings (the CA, the
    credentials, the protocol) are wrong, not the address."""


def broker_error(prefix: str, exc: BaseException, bootstrap: str,
                 security: Mapping[str, Any], handshake_prefix: str | None = None) -> BrokerError:
    """``prefix: <auth_hint>`` as a :class:`BrokerError`; when the hint names the handshake
    (TLS or SASL: the broker is there) a :class:`HandshakeError` led by ``handshake_prefix``
    (default ``Kafka broker at <bootstrap>``) instead, since "no broker answers" would
    send the reader to the address."""
    hint = auth_hint(exc, bootstrap, security)
    if hint != repr(exc):
        return HandshakeError(f"{handshake_prefix or f'Kafka broker at {bootstrap}'}: {hint}")
    return BrokerError(f"{prefix}: {hint}")


def tls_problem(bootstrap: str, security: Mapping[str, Any],
                timeout_s: float = 5.0) -> str | None:
    """One TLS handshake with the first bootstrap server that accepts TCP, checked as the
    Kafka client checks it (``ssl_cafile`` or the system CAs, the client certificate,
    hostname checking): None when it succeeds, else why it failed in one clause naming
    the key to check (``kafka.ssl_cafile``, ``kafka.host``, ``kafka.security_protocol``)."""
    import ssl

    try:
        ctx = ssl.create_default_context(cafile=security.get("ssl_cafile") or None)
        if security.get("ssl_certfile"):
            ctx.load_cert_chain(security["ssl_certfile"], security.get("ssl_keyfile"))
    except (OSError, ssl.SSLError) as exc:
        return f"TLS settings unusable: {exc} (check kafka.ssl_cafile, kafka.ssl_certfile, " \
               "kafka.ssl_keyfile)"
    ctx.check_hostname = bool(security.get("ssl_check_hostname", True))
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not port.isdigit():
            continue
        try:
            raw = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
        except OSError:
            continue
        try:
            with ctx.wrap_socket(raw, server_hostname=host or "127.0.0.1"):
                return None
        except ssl.SSLCertVerificationError as exc:
            why = exc.verify_message or exc.reason or str(exc)
            if exc.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, _IP_ADDRESS_
                return (f"TLS handshake failed: the broker's certificate is not valid for "
                        f"{host} ({why}); check kafka.host against the names in the "
                        "broker's certificate")
            return (f"TLS handshake failed: the broker's certificate is not trusted ({why}); "
                    "check kafka.ssl_cafile: it must hold the CA that signed the broker's "
                    "certificate")
        except ssl.SSLError as exc:
            reason = exc.reason or str(exc)
            if "WRONG_VERSION" in str(reason).upper() or isinstance(exc, ssl.SSLEOFError):
                return (f"TLS handshake failed: the listener at {server.strip()} does not "
                        "speak TLS (check kafka.security_protocol and kafka.port)")
            return f"TLS handshake failed: {reason} (check the kafka.ssl_* keys)"
        except OSError as exc:  # reset or closed mid-handshake: a listener that is not TLS
            return (f"TLS handshake failed: {exc.strerror or type(exc).__name__} from "
                    f"{server.strip()}: it does not seem to speak TLS (check "
                    "kafka.security_protocol and kafka.port)")
        finally:
            raw.close()
    return None


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


#: what a client that needs the broker (not a health check) adds to "no broker answers"
START_HINT = " (run 'keyshift kafka start')"


def check_listening(bootstrap: str, hint: str = "") -> None:
    """``no Kafka broker answers at BOOTSTRAP[hint]: nothing listens there`` as a
    :class:`BrokerError` when every bootstrap server refuses the connection
    (:func:`nobody_listens`): said at once, where a Kafka client would retry until its
    bootstrap timeout and then say no more."""
    if nobody_listens(bootstrap):
        raise BrokerError(f"no Kafka broker answers at {bootstrap}{hint}: nothing listens "
                          "there (connection refused)")


def metadata(bootstrap: str, timeout_s: float = 5.0,
             security: Mapping[str, Any] | None = None) -> dict:
    """Brokers and topics from a metadata request; BrokerError when nobody answers in time
    or the broker refuses the credentials. ``security``: :func:`client_options` (default:
    those of the environment's configuration, :func:`environment_security`)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    security = environment_security() if security is None else dict(security)
    timeout_ms = int(timeout_s * 1000)
    check_listening(bootstrap)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="keyshift-health",
            bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
            reconnect_backoff_max_ms=500, **security,
        )
    except (KafkaError, OSError) as exc:
        raise broker_error(f"no Kafka broker answers at {bootstrap}", exc, bootstrap,
                           security) from None
    try:
        cluster = admin.describe_cluster()
        topics = sorted(t for t in admin.list_topics() if not t.startswith("__"))
    except (KafkaError, OSError) as exc:
        raise broker_error(f"Kafka broker at {bootstrap} did not answer metadata", exc,
                           bootstrap, security) from None
    finally:
        admin.close()
    return {
        "cluster_id": cluster.get("cluster_id"),
        "brokers": len(cluster.get("brokers", [])),
        "topics": topics,
    }


class TopicEnds:
    """A topic's end offsets (per partition, the offset its next record will get), read from
    the broker: what has been produced, against which a reader's offsets give its lag.

    Each call opens a consumer (no group, no commits) and closes it, so nothing stays
    connected between scrapes and nothing needs closing when the job stops; calls are
    serialised. BrokerError when the broker does not answer within ``timeout_s``."""

    def __init__(self, bootstrap: str, topic: str, security: Mapping[str, Any] | None = None,
                 timeout_s: float = 5.0) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.security = environment_security() if security is None else dict(security)
        self.timeout_ms = int(timeout_s * 1000)
        self._lock = threading.Lock()

    def offsets(self) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        with self._lock:
            consumer = None
            try:
                consumer = KafkaConsumer(
                    bootstrap_servers=self.bootstrap, client_id="keyshift-topic-ends",
                    enable_auto_commit=False, request_timeout_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms, reconnect_backoff_max_ms=500,
                    **self.security)
                parts = consumer.partitions_for_topic(self.topic) or set()
                ends = consumer.end_offsets([TopicPartition(self.topic, p) for p in parts])
            except (KafkaError, OSError) as exc:
                where = f"end offsets of {self.topic!r} at {self.bootstrap}"
                raise broker_error(where, exc, self.bootstrap, self.security, where) from None
            finally:
                if consumer is not None:
                    consumer.close()
        return {tp.partition: int(offset) for tp, offset in ends.items()}


@dataclass(frozen=True)
class TopicOffsets:
    """A topic as the broker holds it now. ``topic_id`` is new each time a topic of that
    name is created, so it tells a recreated topic from one whose old records were deleted
    (both can leave offsets a reader had reached missing); ``earliest`` and ``latest`` are
    each partition's log start and end offsets."""

    topic_id: str | None
    earliest: dict[int, int]
    latest: dict[int, int]


def topic_offsets(bootstrap: str, topic: str, security: Mapping[str, Any] | None = None,
                  timeout_s: float = 10.0) -> TopicOffsets | None:
    """The topic's id and its partitions' earliest and end offsets; None when there is no
    such topic. BrokerError when the broker does not answer within ``timeout_s``."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    security = environment_security() if security is None else dict(security)
    timeout_ms = int(timeout_s * 1000)
    check_listening(bootstrap, START_HINT)
    admin = consumer = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="keyshift-admin",
                                 bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
                                 **security)
        described = admin.describe_topics([topic])
        if not described or described[0].get("error_code") or not described[0]["partitions"]:
            return None
        topic_id = described[0].get("topic_id")
        parts = [TopicPartition(topic, p["partition_index"]) for p in described[0]["partitions"]]
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="keyshift-offsets",
                                 enable_auto_commit=False, request_timeout_ms=timeout_ms,
                                 bootstrap_timeout_ms=timeout_ms, **security)
        earliest = consumer.beginning_offsets(parts)
        latest = consumer.end_offsets(parts)
    except (KafkaError, OSError) as exc:
        where = f"offsets of topic {topic!r} at {bootstrap}"
        raise broker_error(where, exc, bootstrap, security, where) from None
    finally:
        for client in (consumer, admin):
            if client is not None:
                client.close()
    return TopicOffsets(None if topic_id is None else str(topic_id),
                        {tp.partition: int(o) for tp, o in earliest.items()},
                        {tp.partition: int(o) for tp, o in latest.items()})


def create_topic(
    bootstrap: str, name: str, partitions: int, timeout_s: float = 30.0,
    security: Mapping[str, Any] | None = None,
) -> str:
    """Create a topic (replication 1); an existing topic with the same partitions is fine.
    ``security`` as for :func:`metadata`."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    if partitions < 1:
        raise BrokerError(f"partitions must be >= 1, got {partitions}")
    security = environment_security() if security is None else dict(security)
    timeout_ms = int(timeout_s * 1000)
    check_listening(bootstrap, START_HINT)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="keyshift-admin",
            bootstrap_timeout_ms=min(timeout_ms, 10000), request_timeout_ms=timeout_ms,
            **security,
        )
    except (KafkaError, OSError) as exc:
        raise broker_error(f"no Kafka broker answers at {bootstrap} (run 'keyshift kafka "
                           "start')", exc, bootstrap, security) from None
    try:
        try:
            admin.create_topics(
                {name: {"num_partitions": partitions, "replication_factor": 1}},
                timeout_ms=timeout_ms, wait_for_metadata=True,
            )
            return f"created topic {name} with {partitions} partitions"
        except TopicAlreadyExistsError:
            have = topic_partitions(admin, name)
            if have != partitions:
                raise BrokerError(
                    f"topic {name} already exists with {have} partitions, not {partitions}"
                ) from None
            return f"topic {name} already exists with {partitions} partitions"
        except KafkaError as exc:
            raise BrokerError(f"creating topic {name} failed: {exc!r}") from None
    finally:
        admin.close()


def topic_partitions(admin, name: str) -> int:
    """Partition count of one topic as the broker reports it."""
    desc = admin.describe_topics([name])
    return len(desc[0]["partitions"]) if desc else 0


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
