"""Kill points: where the fault-injection tests SIGKILL a running job (issue 16, item 1).

A crash test that kills "after some seconds" lands wherever the machine happens to be, and
mostly between batches. These named points let a test kill the job inside a chosen phase of
a chosen batch, and draw the points at random. Off unless ``KS_FAULT_KILL_AT`` is set
(``phase@batch``: the first time the job reaches ``phase`` in a batch ≥ ``batch``), so a
production run pays one environment lookup per point. The whole process group dies (the
driver, its JVM and the Python workers), as with ``kill -9`` of the job or a lost host.

Phases, in the order a micro-batch meets them:

- ``before_engines``: the plan and any migration are decided, no engine has run;
- ``engines``: while the engine stage runs (``migration``: the same, in a batch that moves
  groups);
- ``controller``: the window's decision is made and staged, the outputs not all written;
- ``writes``: while the batch's outputs are appended;
- ``after_batch``: the batch has ended, Spark has not committed its offsets yet.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "KS_FAULT_KILL_AT"  # not KEYSHIFT_*: those are config keys
PHASES = ("before_engines", "engines", "migration", "controller", "writes", "after_batch")


def _armed(phase: str, batch_id: int) -> bool:
    spec = os.environ.get(ENV)
    if not spec:
        return False
    want, _, at = spec.partition("@")
    if want not in PHASES or not at.lstrip("-").isdigit():
        raise ValueError(f"{ENV}={spec!r}: expected PHASE@BATCH, PHASE one of {PHASES}")
    return want == phase and batch_id >= int(at)


def _kill() -> None:
    print(f"keyshift: {ENV}={os.environ.get(ENV)}: killing the job now", flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def kill_point(phase: str, batch_id: int) -> None:
    """Die here if the test asked for this phase of this batch."""
    if _armed(phase, batch_id):
        _kill()


class kill_during:  # noqa: N801 -- used as a context manager, like contextlib's
    """Die ``after_s`` into the ``with`` block (its Spark job in flight) if asked for."""

    def __init__(self, phase: str, batch_id: int, after_s: float = 0.2) -> None:
        self._timer = threading.Timer(after_s, _kill) if _armed(phase, batch_id) else None

    def __enter__(self) -> None:
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def __exit__(self, *_: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
