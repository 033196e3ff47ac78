"""The one error type of the elasticity package, so the CLI can name the bad field."""

from __future__ import annotations


class ElasticInputError(ValueError):
    """Bad planner input or parameter; ``field`` names it (``windows.lat_mean``, ``costs.mc``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
