"""Per-connection blocking-rate functions F_j on the weight grid 0..R (blocking-rate §5.1, §5.4).

Data arrive sparsely: in one collection interval a connection yields a single sample, at its
*current* weight, and drafting (§4.2) means usually only the draft leader blocks. So each
function keeps "raw" samples on the grid (NaN where never observed, (0, 0) assumed), smooths a
new sample into the old one at the same weight, forces the samples non-decreasing by monotone
(isotonic) regression, and fills the rest of the grid by linear interpolation and, beyond the
last sample, linear extrapolation. A tiny tilt ``delta · w`` makes every function strictly
increasing so Fox's greedy spreads weight evenly across connections that never block.

Exploration (§5.4) is a geometric decay of the raw samples *beyond* each connection's current
weight: stale evidence that a connection cannot take more load fades, so the optimiser tries
it again and fresh samples replace the old ones.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression

from keyshift.split.errors import SplitInputError


def fit_function(
    weights: np.ndarray, rates: np.ndarray, units: int, delta: float = 0.0
) -> np.ndarray:
    """The blocking-rate function on 0..units from samples (weight, blocking rate).

    Samples at the same weight are averaged; (0, 0) is assumed (and overrides a sample at 0:
    a connection that gets nothing cannot block). Returns ``units + 1`` non-decreasing values.
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    b = np.asarray(rates, dtype=np.float64).reshape(-1)
    if w.shape != b.shape:
        raise SplitInputError("samples", "weights and blocking rates differ in length")
    if not (np.isfinite(w).all() and np.isfinite(b).all()):
        raise SplitInputError("samples", "must hold finite numbers")
    if (w < 0).any() or (w > units).any():
        raise SplitInputError("samples", f"weights must lie in [0, {units}]")
    if (b < 0).any():
        raise SplitInputError("samples", "blocking rates must be ≥ 0")
    keep = w > 0
    w, b = w[keep], b[keep]
    grid_w, inverse = np.unique(w, return_inverse=True)
    sums = np.bincount(inverse, weights=b, minlength=grid_w.size)
    counts = np.bincount(inverse, minlength=grid_w.size)
    xs = np.concatenate(([0.0], grid_w))
    ys = np.concatenate(([0.0], sums / np.maximum(counts, 1)))
    return _curve(xs, ys, np.concatenate(([1.0], counts.astype(np.float64))), units, delta)


def _curve(xs: np.ndarray, ys: np.ndarray, weights: np.ndarray, units: int, delta: float) -> np.ndarray:
    """Monotone regression of sorted samples, then linear inter/extrapolation on 0..units."""
    grid = np.arange(units + 1, dtype=np.float64)
    if xs.size > 1 and (np.diff(ys) < 0).any():  # usually already monotone: skip the solver
        ys = isotonic_regression(ys, weights=weights, increasing=True).x
        ys[0] = 0.0 if ys[0] > 0.0 else ys[0]
        ys = np.maximum.accumulate(ys)
    out = np.interp(grid, xs, ys)
    if xs.size > 1:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        beyond = grid > xs[-1]
        out[beyond] = ys[-1] + slope * (grid[beyond] - xs[-1])
    if delta:
        out = out + delta * grid
    return out


