"""Which workload a run, a metrics row and a registered forecaster belong to.

A forecast is only worth following on the stream it was fitted on: the input rate is the
topic's, the latency the operator's. So the champions are registered per *workload*, and a
job follows only its own. A workload is the name the user gives (``mlflow.workload``), else
``<operator>.<topic>`` of the run: two jobs of one operator on two topics, or of two operators
on one topic, forecast apart. An operator's parameters are not part of it (a rule's threshold
changes little of its cost); a user who runs one operator at very different costs gives each
run its own name.

Registered model names may not hold ``/`` or ``:`` (MLflow), ``@`` names an alias in a
``models:/`` URI, and a user's operator is often ``pkg.module:Class``: a workload is kept to
letters, digits and ``. _ -``, anything else becoming ``-``.
"""

from __future__ import annotations

import re

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]+")
MAX_LENGTH = 120  # a registered model's name holds the base name too


class WorkloadNameError(ValueError):
    """A workload name the user gave cannot name registered models."""


def slug(text: str) -> str:
    """``text`` in the characters a registered model's name takes."""
    return _NOT_ALLOWED.sub("-", text.strip()).strip("-")


def workload_of(app: str, topic: str, given: str = "") -> str:
    """The run's workload: ``given`` when set (checked, not rewritten: a user's name is used
    as typed or refused), else ``<operator>.<topic>``."""
    if given:
        return check_workload(given)
    name = slug(f"{slug(app)}.{slug(topic)}")
    return name[:MAX_LENGTH]


def check_workload(name: str) -> str:
    """``name`` when it can name registered models; else a :class:`WorkloadNameError`."""
    if not name or slug(name) != name or len(name) > MAX_LENGTH:
        raise WorkloadNameError(
            f"workload: {name!r} must be 1-{MAX_LENGTH} letters, digits and '.', '_', '-' "
            f"(not at either end), e.g. {slug(name)[:MAX_LENGTH] or 'fraud.payments'!r}")
    return name


def registered_name(base: str, workload: str) -> str:
    """The registered model of ``base`` (the input-rate or latency forecaster) for one
    workload: ``keyshift-input-rate.fsd.events``."""
    return f"{base}.{check_workload(workload)}"


def workload_from_name(base: str, name: str) -> str | None:
    """The workload of a registered model of ``base``, None when ``name`` is not one."""
    prefix = f"{base}."
    return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else None

