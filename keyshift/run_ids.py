"""What a run id may be: one name that is safe as a folder of its own.

A run id names folders — ``<warehouse>/_runs/<run>``, ``_checkpoints/<run>``,
``_engine_state/<run>``, ``<home>/runs/<run>`` (where ``report`` writes) — so an id of
``..``, ``.`` or one holding a ``/`` would put a run's files in the warehouse root or
anywhere else (issue 46 item 7: ``run --run-id ..`` wrote into the warehouse root). Every
command that takes a run id from a user checks it here, as its argparse ``type``
(:func:`run_id_arg`), so the refusal is argparse's one line, exit status 2, naming the option.
"""

from __future__ import annotations

import argparse
import re

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # whole: see check_run_id
RULE = ("1-128 letters, digits, '.', '_' or '-', starting with a letter or digit "
        "(it names the run's folders)")


def check_run_id(value: str) -> str:
    """``value`` if it is a run id (:data:`RUN_ID`, matched whole: a trailing newline is not
    allowed either), else :class:`ValueError` saying what one is."""
    if not isinstance(value, str) or RUN_ID.fullmatch(value) is None:
        raise ValueError(f"a run id is {RULE}, got {value!r}")
    return value


def run_id_arg(value: str) -> str:
    """:func:`check_run_id` as an argparse ``type``: ``--run-id``/``RUN_ID`` of every command."""
    try:
        return check_run_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
