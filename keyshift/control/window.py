"""Collect: the one window-statistics type every driver fills (the Spark job per batch, the
simulator and the replay per window), and the scaler's sample of a finished window.

A statistic window Δ is what the loop decides on. The job fills it batch by batch
(:meth:`WindowStats.add_batch`), the simulator and the replay hand over a finished one
(:meth:`WindowStats.measured`); the loop never asks where the numbers came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np


@dataclass(frozen=True)
class WindowSample:
    """One finished window as the scaler measured it: its start (epoch s), the tuples in
    (In), seconds one engine spent per tuple (Lat; None: no tuple was timed) and the live
    engines that ran it. The scaler's forecasters learn from these; the store keeps them."""

    t: float
    in_tuples: float
    lat_s: float | None
    engines: int


@dataclass
class WindowStats:
    """One statistic window: per-group loads (histogram Y_t) and state sizes for the
    balancer, tuples and engine work for the scaler.

    ``index`` is the window's number; it holds batches ``first_batch`` to ``last_batch``
    (keyshift.control.window_clock says where one closes); ``last_batch``, the batch that
    closes it, is the key of everything recorded about it.
    """

    index: int
    loads: np.ndarray
    state: np.ndarray
    first_batch: int = 0
    last_batch: int = 0
    tuples: float = 0.0
    engine_s: float = 0.0
    timed: float = 0.0
    t0: float | None = None
    # wall seconds the window's input arrived over, as the driver measured it (from the
    # previous window's end to this one's); None for a model's window, which is Δ long
    span_s: float | None = None
    # the last windows' histograms, oldest first, for a policy that learns from them (CLB's
    # covariance); the simulator keeps them, the job hands none
    history: np.ndarray | None = None
    # records of the input topic not yet read when the window closed (the job's Kafka lag);
    # None where no driver measures one (a model's window). The guard judges scale-outs on it
    lag: float | None = None
    # the same lag when the previous window closed: with ``lag`` it gives the records that
    # arrived but were not read (a growing backlog), which the input rate counts
    lag_before: float | None = None
    # the Kafka append times (epoch s) of the first and last tuple the window read: the
    # producers' own clock of the arrivals; None where no driver measures them
    kafka_first: float | None = None
    kafka_last: float | None = None
    # window boundaries the closing batch crossed: > 1 when one batch ran longer than Δ
    # (keyshift.control.window_clock); the decision's reason says so
    spanned: int = 1
    spanned_window_s: float | None = None  # the length of those windows (None: Δ)

    @classmethod
    def empty(cls, index: int, groups: int, first_batch: int = 0) -> WindowStats:
        return cls(index, np.zeros(groups), np.zeros(groups), first_batch, first_batch)

    @classmethod
    def measured(cls, index: int, loads: np.ndarray, in_tuples: float, lat_s: float | None,
                 t: float, state: np.ndarray | None = None) -> WindowStats:
        """A finished window from a model (replay, simulator): In and Lat known directly."""
        loads = np.asarray(loads, dtype=np.float64)
        timed = 1.0 if lat_s is not None else 0.0
        return cls(index, loads, np.zeros_like(loads) if state is None else np.asarray(state),
                   index, index, float(in_tuples), float(lat_s or 0.0), timed, float(t))

    def add_batch(self, batch_id: int, loads: np.ndarray, state: np.ndarray,
                  engine_s: float | None = None, started: datetime | float | None = None,
                  kafka_span: tuple[float, float] | None = None) -> None:
        """One batch's per-group loads and state sizes, the seconds its engine tasks worked,
        its start (the window's time for the forecasters) and the Kafka append times of its
        first and last tuple. A batch without tuples or without timing does not enter Lat."""
        if kafka_span is not None:
            first, last = kafka_span
            self.kafka_first = first if self.kafka_first is None else min(self.kafka_first,
                                                                          first)
            self.kafka_last = last if self.kafka_last is None else max(self.kafka_last, last)
        self.loads += loads
        np.maximum(self.state, state, out=self.state, where=state > 0)
        tuples = float(np.sum(loads))
        self.tuples += tuples
        self.last_batch = batch_id
        if engine_s is not None and engine_s > 0 and tuples > 0:
            self.engine_s += float(engine_s)
            self.timed += tuples
        if self.t0 is None and started is not None:
            self.t0 = started.timestamp() if isinstance(started, datetime) else float(started)

    def reopen(self, loads: np.ndarray, state: np.ndarray) -> None:
        """The batches of this window that ran before a restart (their loads from the store;
        their timings are gone, so they count as In but not as Lat)."""
        self.loads += loads
        self.state = np.maximum(self.state, state)
        self.tuples += float(np.sum(loads))

    @property
    def lat_s(self) -> float | None:
        return self.engine_s / self.timed if self.timed > 0 and self.engine_s > 0 else None

    @property
    def arrived(self) -> float:
        """Tuples that arrived in the window: those read, plus the growth of the backlog
        (``lag - lag_before``; negative while a backlog drains). Without both lags, those
        read.

        The tuples read are what the job could take, not what the producers sent: a job
        that falls behind reads at its own speed, and a scaler fed that number never sees
        the demand it cannot meet (the Flink autoscaler plans on the source's arrival rate
        for the same reason). The backlog's growth is the part it did not take."""
        if self.lag is None or self.lag_before is None:
            return self.tuples
        return max(self.tuples + self.lag - self.lag_before, 0.0)

    def input_rate(self, window_s: float) -> float:
        """In per second: the tuples that arrived in the window (:attr:`arrived`) over the
        span they arrived in.

        A window is counted in batches, not seconds: when batches run longer than the
        trigger, five of them span more than Δ and hold more than Δ's worth of input.
        Dividing by Δ then reports a rate the producers never sent (and a scaler adds
        engines because the machine is slow); the measured span does not.
        """
        span = self.span_s if self.span_s and self.span_s > 0 else window_s
        rate = self.arrived / span if span > 0 else 0.0
        produced = self.produced_rate()
        return rate if produced is None else max(rate, produced)

    def produced_rate(self, min_span_s: float = 1.0) -> float | None:
        """Tuples per second by the producers' clock: the tuples read over the Kafka append
        times they span; None without those times, or over less than ``min_span_s``.

        The backlog's growth (:attr:`arrived`) comes from Spark's lag, which is one batch
        behind: while every batch still takes all there is, a job that falls behind shows no
        backlog yet and its reads look like the demand. The append times do not lag: the
        elastic cluster bench's ramp to 70 events/s read as 51/s (507 a window) from the
        reads and as 70/s from the append times, two windows before the backlog showed."""
        if self.kafka_first is None or self.kafka_last is None or self.tuples < 2:
            return None
        span = self.kafka_last - self.kafka_first
        return (self.tuples - 1) / span if span >= min_span_s else None

    def in_tuples(self, window_s: float) -> float:
        """In per window of Δ = ``window_s`` seconds (the planner's unit) at the measured rate."""
        return self.input_rate(window_s) * window_s

    def sample(self, engines: int, now: float, window_s: float | None = None) -> WindowSample:
        """The scaler's view of this window; ``now`` stands in for an unknown start. With
        ``window_s``, In is per Δ at the measured rate (:meth:`in_tuples`), else as counted."""
        tuples = self.tuples if window_s is None else self.in_tuples(window_s)
        return WindowSample(self.t0 if self.t0 is not None else now, tuples, self.lat_s,
                            engines)
