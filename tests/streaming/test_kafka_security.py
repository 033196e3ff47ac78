"""Issue 16 item 4: Kafka SASL / TLS from config, for the admin client, the producer and the
Spark source; the local broker with a SASL/PLAIN listener; secrets masked.

The fast tests check the settings each client gets. The integration test starts a broker
with a SASL_PLAINTEXT listener on free ports, produces events with the right credentials,
runs ``keyshift run`` on them with the credentials in the environment, and shows that a
wrong password or no credentials give a one-line error within seconds, not a hang.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keyshift.cli import main
from keyshift.config import load_config
from keyshift.errors import ConfigError
from keyshift.streaming.broker import Broker
from keyshift.streaming.kafka_client import (
    BrokerError,
    client_options,
    metadata,
    spark_options,
)

ROOT = Path(__file__).resolve().parents[2]
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def kafka(**keys):
    env = {f"KEYSHIFT_KAFKA__{k.upper()}": str(v) for k, v in keys.items()}
    return load_config(env=env).kafka


def test_plaintext_adds_nothing():
    assert client_options(kafka()) == {} and spark_options(kafka()) == {}


def test_sasl_plain_and_scram_settings_for_every_client():
    k = kafka(security_protocol="SASL_PLAINTEXT", sasl_username="ann", sasl_password='p"w\\1')
    assert client_options(k) == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "ann", "sasl_plain_password": 'p"w\\1'}
    assert spark_options(k) == {
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN} required username="ann" password="p\\"w\\\\1";'}
    k = kafka(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
              sasl_username="bo", sasl_password="s")
    opts = spark_options(k)
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["kafka.sasl.jaas.config"] == f'{SCRAM} required username="bo" password="s";'
    assert client_options(k)["sasl_mechanism"] == "SCRAM-SHA-512"


def test_tls_with_pem_files(tmp_path):
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text(f"-----BEGIN {name}-----\n")
    k = kafka(security_protocol="SSL", ssl_cafile=tmp_path / "ca.pem",
              ssl_certfile=tmp_path / "cert.pem", ssl_keyfile=tmp_path / "key.pem")
    assert client_options(k) == {
        "security_protocol": "SSL", "ssl_cafile": str(tmp_path / "ca.pem"),
        "ssl_certfile": str(tmp_path / "cert.pem"), "ssl_keyfile": str(tmp_path / "key.pem"),
        "ssl_check_hostname": True}
    assert spark_options(k) == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(tmp_path / "ca.pem"),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": "-----BEGIN cert.pem-----\n",
        "kafka.ssl.keystore.key": "-----BEGIN key.pem-----\n"}
    missing = kafka(security_protocol="SSL", ssl_cafile=tmp_path / "nope.pem")
    with pytest.raises(BrokerError, match="^kafka.ssl_cafile: no PEM file"):
        spark_options(missing)


@pytest.mark.parametrize(("keys", "needle"), [
    ({"security_protocol": "TLS"}, "kafka.security_protocol"),
    ({"sasl_mechanism": "GSSAPI"}, "kafka.sasl_mechanism"),
    ({"security_protocol": "SASL_SSL"}, "kafka.sasl_username"),
    ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "kafka.sasl_password"),
    ({"ssl_certfile": "/c.pem"}, "kafka.ssl_keyfile"),
])
def test_bad_security_config_names_the_key(keys, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        kafka(**keys)


def test_config_output_masks_secrets(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    monkeypatch.setenv("KEYSHIFT_KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("KEYSHIFT_KAFKA__SASL_USERNAME", "ann")
    monkeypatch.setenv("KEYSHIFT_KAFKA__SASL_PASSWORD", "hunter2-secret")
    monkeypatch.setenv("KEYSHIFT_MLFLOW__TRACKING_URI", "http://ann:tok3n@mlflow:5000")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert shown["kafka"]["sasl_username"] == "ann"
    assert shown["kafka"]["sasl_password"] == "**********"
    assert shown["mlflow"]["tracking_uri"] == "http://ann:***@mlflow:5000"
    assert "hunter2" not in out and "tok3n" not in out
    assert "hunter2" not in repr(load_config().kafka)


def test_sasl_broker_properties_are_private_and_repr_hides_the_password(tmp_path):
    broker = Broker("127.0.0.1", 1, 2, tmp_path, "4.1.1", tmp_path, sasl_plain=("ann", "pw\\1"))
    tmp_path.mkdir(exist_ok=True)
    broker._write_config()
    props = dict(line.split("=", 1) for line in
                 broker.properties_file.read_text().splitlines())
    assert stat.S_IMODE(broker.properties_file.stat().st_mode) == 0o600
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2"
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT")
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    # JAAS escapes the backslash once, the .properties file once more
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        f'{PLAIN} required username="ann" password="pw\\\\\\\\1" user_ann="pw\\\\\\\\1";')
    assert "pw" not in repr(broker)


@pytest.mark.parametrize("value", ["no-colon", "bad user:pw", "ann:"])
def test_kafka_start_rejects_a_bad_sasl_plain(value, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path))
    code = main(["kafka", "start", "--sasl-plain", value])
    err = capsys.readouterr().err.strip()
    assert code in (1, 2) and err.count("\n") == 0 and "SASL" in err.upper(), err


def _env(cfg, broker: Broker, password: str) -> dict[str, str]:
    return {
        **os.environ,
        "KEYSHIFT_HOME": str(cfg.home_path),
        "KEYSHIFT_KAFKA__PORT": str(broker.port),
        "KEYSHIFT_KAFKA__CONTROLLER_PORT": str(broker.controller_port),
        "KEYSHIFT_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KEYSHIFT_KAFKA__SASL_MECHANISM": "PLAIN",
        "KEYSHIFT_KAFKA__SASL_USERNAME": "keyshift",
        "KEYSHIFT_KAFKA__SASL_PASSWORD": password,
        "KEYSHIFT_GROUPS__COUNT": "64",
        "KEYSHIFT_SPARK__TRIGGER_S": "1.0",
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
        "PYSPARK_PYTHON": sys.executable,
    }


@pytest.mark.integration
@pytest.mark.slow
def test_job_on_a_sasl_plain_broker_and_wrong_credentials_fail_fast(tmp_path):
    from keyshift.streaming.broker import free_port
    from keyshift.streaming.kafka_client import create_topic
    from keyshift.streaming.producer import connect, produce
    from keyshift.workloads.events import make_generator

    os.environ.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    port, controller = free_port(), free_port()
    while controller == port:
        controller = free_port()
    cfg = load_config(env={}, home=str(tmp_path / "home"),
                      kafka={"port": port, "controller_port": controller})
    broker = Broker.from_config(cfg, folder=tmp_path / "kafka")
    broker = Broker(**{**broker.__dict__, "sasl_plain": ("keyshift", "s3cret-pw")})
    assert "SASL_PLAINTEXT" in broker.start() or broker.healthy()
    try:
        good = broker.security
        bad = {**good, "sasl_plain_password": "wrong"}
        # wrong password, and no credentials at all: a clear error within seconds (a client
        # retries a refused login until its bootstrap timeout, 3 s here, so each call takes
        # that whole timeout: the test's 30 s would catch a hang)
        for security in (bad, {}):
            started = time.monotonic()
            with pytest.raises(BrokerError) as err:
                metadata(broker.bootstrap, timeout_s=3, security=security)
            assert time.monotonic() - started < 30
            assert "\n" not in str(err.value) and "wrong" not in str(err.value)
            if security:
                assert "authentication failed" in str(err.value)

        topic = "secure-words"
        create_topic(broker.bootstrap, topic, 2, security=good)
        producer = connect(broker.bootstrap, security=good)
        stats = produce(producer, topic, make_generator("wordcount", seed=1), rate=1e6, count=300)
        producer.close()
        assert stats.sent == 300 and stats.failed == 0

        argv = [sys.executable, "-m", "keyshift.cli", "run", "--app", "wordcount", "--topic",
                topic, "--run-id", "secure", "--available-now", "--json"]
        started = time.monotonic()
        proc = subprocess.run(argv, check=False, cwd=ROOT, env=_env(cfg, broker, "wrong"),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and time.monotonic() - started < 60
        last = proc.stderr.strip().splitlines()[-1]
        assert "authentication failed" in last and "Traceback" not in proc.stderr, proc.stderr
        assert "wrong" not in proc.stderr

        proc = subprocess.run(argv, check=False, cwd=ROOT, env=_env(cfg, broker, "s3cret-pw"),
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["events_in"] == 300 and summary["processed"] == 300
        assert "s3cret-pw" not in proc.stdout + proc.stderr
    finally:
        broker.stop()
