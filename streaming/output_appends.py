"""A micro-batch's complex events into ``events_out``: committed by the driver through
delta-rs when they are light, appended by Spark's executors otherwise.

Why the driver: on a cheap operator a batch's outputs are a few thousand small rows, and
Spark's append of them from the engine stage's cached result (a write job, a Parquet file, a
log commit in the JVM) took 0.27 s of a 0.92 s warm batch of 20,000 events and 0.38 s of
1.84 s at 100,000 (``python -m bench stream``), the largest cost a batch paid whatever its
operator did. A separate job fetching the rows as Arrow from the cache took 0.1-0.2 s of
that alone, so the engine tasks hand their outputs to the driver in the job that brings
their small rows (tag ``OUT_FETCHED``), and delta-rs commits them in 0.01-0.03 s: a warm
batch's ``commit`` stage went from 0.33 to 0.11 s at 20,000 and from 0.46 to 0.14 s at
100,000, measured the same evening (bench/results/stream_engines.md).

What keeps the driver's share bounded: a task fetches its outputs only when they weigh at
most ``HELD_BYTES`` / slots (:func:`~keyshift.streaming.engines.output_weight`), so a batch
never brings the driver more than :data:`~keyshift.streaming.staging.HELD_BYTES`; a heavier
task's rows stay with the executors, and so the whole batch is Spark's to append.

Spark's executors append the batch's rows from the cached engine result (``OUT`` and
``OUT_FETCHED`` alike, so nothing is left behind), as before:

* in the first batch a process runs, which a predecessor may have committed already:
  :class:`~keyshift.lakehouse.delta.RunAppends` looks for its rows first (the tasks are told
  to fetch nothing);
* when any task's outputs were too heavy to fetch;
* for a table delta-rs cannot write as Spark would (a warehouse not on this machine's disk,
  writer features, other columns than the contract's:
  :class:`~keyshift.lakehouse.delta_arrow.FastWriteUnavailable`), learned once and said once.

Either way the batch's rows land in one commit or none: delta-rs checks what it can refuse
before writing, and a write it starts and cannot finish is a
:class:`~keyshift.lakehouse.delta.TableWriteError` that fails the batch, which the restart
runs again on the look-first path. ``dead_letter`` rows are rare and always Spark's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keyshift.config import Config
from keyshift.lakehouse.delta import RunAppends
from keyshift.lakehouse.delta_arrow import FastWriteUnavailable, append_arrow
from keyshift.lakehouse.logs import say

from .staging import HELD_BYTES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

DELTA_RS, SPARK = "delta-rs", "spark"


class OutputAppends:
    """One attempt's appends of its batches' outputs (a restart in place makes a new one,
    with its new :class:`RunAppends`)."""

    def __init__(self, cfg: Config, appends: RunAppends, held_bytes: int | None = None) -> None:
        self.cfg, self.appends = cfg, appends
        self.held_bytes = HELD_BYTES if held_bytes is None else held_bytes
        self.spark_only: dict[str, str] = {}  # table → why delta-rs cannot write it

    def fetch_bytes(self, batch_id: int, slots: int) -> int:
        """What one engine task of batch ``batch_id`` may hand the driver (its outputs'
        weight at most; 0: the executors keep them all)."""
        if self.appends.may_exist(batch_id) or "events_out" in self.spark_only:
            return 0
        return self.held_bytes // max(slots, 1)

    def append(self, name: str, frame: DataFrame, batch_id: int,
               rows: pa.Table | None = None) -> str:
        """Table ``name``'s rows of batch ``batch_id`` appended once: ``rows`` (all of them,
        fetched by the driver, in the contract's schema) through delta-rs, else ``frame``
        (the executors' view of the same rows) through Spark. Returns who wrote them
        (:data:`DELTA_RS` or :data:`SPARK`)."""
        # may_exist again: rows a task fetched must still never skip the look-first path
        if rows is not None and name not in self.spark_only \
                and not self.appends.may_exist(batch_id):
            try:
                append_arrow(self.cfg, name, rows)
                return DELTA_RS
            except FastWriteUnavailable as exc:  # refused before anything was written
                self.spark_only[name] = str(exc)
                say(f"keyshift: {self.appends.run_id}: {name} is appended by Spark from "
                    f"now on: {exc}")
        self.appends.append(name, frame, batch_id)
        return SPARK
