"""Feature vectors of the two forecasters (elastic-cep §III-B), built in ONE place so that the
nightly training job and the online planner see exactly the same columns in the same units.

Input rate GP:  x = (timestamp, time of day, day of week)
Latency GP:     x = (timestamp, time of day, day of week, engines, log tuples per engine)

The timestamp lets the GP follow the short-term trend; time of day and day of week tie a
future window to the same hour of earlier days and weeks (the paper's argument for them); the
engine count is in the latency model only, because latency depends on it and the input rate
does not. The window's size, log(1 + In / engines), is in the latency model because latency
per tuple is mostly fixed cost (task start, state load) divided by the tuples of the window:
a nearly empty window has a high per-tuple latency that says nothing about slow engines, and
without this feature the GP read it as such and the planner added engines after a drop.
Units are plain (epoch seconds, hours, days, engines): the GPs standardise their
inputs themselves, so a stored model never depends on how a caller scaled its features.
Times are read as UTC.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from keyshift.errors import FieldError
from keyshift.schemas import TABLES

RATE_FEATURES: tuple[str, ...] = ("timestamp", "time_of_day", "day_of_week")
LATENCY_FEATURES: tuple[str, ...] = RATE_FEATURES + ("engines", "log_tuples_per_engine")
TIMESTAMP_COLUMN = 0  # index of the timestamp in both feature vectors (seasonal models use it)

METRICS_COLUMNS = (  # the columns of `metrics` the features are built from
    "window_start", "input_rate", "latency_s", "engines", "events_in")
_DAY_S = 86_400.0


class FeatureError(FieldError):
    """Input to feature building is unusable; the message names the field."""


def to_epoch_seconds(timestamps: Any, field: str = "timestamps") -> np.ndarray:
    """Epoch seconds (float64, UTC) from datetimes, ISO strings or numbers (already seconds)."""
    arr = timestamps.to_numpy() if isinstance(timestamps, (pd.Series, pd.Index)) else timestamps
    arr = np.asarray(arr)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size == 0:
        return np.empty(0, dtype=np.float64)
    if np.issubdtype(arr.dtype, np.number) and not np.issubdtype(arr.dtype, np.timedelta64):
        secs = arr.astype(np.float64)
    else:
        try:
            parsed = pd.to_datetime(pd.Series(arr), utc=True)
        except (ValueError, TypeError) as exc:
            raise FeatureError(field, f"not parseable as times ({exc})") from None
        if parsed.isna().any():
            raise FeatureError(field, f"{int(parsed.isna().sum())} missing time value(s)")
        secs = (parsed - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(np.float64)
    if not np.isfinite(secs).all():
        raise FeatureError(field, "contains NaN or infinite times")
    return secs


def rate_features(timestamps: Any) -> np.ndarray:
    """Features of the input-rate GP for the given window start times, shape (n, 3)."""
    t = to_epoch_seconds(timestamps)
    tod_h = np.mod(t, _DAY_S) / 3600.0
    # 1970-01-01 was a Thursday: shift so that Monday is 0, as pandas' dayofweek.
    dow = np.mod(np.floor(t / _DAY_S) + 3.0, 7.0)
    return np.column_stack([t, tod_h, dow]).astype(np.float64)


def latency_features(timestamps: Any, engines: Any, window_tuples: Any) -> np.ndarray:
    """Features of the latency GP, shape (n, 5): the rate features, the number of live engines
    and log(1 + window_tuples / engines), the tuples one engine takes in the window (In of
    Eq. 9 spread over the engines). Scalars of ``engines`` or ``window_tuples`` broadcast."""
    base = rate_features(timestamps)
    n = base.shape[0]

    def column(values: Any, field: str) -> np.ndarray:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        if arr.size == 1 and n != 1:
            arr = np.full(n, arr[0])
        if arr.shape[0] != n:
            raise FeatureError(field, f"{arr.shape[0]} values for {n} timestamps")
        return arr

    eng = column(engines, "engines")
    tuples = column(window_tuples, "window_tuples")
    if not np.isfinite(eng).all() or (eng < 1).any():
        raise FeatureError("engines", "must be finite and >= 1")
    if not np.isfinite(tuples).all() or (tuples < 0).any():
        raise FeatureError("window_tuples", "must be finite and >= 0")
    return np.column_stack([base, eng, np.log1p(tuples / eng)])


def build_features(
    metrics: pd.DataFrame, window_s: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_rate, y_rate, X_lat, y_lat) from rows of the Delta ``metrics`` table.

    Rows are ordered by ``window_start`` so a held-out tail is the most recent history.
    Rows whose target is missing or not finite (or, for latency, not positive) are dropped (a window that crashed mid-way
    must not poison a nightly fit); a missing column is an error naming it.

    ``window_s``: the controller's statistic window. The running job writes one ``metrics``
    row per micro-batch but asks the latency GP about whole windows (In = the window's
    tuples), so the latency rows are first summed into the windows the job would have seen
    (:func:`window_latency`); without it each row is taken as one window (synthetic and
    seeded histories, whose rows are windows already).
    """
    if not isinstance(metrics, pd.DataFrame):
        raise FeatureError("metrics", f"expected a pandas DataFrame, got {type(metrics).__name__}")
    known = set(TABLES["metrics"].names)
    for col in METRICS_COLUMNS:
        if col not in known:  # guards against a schema change behind our back
            raise FeatureError(col, "is no longer a column of the metrics table schema")
        if col not in metrics.columns:
            raise FeatureError(col, "missing from the metrics rows")
    run = metrics["run_id"] if "run_id" in metrics.columns else ""
    frame = metrics.loc[:, list(METRICS_COLUMNS)].assign(_run=run)
    for col in ("input_rate", "latency_s", "engines", "events_in"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame = frame.dropna(subset=["window_start", "engines"])
    frame = frame[np.isfinite(frame["engines"].to_numpy(np.float64))]
    frame = frame.assign(_t=to_epoch_seconds(frame["window_start"], "window_start"))
    frame = frame.sort_values("_t", kind="stable")

    rate_ok = np.isfinite(frame["input_rate"].to_numpy(np.float64))
    # a window that processed no tuple records latency 0: it measured nothing
    lat_s = frame["latency_s"].to_numpy(np.float64)
    events = frame["events_in"].to_numpy(np.float64)
    lat_ok = (np.isfinite(lat_s) & (lat_s > 0) & (frame["engines"] >= 1).to_numpy()
              & np.isfinite(events) & (events >= 0))
    rate = frame[rate_ok]
    lat = frame[lat_ok]
    if window_s is not None:
        lat = window_latency(lat, window_s)
    X_rate = rate_features(rate["_t"].to_numpy())
    y_rate = rate["input_rate"].to_numpy(np.float64)
    X_lat = latency_features(lat["_t"].to_numpy(), lat["engines"].to_numpy(),
                             lat["events_in"].to_numpy(np.float64))
    y_lat = lat["latency_s"].to_numpy(np.float64)
    return X_rate, y_rate, X_lat, y_lat


def window_latency(rows: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Batch rows summed into the statistic windows the job measures, as the job sums them
    (:class:`keyshift.control.window.WindowStats`): per run, per ``window_s`` bucket of
    time and per engine count, the window starts at its first batch, In is the sum of the
    batches' tuples and Lat their engine seconds over their tuples (a tuple-weighted mean
    of the per-batch Lat). Rows of one engine count stay apart so a window's Lat is that
    of one N. ``rows`` carries the frame columns of :func:`build_features` (``_t``,
    ``_run``)."""
    if not window_s > 0 or not np.isfinite(window_s):
        raise FeatureError("window_s", f"must be a positive number of seconds, got {window_s!r}")
    if rows.empty:
        return rows
    events = rows["events_in"].to_numpy(np.float64)
    keyed = rows.assign(_bucket=np.floor(rows["_t"].to_numpy() / window_s),
                        _work=rows["latency_s"].to_numpy(np.float64) * events)
    windows = (keyed.groupby(["_run", "_bucket", "engines"], sort=False)
               .agg(_t=("_t", "min"), events_in=("events_in", "sum"), _work=("_work", "sum"))
               .reset_index())
    windows = windows[windows["events_in"] > 0]
    windows = windows.assign(latency_s=windows["_work"] / windows["events_in"])
    return windows.sort_values("_t", kind="stable").reset_index(drop=True)


def with_topic_rates(X_rate: np.ndarray, y_rate: np.ndarray, history: pd.DataFrame
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The input-rate rows with the topic's own past added (``input_rates``: a row per
    window of record timestamps, ``keyshift.jobs.topic_rates``), oldest first. Where a run
    measured a window itself its ``metrics`` row stands and the topic's row of that window is
    left out: one window, one row, whichever source is nearer the job's own measure."""
    for col in ("window_start", "window_end", "input_rate"):
        if col not in history.columns:
            raise FeatureError(col, "missing from the input_rates rows")
    start = to_epoch_seconds(history["window_start"], "window_start")
    end = to_epoch_seconds(history["window_end"], "window_end")
    rate = pd.to_numeric(history["input_rate"], errors="coerce").to_numpy(np.float64)
    ok = np.isfinite(rate) & (end > start)
    measured = np.sort(X_rate[:, TIMESTAMP_COLUMN]) if len(y_rate) else np.empty(0)
    covered = np.searchsorted(measured, end, side="left") > np.searchsorted(measured, start,
                                                                             side="left")
    keep = ok & ~covered
    X = np.vstack([X_rate.reshape(-1, len(RATE_FEATURES)), rate_features(start[keep])])
    y = np.concatenate([y_rate, rate[keep]])
    order = np.argsort(X[:, TIMESTAMP_COLUMN], kind="stable")
    return X[order], y[order]
