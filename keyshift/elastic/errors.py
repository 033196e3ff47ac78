"""The one error type of the elasticity package, so the CLI can name the bad field."""

from __future__ import annotations

from keyshift.errors import FieldError


class ElasticInputError(FieldError):
    """Bad planner input or parameter; ``field`` names it (``windows.lat_mean``, ``costs.mc``)."""
