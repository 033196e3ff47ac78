"""Fault injection: where the fault tests SIGKILL a running job (issue 16, item 1).

A crash test that kills "after some seconds" lands wherever the machine happens to be, and
mostly between batches. These named points let a test kill the job inside a chosen phase of
a chosen batch, and draw the points at random. The job reports each phase it reaches to the
:class:`Phases` hook it was given (``JobOptions.phases``); a production run gets
:data:`NO_FAULTS`, which does nothing. ``keyshift run`` gives :class:`KillAt` instead when
``KS_FAULT_KILL_AT`` is set (``phase@batch``: the first time the job reaches ``phase`` in a
batch ≥ ``batch``; a bad value is refused at start). The whole process group dies (the
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
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

ENV = "KS_FAULT_KILL_AT"  # not KEYSHIFT_*: those are config keys
PHASES = ("before_engines", "engines", "migration", "controller", "writes", "after_batch")


class Phases(Protocol):
    """What the job tells of its progress through a micro-batch (the phases above)."""

    def reached(self, phase: str, batch_id: int) -> None:
        """The job is at ``phase`` of batch ``batch_id``."""

    def during(self, phase: str, batch_id: int,
               after_s: float = 0.2) -> AbstractContextManager[None]:
        """The job runs ``phase`` of batch ``batch_id`` inside the ``with`` block."""


class _NoFaults:
    def reached(self, phase: str, batch_id: int) -> None:
        return None

    def during(self, phase: str, batch_id: int,
               after_s: float = 0.2) -> AbstractContextManager[None]:
        return nullcontext()


NO_FAULTS: Phases = _NoFaults()


class KillAt:
    """SIGKILL the process group the first time the job reaches ``phase`` in a batch ≥
    ``batch`` (``during``: ``after_s`` into the block, its Spark job in flight, or at its
    end if it ends sooner)."""

    def __init__(self, spec: str) -> None:
        want, _, at = spec.partition("@")
        if want not in PHASES or not at.lstrip("-").isdigit():
            raise ValueError(f"{ENV}={spec!r}: expected PHASE@BATCH, PHASE one of {PHASES}")
        self.spec, self.phase, self.batch = spec, want, int(at)

    def _armed(self, phase: str, batch_id: int) -> bool:
        return phase == self.phase and batch_id >= self.batch

    def _kill(self) -> None:
        print(f"keyshift: {ENV}={self.spec}: killing the job now", flush=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def reached(self, phase: str, batch_id: int) -> None:
        if self._armed(phase, batch_id):
            self._kill()

    def during(self, phase: str, batch_id: int,
               after_s: float = 0.2) -> AbstractContextManager[None]:
        if not self._armed(phase, batch_id):
            return nullcontext()
        return _KillTimer(after_s, self._kill)


class _KillTimer:
    """Kills ``after_s`` into the block, or as the block ends if it ends sooner: a phase that
    got faster than the delay (a batch's output commit through delta-rs takes 0.02 s) is
    still killed inside it, before anything after it runs."""

    def __init__(self, after_s: float, kill) -> None:
        self._kill, self._once = kill, threading.Lock()
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        if self._once.acquire(blocking=False):
            self._kill()

    def __enter__(self) -> None:
        self._timer.start()

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        self._fire()


def phases_from_env(env: Mapping[str, str] | None = None) -> Phases:
    """:class:`KillAt` when ``KS_FAULT_KILL_AT`` is set (a bad value: ValueError), else
    :data:`NO_FAULTS`."""
    spec = (os.environ if env is None else env).get(ENV)
    return KillAt(spec) if spec else NO_FAULTS
