"""Issue 26 item 4: TLS against a real broker.

The fast tests check the broker's TLS listener properties and their validation, and the
one-line diagnosis of a TLS handshake that fails (a local TLS server stands in for the
broker). The integration test generates a CA and a broker certificate (``cryptography``, PEM
only: the broker reads ``ssl.keystore.type=PEM``, no keytool), starts a broker with a
SASL_PLAINTEXT client listener plus SSL and SASL_SSL listeners on free ports (its own
process, module-scoped), produces events over both TLS listeners, runs ``keyshift run
--app wordcount --available-now --json`` over SSL and over SASL_SSL and checks it read all
of them, and shows that a client trusting another CA fails within seconds in one line
naming the certificate and ``kafka.ssl_cafile``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from keyshift.config import load_config
from keyshift.streaming.broker import Broker
from keyshift.streaming.kafka_client import (
    BrokerError,
    HandshakeError,
    client_options,
    metadata,
    spark_options,
    tls_problem,
)

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "keyshift", "tls-s3cret"


# --- certificates ---------------------------------------------------------------------------
def _key():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _cert(subject: str, key, issuer=None, issuer_key=None, ca: bool = False,
          names: tuple[str, ...] = ()):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(issuer.subject if issuer is not None else name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        sans = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n)
                for n in names]
        b = (b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                            critical=False))
    return b.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def make_pki(folder: Path, names: tuple[str, ...] = ("localhost", "127.0.0.1")) -> dict[str, Path]:
    """A CA, a server certificate it signs for ``names``, and another CA that signed nothing:
    ``ca.pem``, ``keystore.pem`` (the server's key and certificate chain, as the broker reads a
    PEM keystore), ``server.pem`` / ``server.key`` (the same for Python's ssl), ``other-ca.pem``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, server_key, other_key = _key(), _key(), _key()
    ca = _cert("keyshift test CA", ca_key, ca=True)
    server = _cert("keyshift test broker", server_key, issuer=ca, issuer_key=ca_key, names=names)
    other = _cert("some other CA", other_key, ca=True)
    files = {
        "ca": (folder / "ca.pem", _pem_cert(ca)),
        "keystore": (folder / "keystore.pem", _pem_key(server_key) + _pem_cert(server)
                     + _pem_cert(ca)),
        "server_cert": (folder / "server.pem", _pem_cert(server) + _pem_cert(ca)),
        "server_key": (folder / "server.key", _pem_key(server_key)),
        "other_ca": (folder / "other-ca.pem", _pem_cert(other)),
    }
    for path, data in files.values():
        path.write_bytes(data)
    os.chmod(files["keystore"][0], 0o600)
    os.chmod(files["server_key"][0], 0o600)
    return {k: path for k, (path, _) in files.items()}


# --- fast: the broker's properties and the handshake's diagnosis ----------------------------
def _props(broker: Broker) -> dict[str, str]:
    broker.folder.mkdir(parents=True, exist_ok=True)
    broker._write_config()
    return dict(line.split("=", 1) for line in broker.properties_file.read_text().splitlines())


def test_tls_listeners_beside_the_client_listener(tmp_path):
    keystore = tmp_path / "keystore.pem"
    keystore.write_text("-----BEGIN PRIVATE KEY-----\n")
    plain = _props(Broker("127.0.0.1", 1, 2, tmp_path / "a", "4.1.1", tmp_path))
    assert plain["listeners"] == "PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2"
    assert plain["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert not any(k.startswith("ssl.") for k in plain)  # the default path is unchanged

    broker = Broker("127.0.0.1", 1, 2, tmp_path / "b", "4.1.1", tmp_path,
                    sasl_plain=(USER, PASSWORD), tls_listeners=(("SSL", 3), ("SASL_SSL", 4)),
                    tls_keystore=keystore)
    props = _props(broker)
    assert props["listeners"] == ("SASL_PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:3,"
                                  "SASL_SSL://127.0.0.1:4,CONTROLLER://127.0.0.1:2")
    assert props["advertised.listeners"] == ("SASL_PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:3,"
                                             "SASL_SSL://127.0.0.1:4")
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL")
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert props["ssl.keystore.type"] == "PEM"
    assert props["ssl.keystore.location"] == str(keystore)
    assert props["listener.name.sasl_ssl.plain.sasl.jaas.config"] == \
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert PASSWORD not in repr(broker) and "SSL:3" in repr(broker)


@pytest.mark.parametrize(("change", "needle"), [
    ({"tls_listeners": (("TLS", 3),)}, "SSL and/or SASL_SSL"),
    ({"tls_listeners": (("SSL", 3), ("SSL", 4))}, "each once"),
    ({"tls_listeners": (("SSL", 1),)}, "port of its own"),
    ({"tls_listeners": (("SASL_SSL", 3),), "sasl_plain": None}, "needs the SASL/PLAIN user"),
    ({"tls_keystore": Path("/nonexistent/keystore.pem")}, "no PEM keystore file"),
])
def test_bad_tls_listeners_are_refused(tmp_path, change, needle):
    keystore = tmp_path / "keystore.pem"
    keystore.write_text("x")
    fields = {"sasl_plain": (USER, PASSWORD), "tls_listeners": (("SSL", 3),),
              "tls_keystore": keystore, **change}
    broker = Broker("127.0.0.1", 1, 2, tmp_path / "b", "4.1.1", tmp_path, **fields)
    with pytest.raises(BrokerError, match=needle):
        broker._listener_properties()


class _TLSServer:
    """A TLS server on a free port (or a plain TCP one when ``context`` is None) that answers
    each handshake and closes: enough for :func:`tls_problem`."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.context = context
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                if self.context is None:
                    conn.recv(4096)  # a Kafka listener reads a size, then gives up
                else:
                    with self.context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    # cryptography: pinned in constraints.txt (MLflow's and Airflow's dependency), no skip
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_problem_names_the_certificate_or_the_listener(pki, tmp_path):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server_cert"], pki["server_key"])
    elsewhere = make_pki(tmp_path, names=("broker.example",))  # a certificate for another host
    ctx_elsewhere = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx_elsewhere.load_cert_chain(elsewhere["server_cert"], elsewhere["server_key"])
    servers = [_TLSServer(ctx), _TLSServer(ctx_elsewhere), _TLSServer(None)]
    server, other_host, plain = servers
    try:
        at = f"127.0.0.1:{server.port}"
        good = {"security_protocol": "SSL", "ssl_cafile": str(pki["ca"]),
                "ssl_check_hostname": True}
        assert tls_problem(at, good) is None
        assert tls_problem(f"localhost:{server.port}", good) is None
        wrong = tls_problem(at, {**good, "ssl_cafile": str(pki["other_ca"])})
        assert wrong.startswith("TLS handshake failed: the broker's certificate is not trusted")
        assert "kafka.ssl_cafile" in wrong and "\n" not in wrong
        mismatch = tls_problem(f"127.0.0.1:{other_host.port}",
                               {**good, "ssl_cafile": str(elsewhere["ca"])})
        assert "certificate is not valid for 127.0.0.1" in mismatch and "kafka.host" in mismatch
        not_tls = tls_problem(f"127.0.0.1:{plain.port}", good)
        assert not_tls.startswith("TLS handshake failed") and "kafka.security_protocol" in not_tls
        unusable = tls_problem(at, {**good, "ssl_cafile": str(tmp_path / "none.pem")})
        assert unusable.startswith("TLS settings unusable")
    finally:
        for s in servers:
            s.close()


def test_a_wrong_ca_is_a_handshake_error_in_one_line(pki):
    """The admin client (metadata, so keyshift run's broker check) against a TLS listener
    that a wrong CA cannot verify: a HandshakeError naming the certificate, within seconds."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server_cert"], pki["server_key"])
    server = _TLSServer(ctx)
    try:
        k = load_config(env={"KEYSHIFT_KAFKA__SECURITY_PROTOCOL": "SSL",
                             "KEYSHIFT_KAFKA__SSL_CAFILE": str(pki["other_ca"]),
                             "KEYSHIFT_KAFKA__PORT": str(server.port)}).kafka
        started = time.monotonic()
        with pytest.raises(HandshakeError) as err:
            metadata(k.bootstrap, timeout_s=5, security=client_options(k))
        assert time.monotonic() - started < 30
        text = str(err.value)
        assert "\n" not in text and "certificate is not trusted" in text, text
        assert "kafka.ssl_cafile" in text
    finally:
        server.close()


# --- integration: a real broker with SSL and SASL_SSL listeners -----------------------------
def _ports(n: int) -> list[int]:
    from keyshift.streaming.broker import free_port

    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki):
    """A broker of its own (module-scoped): SASL_PLAINTEXT client listener, SSL and SASL_SSL
    listeners with the test CA's certificate for localhost and 127.0.0.1; stopped after."""
    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    home = tmp_path_factory.mktemp("tls-home")
    port, controller, ssl_port, sasl_ssl_port = _ports(4)
    cfg = load_config(env={}, home=str(home), kafka={"port": port, "controller_port": controller})
    base = Broker.from_config(cfg, folder=home / "kafka")
    broker = Broker(**{**base.__dict__, "sasl_plain": (USER, PASSWORD),
                       "tls_listeners": (("SSL", ssl_port), ("SASL_SSL", sasl_ssl_port)),
                       "tls_keystore": pki["keystore"]})
    broker.start()
    try:
        yield cfg, broker, dict(broker.tls_listeners)
    finally:
        broker.stop()


