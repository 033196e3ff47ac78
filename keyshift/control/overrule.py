"""Measured demand overrules a forecast that is plainly wrong (issue 41, item 0).

Why: the planner (elastic-cep Algorithm 1) sizes N from forecasts. A forecast trained on
another workload, or a fallback with too little history, can stay near zero while the
engines fall behind: a run kept 1 engine for minutes with every path rejected while its
batches lagged. A stream operator cannot wait for the model to learn, so the windows' own
measurements bound the scaler's choice, as DS2 and the Flink autoscaler size from the
measured rate:

* a window's need = ceil(In x Lat / (Δt x target_utilisation)): In its arrivals (tuples per
  Δ, the backlog's growth included, :meth:`keyshift.control.WindowStats.in_tuples`), Lat the
  measured seconds an engine spends per tuple. For the window just closed the backlog beyond
  one window's input is added, to be drained over the next window;
* **a sustained rise**: the last ``rise_windows`` windows each needed more engines than ran
  them, and the scaler's choice is below the last need: N rises to it. A rise waits fewer
  windows than a fall (one by default), as the Flink autoscaler scales up at once and down
  only after an interval: a window's need is already a mean over its batches, and a
  scale-out late by a window costs a window's backlog, which a scale-out early by a window
  does not (the fall rule returns the engines two windows later);
* **a sustained fall**: the last ``windows`` windows each needed fewer engines than ran them,
  nothing is backlogged, and the scaler's choice is above the last need: N falls to it;
* **a scale-in below the need**: the scaler scales in below what the window just closed
  needed (its backlog included): N stays at that need (at most where it was). A forecast
  that sees the ramp's end while a backlog drains would otherwise take engines away from
  it (the elastic cluster bench's first run did, at batch 26).

One window that disagrees changes nothing downwards (a lull, a fast batch). The rule reads only the
windows the scaler remembers (:attr:`keyshift.control.ScalerStep.history`, rebuilt from the
control store on a restart) and the lag of the window just closed, so a restarted run
decides as the uninterrupted one. The decision's reason says when the measurement overruled
the scaler and by how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from keyshift.elastic.decision import ScalingDecision

from .window import WindowSample


@dataclass(frozen=True)
class Overrule:
    """The bound of measured demand on a scaler's N. ``windows`` 0 turns it off;
    ``rise_windows`` (None: as ``windows``) is how many short windows a rise waits for."""

    windows: int
    window_s: float
    target_utilisation: float = 0.8
    lo: int = 1
    hi: int = 1_000_000
    rise_windows: int | None = None

    def _trend(self, history: Sequence[WindowSample], n: int,
               lag: float | None) -> list[tuple[int, WindowSample]] | None:
        """(need, window) of the last ``n`` windows, the last one with its backlog; None
        when there are fewer or one timed no tuple."""
        if n <= 0 or len(history) < n:
            return None
        recent = list(history[-n:])
        needs = [self.need(s) for s in recent[:-1]] + [self.need(recent[-1], lag)]
        if any(x is None for x in needs):
            return None
        return list(zip(needs, recent, strict=True))  # type: ignore[arg-type]

    def need(self, sample: WindowSample, lag: float | None = None) -> int | None:
        """Engines a window's arrivals (and ``lag``'s backlog beyond one window) need at the
        target utilisation; None when the window timed no tuple."""
        if sample.lat_s is None or sample.lat_s <= 0:
            return None
        backlog = max((lag or 0.0) - sample.in_tuples, 0.0)
        work = (sample.in_tuples + backlog) * sample.lat_s
        n = math.ceil(work / (self.window_s * self.target_utilisation) - 1e-9)
        return min(max(n, self.lo), self.hi)

    def apply(self, d: ScalingDecision, history: Sequence[WindowSample],
              lag: float | None) -> ScalingDecision:
        """``d`` as the measurement bounds it: ``history`` ends with the window just closed
        (whose backlog is ``lag``); unchanged while the windows disagree or are too few."""
        if self.windows <= 0 or not history:
            return d
        last = history[-1]
        now = self.need(last, lag)
        if now is not None and d.engines_after < d.engines_before and now > d.engines_after:
            # a scale-in below what the window just closed needed (its backlog included):
            # one window is enough to hold it, a scale-in only waits
            held = min(now, d.engines_before)
            return replace(d, proposed=held, engines_after=held, reason=(
                f"measured demand holds the scaler's scale-in ({d.engines_before} -> "
                f"{d.engines_after}): arrivals {last.in_tuples:.0f}/window and a backlog of "
                f"{lag or 0:.0f} need {now} engines at {self.target_utilisation:.0%}; "
                f"{d.reason}"))
        said = (f"measured demand overrules the scaler ({d.engines_after}): arrivals "
                f"{last.in_tuples:.0f}/window")
        util = (last.in_tuples * last.lat_s / (self.window_s * max(last.engines, 1))
                if last.lat_s else 0.0)
        rise_n = self.windows if self.rise_windows is None else self.rise_windows
        rise = self._trend(history, rise_n, lag)
        if rise and all(n > s.engines for n, s in rise) and rise[-1][0] > d.engines_after:
            now = rise[-1][0]
            return replace(d, proposed=now, engines_after=now, reason=(
                f"{said} and a backlog of {lag or 0:.0f} need {now} engines at "
                f"{self.target_utilisation:.0%} (utilisation now {util:.0%}; "
                f"{rise_n} window{'s' * (rise_n != 1)} in a row short); {d.reason}"))
        fall = self._trend(history, self.windows, lag)
        backlogged = (lag or 0.0) > max(last.in_tuples, 1.0)
        if fall and all(n < s.engines for n, s in fall) and not backlogged \
                and fall[-1][0] < d.engines_after:
            now = fall[-1][0]
            return replace(d, proposed=now, engines_after=now, reason=(
                f"{said} with no backlog need {now} engines at "
                f"{self.target_utilisation:.0%} (utilisation now {util:.0%}; "
                f"{self.windows} windows in a row over-provisioned); {d.reason}"))
        return d
