"""``keyshift config``: print the effective configuration (after file and environment)."""

from __future__ import annotations

import argparse
import json

from keyshift.config import load_config


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("config", help="print the effective configuration as JSON")
    p.add_argument("--config", help="TOML file (default: $KEYSHIFT_CONFIG or built-in)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    out = cfg.model_dump()
    out["resolved"] = {
        "home": str(cfg.home_path),
        "warehouse": str(cfg.warehouse_path),
        "cache": str(cfg.cache_path),
        "mlflow_tracking_uri": cfg.mlflow_tracking_uri,
        "kafka_bootstrap": cfg.kafka.bootstrap,
    }
    print(json.dumps(out, indent=2))
    return 0