def _kafka_env(cfg, broker: Broker, protocol: str, port: int, cafile: Path) -> dict[str, str]:
    env = {
        "KEYSHIFT_HOME": str(cfg.home_path),
        "KEYSHIFT_KAFKA__PORT": str(port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(broker.controller_port),
        "KEYSHIFT_KAFKA__SECURITY_PROTOCOL": protocol,
        "KEYSHIFT_KAFKA__SSL_CAFILE": str(cafile),
    }
    if protocol.startswith("SASL_"):
        env.update({"KEYSHIFT_KAFKA__SASL_MECHANISM": "PLAIN",
                    "KEYSHIFT_KAFKA__SASL_USERNAME": USER,
                    "KEYSHIFT_KAFKA__SASL_PASSWORD": PASSWORD})
    return env


def _run_env(kafka_env: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **kafka_env,
            "KEYSHIFT_GROUPS__COUNT": "64", "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
            "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2", "KEYSHIFT_METRICS__PORT": "0",
            "PYSPARK_PYTHON": sys.executable}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="the broker needs Java 17")
def test_job_over_ssl_and_sasl_ssl_and_a_wrong_ca_fails_fast(tls_broker, pki):
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads.events import make_generator

    cfg, broker, ports = tls_broker
    kafka = {proto: load_config(env=_kafka_env(cfg, broker, proto, port, pki["ca"])).kafka
             for proto, port in ports.items()}
    for k in kafka.values():  # the Spark source gets the CA as a PEM trust store
        assert spark_options(k)["kafka.ssl.truststore.location"] == str(pki["ca"])
    topic = "tls-words"
    create_topic(kafka["SSL"].bootstrap, topic, 2, security=client_options(kafka["SSL"]))
    for seed, (proto, k) in enumerate(kafka.items(), start=1):  # 150 events over each
        producer = connect(k.bootstrap, security=client_options(k))
        stats = produce(producer, topic, make_generator("wordcount", seed=seed), rate=1e6,
                        count=150)
        producer.close()
        assert stats.sent == 150 and stats.failed == 0, proto

    def keyshift_run(env: dict[str, str], run_id: str, timeout: float):
        argv = [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic",
                topic, "--run-id", run_id, "--available-now", "--json"]
        return subprocess.run(argv, check=False, cwd=ROOT, env=_run_env(env),
                              capture_output=True, text=True, timeout=timeout)

    # a client that trusts another CA: one line naming the certificate, before Spark starts
    wrong = _kafka_env(cfg, broker, "SSL", ports["SSL"], pki["other_ca"])
    started = time.monotonic()
    proc = keyshift_run(wrong, "tls-wrong-ca", 120)
    assert proc.returncode == 2 and time.monotonic() - started < 60, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "TLS handshake failed" in last and "certificate is not trusted" in last, proc.stderr
    assert "kafka.ssl_cafile" in last and "Traceback" not in proc.stderr
    assert "keyshift kafka start" not in last  # the broker is there: not its address

    for proto, port in ports.items():
        env = _kafka_env(cfg, broker, proto, port, pki["ca"])
        proc = keyshift_run(env, f"tls-{proto.lower().replace('_', '-')}", 900)
        assert proc.returncode == 0, (proto, proc.stderr[-4000:])
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["events_in"] == 300 and summary["processed"] == 300, (proto, summary)
        assert PASSWORD not in proc.stdout + proc.stderr
