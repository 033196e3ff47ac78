"""``keyshift config``: print the effective configuration (after file and environment).

Secrets are masked: ``kafka.sasl_password`` is a SecretStr (dumped as ``**********``) and a
password inside a URI (``http://user:pw@host``) is replaced by ``***``, so the output can be
pasted into a ticket or a log.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from keyshift.config import load_config

SUMMARY = "print the configuration in effect as JSON"

_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/:@\s]+):[^/@\s]*@")


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("config", help=SUMMARY)
    p.set_defaults(func=run)
    return p


def mask_uri_passwords(value: Any) -> Any:
    """``value`` with the password of every ``scheme://user:password@`` replaced by ***
    (strings inside dicts and lists too)."""
    if isinstance(value, str):
        return _URI_PASSWORD.sub(r"\g<head>:***@", value)
    if isinstance(value, dict):
        return {k: mask_uri_passwords(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_uri_passwords(v) for v in value]
    return value


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    out = cfg.model_dump(mode="json")  # SecretStr fields come out as **********
    out["resolved"] = {
        "home": str(cfg.home_path),
        "warehouse": str(cfg.warehouse_path),
        "cache": str(cfg.cache_path),
        "mlflow_tracking_uri": cfg.mlflow_tracking_uri,
        "kafka_bootstrap": cfg.kafka.bootstrap,
    }
    print(json.dumps(mask_uri_passwords(out), indent=2))
    return 0
