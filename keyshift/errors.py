"""Error types every layer shares, kept free of heavy imports so the CLI starts fast."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type or out of range."""
