"""The ``[kafka]`` security keys as client settings: kafka-python keyword arguments for the
admin client, the producer and the offset readers, and Spark Kafka source options for the
streaming job and the batch jobs that read a topic. Secrets never appear in a message:
errors name keys, not values. Pure: no Kafka client is imported here, so the batch layer
(which reads topics through Spark) and the speed layer share one translation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keyshift.config import KafkaConfig
from keyshift.errors import ConfigError


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