class BlockingRateModel:
    """Raw blocking-rate samples of N connections on the grid 0..units, and their functions.

    ``smoothing`` is the weight of a new sample against the old one at the same grid point
    (exponential smoothing); ``delta`` is the tilt that forces strict monotonicity.
    """

    def __init__(self, connections: int, units: int = 1000, smoothing: float = 0.5, delta: float = 1e-6) -> None:
        if connections < 1:
            raise SplitInputError("connections", "must be ≥ 1")
        if units < 1:
            raise SplitInputError("units", "must be ≥ 1")
        if not 0.0 < smoothing <= 1.0:
            raise SplitInputError("smoothing", "must be in (0, 1]")
        if delta < 0:
            raise SplitInputError("delta", "must be ≥ 0")
        self.units = int(units)
        self.smoothing = float(smoothing)
        self.delta = float(delta)
        self.raw = np.full((connections, self.units + 1), np.nan)
        self.raw[:, 0] = 0.0
        self._fitted = np.zeros_like(self.raw)
        self._dirty = np.ones(connections, dtype=bool)  # rows whose samples changed since the fit

    @classmethod
    def from_samples(
        cls, samples: list[np.ndarray], units: int, smoothing: float = 0.5, delta: float = 1e-6
    ) -> "BlockingRateModel":
        """A model whose raw grid holds the mean of the given (weight, rate) samples per unit.

        ``samples[j]`` is an array of shape (k, 2); weights are rounded to whole units.
        """
        model = cls(len(samples), units, smoothing, delta)
        for j, pts in enumerate(samples):
            pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
            if not np.isfinite(pts).all():
                raise SplitInputError(f"connections[{j}].samples", "must hold finite numbers")
            if ((pts[:, 0] < 0) | (pts[:, 0] > units)).any():
                raise SplitInputError(f"connections[{j}].samples", f"weights must lie in [0, {units}]")
            if (pts[:, 1] < 0).any():
                raise SplitInputError(f"connections[{j}].samples", "blocking rates must be ≥ 0")
            cols = np.rint(pts[:, 0]).astype(np.int64)
            keep = cols > 0
            sums = np.bincount(cols[keep], weights=pts[keep, 1], minlength=units + 1)
            counts = np.bincount(cols[keep], minlength=units + 1)
            seen = counts > 0
            model.raw[j, seen] = sums[seen] / counts[seen]
        model._dirty[:] = True
        return model

    @property
    def connections(self) -> int:
        return int(self.raw.shape[0])

    def observe(self, weights: np.ndarray, rates: np.ndarray, zeros: float | None = None) -> None:
        """Smooth one interval's blocking rates in, each at its connection's current weight.

        A connection that did not block says less than one that did: under drafting it may
        merely have been drafting behind the leader. So a zero reading is smoothed in with its
        own weight ``zeros`` (default: ``smoothing``, like any sample; 0 skips zero readings,
        as in the paper, where an interval usually yields one sample, the draft leader's).
        """
        zeros = self.smoothing if zeros is None else float(zeros)
        w = np.asarray(weights, dtype=np.int64)
        b = np.asarray(rates, dtype=np.float64)
        if w.shape != (self.connections,) or b.shape != (self.connections,):
            raise SplitInputError("rates", f"needs one value per connection ({self.connections})")
        if not np.isfinite(b).all() or (b < 0).any():
            raise SplitInputError("rates", "must be finite and ≥ 0")
        rows = np.flatnonzero((w > 0) & ((b > 0) | (zeros > 0)))  # weight 0 sends nothing
        cols = w[rows]
        old = self.raw[rows, cols]
        a = np.where(b[rows] > 0, self.smoothing, zeros)
        new = np.where(np.isnan(old), b[rows], (1 - a) * old + a * b[rows])
        self._dirty[rows[~(old == new)]] = True
        self.raw[rows, cols] = new

    def decay(self, weights: np.ndarray, fraction: float) -> None:
        """Lower every raw sample beyond each connection's current weight by ``fraction``."""
        if fraction <= 0:
            return
        beyond = np.arange(self.units + 1)[None, :] > np.asarray(weights, dtype=np.int64)[:, None]
        beyond &= self.raw > 0  # NaN and zero samples do not change
        self._dirty |= beyond.any(axis=1)
        self.raw[beyond] *= 1.0 - fraction

    def pooled(self, members: np.ndarray) -> np.ndarray:
        """One function from the samples of several connections (clustering, §5.3).

        At each weight the members' blocking samples are averaged; zero samples count only
        where no member blocked: under drafting, the members that did not block were
        probably drafting behind the one that did, and they run at the same speed.
        """
        raw = self.raw[np.asarray(members)]
        raw = np.where((raw == 0) & (raw > 0).any(axis=0) & (np.arange(raw.shape[1]) > 0), np.nan, raw)
        seen = ~np.isnan(raw)
        counts = seen.sum(axis=0)
        cols = np.flatnonzero(counts)
        means = np.nansum(raw[:, cols], axis=0) / counts[cols]
        return _curve(cols.astype(np.float64), means, counts[cols].astype(np.float64), self.units, self.delta)

    def functions(self, tilt: bool = True) -> np.ndarray:
        """F_j on 0..units for every connection, shape (N, units + 1).

        Only rows whose samples changed since the last call are refitted: most connections
        see no blocking in most intervals (drafting), so most rows stay as they were.
        """
        for j in np.flatnonzero(self._dirty):  # one row per connection, never per tuple
            row = self.raw[j]
            cols = np.flatnonzero(~np.isnan(row))
            self._fitted[j] = _curve(cols.astype(np.float64), row[cols], np.ones(cols.size), self.units, 0.0)
        self._dirty[:] = False
        if tilt and self.delta:
            return self._fitted + self.delta * np.arange(self.units + 1)
        return self._fitted.copy()
