"""One error type for bad input to the weighted split, so the CLI can name the field."""

from __future__ import annotations


class SplitInputError(ValueError):
    """Bad input to the weighted split; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
