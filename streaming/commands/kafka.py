"""``keyshift kafka start|stop|status|topic create``: the local single-node KRaft broker.

Each action takes ``--json``: its answer as one JSON object on stdout, a failure included
(``"ok": false`` with ``"error"``, the one line on stderr as well), so scripts need not parse
sentences."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from keyshift.cli import UsageError, add_json_options, json_indent
from keyshift.config import load_config

SUMMARY = "start or stop a local Kafka broker, create topics"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("kafka", help=SUMMARY)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    start = actions.add_parser("start", help="start the broker (fetches its jars on first use)")
    add_json_options(start)
    start.add_argument(
        "--sasl-plain", metavar="USER:PASSWORD",
        help="client listener SASL_PLAINTEXT with PLAIN for this user (default: from config, "
             "kafka.security_protocol = SASL_PLAINTEXT with sasl_mechanism = PLAIN); clients "
             "then need kafka.sasl_username / KEYSHIFT_KAFKA__SASL_PASSWORD")
    add_json_options(actions.add_parser(
        "stop", help="stop the broker at kafka.host:port that keyshift started, from this home "
        "or another (SIGTERM, then SIGKILL); exit 1 when another process holds the port"))
    add_json_options(actions.add_parser(
        "fetch-jars", help="resolve the broker's and Spark's Kafka/Delta jars into the cache "
        "now (install step; later starts need no network)"))
    st = actions.add_parser("status", help="health check by a metadata request")
    add_json_options(st, "print the status as one JSON object")
    topic = actions.add_parser("topic", help="create topics on the broker")
    topic_actions = topic.add_subparsers(dest="topic_action", metavar="TOPIC_ACTION")
    topic_actions.required = True
    create = topic_actions.add_parser("create", help="create a topic on the broker")
    create.add_argument("name", nargs="?", help="topic name (default: kafka.topic)")
    create.add_argument("--partitions", type=int, help="partitions (default: kafka.partitions)")
    add_json_options(create)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from keyshift.streaming.broker import Broker
    from keyshift.streaming.kafka_client import BrokerError

    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    broker = Broker.from_config(cfg)
    action = args.action if args.action != "topic" else f"topic {args.topic_action}"

    def answer(text: str, **fields) -> int:
        """The action's answer: one line, or with --json one object."""
        if args.json:
            print(json.dumps({"action": action, "ok": True, "result": text, **fields},
                             indent=json_indent(args)))
        else:
            print(f"kafka: {text}")
        return 0

    try:
        if args.action == "start":
            return _start(args, broker, answer)
        if args.action == "fetch-jars":
            return _fetch_jars(cfg, broker, answer)
        if args.action == "stop":
            return answer(broker.stop(), bootstrap=broker.bootstrap)
        if args.action == "status":
            return _status(args, cfg, broker)
        return _create_topic(args, cfg, broker, answer)
    except BrokerError as exc:
        if args.json:
            print(json.dumps({"action": action, "ok": False, "error": str(exc)},
                             indent=json_indent(args)))
        print(f"keyshift kafka {action}: {exc}", file=sys.stderr)
        return 1


def _start(args: argparse.Namespace, broker, answer) -> int:
    """``kafka start``: the local broker, with a SASL/PLAIN user when asked."""
    if getattr(args, "sasl_plain", None):
        user, sep, password = args.sasl_plain.partition(":")
        if not sep:
            raise UsageError("--sasl-plain: expected USER:PASSWORD")
        broker = dataclasses.replace(broker, sasl_plain=(user, password))
    started = broker.start()
    return answer(started + (f" (SASL_PLAINTEXT, PLAIN user {broker.sasl_plain[0]})"
                             if broker.sasl_plain else ""),
                  bootstrap=broker.bootstrap, pid=broker.pid(),
                  sasl_user=broker.sasl_plain[0] if broker.sasl_plain else None)


def _fetch_jars(cfg, broker, answer) -> int:
    """``kafka fetch-jars``: the broker's and Spark's jars into the cache."""
    from keyshift.lakehouse.jars import JarResolutionError, spark_jars
    from keyshift.streaming.kafka_client import BrokerError

    try:
        classpath = broker.jars()
        spark = spark_jars(cfg.cache_path / "jars", cfg.spark.delta_version)
    except JarResolutionError as exc:
        raise BrokerError(str(exc)) from None
    n = len(classpath.split(os.pathsep))
    return answer(f"{n} broker jars and {len(spark)} Spark jars cached in "
                  f"{cfg.cache_path / 'jars'}", broker_jars=n, spark_jars=len(spark),
                  cache=str(cfg.cache_path / "jars"))


def _status(args: argparse.Namespace, cfg, broker) -> int:
    """``kafka status``: healthy (exit 0) or why not (exit 1), with a SASL hint."""
    st = broker.status()
    if args.json:
        print(json.dumps(st, indent=json_indent(args)))
    elif st["healthy"]:
        print(f"kafka: healthy at {st['bootstrap']} (pid {st['pid'] or 'not ours'}, "
              f"cluster {st['cluster_id']}, {st['brokers']} broker(s), "
              f"topics: {', '.join(st['topics']) or 'none'})")
    else:
        hint = ""
        if st["pid"] and cfg.kafka.security_protocol == "PLAINTEXT":
            hint = (f" (broker process {st['pid']} is running: if it was started with "
                    "--sasl-plain, set kafka.security_protocol = SASL_PLAINTEXT, "
                    "kafka.sasl_username and KEYSHIFT_KAFKA__SASL_PASSWORD)")
        print(f"kafka: not healthy: {st['error']}{hint}", file=sys.stderr)
    return 0 if st["healthy"] else 1


def _create_topic(args: argparse.Namespace, cfg, broker, answer) -> int:
    """``kafka topic create``: the topic with its partitions."""
    from keyshift.streaming.kafka_client import client_options, create_topic

    name = args.name or cfg.kafka.topic
    partitions = cfg.kafka.partitions if args.partitions is None else args.partitions
    if partitions < 1:
        raise UsageError(f"--partitions: must be >= 1, got {partitions}")
    done = create_topic(broker.bootstrap, name, partitions, security=client_options(cfg.kafka))
    return answer(done, topic=name, partitions=partitions)
