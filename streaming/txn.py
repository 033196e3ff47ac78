"""Re-exports of the Delta gateway's idempotent appends for ``streaming/job.py``, which
imports them from here; everything else imports :mod:`streaming.delta`."""

from .delta import RunAppends, concurrently

__all__ = ["RunAppends", "concurrently"]
