"""Error types every layer shares, kept free of heavy imports so the CLI starts fast."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class FieldError(ValueError):
    """Bad input whose message starts with the field at fault (``costs.mc: must be >= 0``),
    so every command can print it as its one-line error. Each layer subclasses it under its
    own name so callers can catch one layer's errors."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
