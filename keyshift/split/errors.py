"""One error type for bad input to the weighted split, so the CLI can name the field."""

from __future__ import annotations

from keyshift.errors import FieldError


class SplitInputError(FieldError):
    """Bad input to the weighted split; ``field`` names the offending input."""
