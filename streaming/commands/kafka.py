"""``keyshift kafka start|stop|status|topic create``: the local single-node KRaft broker."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from keyshift.cli import UsageError
from keyshift.config import load_config

SUMMARY = "start or stop a local Kafka broker, create topics"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("kafka", help=SUMMARY)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    start = actions.add_parser("start", help="start the broker (fetches its jars on first use)")
    start.add_argument(
        "--sasl-plain", metavar="USER:PASSWORD",
        help="client listener SASL_PLAINTEXT with PLAIN for this user (default: from config, "
             "kafka.security_protocol = SASL_PLAINTEXT with sasl_mechanism = PLAIN); clients "
             "then need kafka.sasl_username / KEYSHIFT_KAFKA__SASL_PASSWORD")
    actions.add_parser(
        "stop", help="stop the broker at kafka.host:port that keyshift started, from this home "
        "or another (SIGTERM, then SIGKILL); exit 1 when another process holds the port")
    actions.add_parser(
        "fetch-jars", help="resolve the broker's and Spark's Kafka/Delta jars into the cache "
        "now (install step; later starts need no network)")
    st = actions.add_parser("status", help="health check by a metadata request")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    topic = actions.add_parser("topic", help="create topics on the broker")
    topic_actions = topic.add_subparsers(dest="topic_action", metavar="TOPIC_ACTION")
    topic_actions.required = True
    create = topic_actions.add_parser("create", help="create a topic on the broker")
    create.add_argument("name", nargs="?", help="topic name (default: kafka.topic)")
    create.add_argument("--partitions", type=int, help="partitions (default: kafka.partitions)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from keyshift.streaming.broker import (
        Broker,
        BrokerError,
        client_options,
        create_topic,
    )

    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    broker = Broker.from_config(cfg)
    try:
        if args.action == "start":
            if getattr(args, "sasl_plain", None):
                user, sep, password = args.sasl_plain.partition(":")
                if not sep:
                    raise UsageError("--sasl-plain: expected USER:PASSWORD")
                broker = dataclasses.replace(broker, sasl_plain=(user, password))
            print(f"kafka: {broker.start()}"
                  + (f" (SASL_PLAINTEXT, PLAIN user {broker.sasl_plain[0]})"
                     if broker.sasl_plain else ""))
            return 0
        if args.action == "fetch-jars":
            from keyshift.lakehouse.jars import JarResolutionError, spark_jars

            try:
                classpath = broker.jars()
                spark = spark_jars(cfg.cache_path / "jars", cfg.spark.delta_version)
            except JarResolutionError as exc:
                raise BrokerError(str(exc)) from None
            print(f"kafka: {len(classpath.split(os.pathsep))} broker jars and {len(spark)} Spark "
                  f"jars cached in {cfg.cache_path / 'jars'}")
            return 0
        if args.action == "stop":
            print(f"kafka: {broker.stop()}")
            return 0
        if args.action == "status":
            st = broker.status()
            if args.json:
                print(json.dumps(st))
            elif st["healthy"]:
                print(
                    f"kafka: healthy at {st['bootstrap']} (pid {st['pid'] or 'not ours'}, "
                    f"cluster {st['cluster_id']}, {st['brokers']} broker(s), "
                    f"topics: {', '.join(st['topics']) or 'none'})"
                )
            else:
                hint = ""
                if st["pid"] and cfg.kafka.security_protocol == "PLAINTEXT":
                    hint = (f" (broker process {st['pid']} is running: if it was started with "
                            "--sasl-plain, set kafka.security_protocol = SASL_PLAINTEXT, "
                            "kafka.sasl_username and KEYSHIFT_KAFKA__SASL_PASSWORD)")
                print(f"kafka: not healthy: {st['error']}{hint}", file=sys.stderr)
            return 0 if st["healthy"] else 1
        name = args.name or cfg.kafka.topic
        partitions = cfg.kafka.partitions if args.partitions is None else args.partitions
        if partitions < 1:
            raise UsageError(f"--partitions: must be >= 1, got {partitions}")
        done = create_topic(broker.bootstrap, name, partitions,
                            security=client_options(cfg.kafka))
        print(f"kafka: {done}")
        return 0
    except BrokerError as exc:
        print(f"keyshift kafka {args.action}: {exc}", file=sys.stderr)
        return 1
