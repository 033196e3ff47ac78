"""The Kafka client side: what every keyshift client of a broker (the admin client, the
producer, the Spark Kafka source, the offset readers) needs, whichever broker it talks to.

Security: :func:`client_options` and :func:`spark_options` (:mod:`keyshift.kafka_security`) turn the
``[kafka]`` security keys into kafka-python and Spark Kafka source settings, so the admin
client, the producer and the Spark source speak SASL (PLAIN, SCRAM) and TLS alike. A TLS
client that the broker's listener refuses is told why (:func:`tls_problem`: the certificate
is not trusted or not for this host, or the listener does not speak TLS). Secrets never
appear in a message: errors name keys, not values. Every wait has a deadline and every
failure is one :class:`BrokerError` sentence.

The local development broker is :mod:`keyshift.streaming.broker`.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshift.kafka_security import (  # noqa: F401 -- the clients' one import of them
    BrokerError,
    client_options,
    environment_security,
    jaas_line,
    spark_options,
)

from .broker_watch import nobody_listens, reachable


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
