"""The one interface of everything that picks an engine count per window (the path scaler,
:class:`~keyshift.elastic.path_scaler.PathScaler`, and every baseline), and the user limits
they all obey.

A scaler is called once at the start of each window with the previous window's
:class:`Observation` (None at the first) and a forecast function; it returns a
:class:`ScalingDecision`. Limits (min/max engines, cooldown, maximum step, dry run) are
applied here, once, so that the baselines and the planner are compared under the same
rules and every clamp shows up in the decision's reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from keyshift.elastic.cost import Forecast
from keyshift.elastic.decision import Observation, ScalingDecision
from keyshift.elastic.errors import ElasticInputError
from keyshift.elastic.planner import check_count

ForecastFn = Callable[[int, int], Forecast]
"""(first window, number of windows) → per-window forecasts of In and Lat(1..K)."""


class Scaler(ABC):
    """Base of all scalers. Subclasses set ``name`` and implement :meth:`_propose`.

    Like a fitted scikit-learn estimator, a scaler keeps run state in attributes ending in
    ``_`` (windows since the last change, the current path); :meth:`reset` clears it.
    """

    name = "scaler"

    def __init__(
        self,
        max_engines: int = 0,
        min_engines: int = 0,
        cooldown_windows: int = 0,
        max_step: int = 0,
        dry_run: bool = False,
    ) -> None:
        self.max_engines = max_engines
        self.min_engines = min_engines
        self.cooldown_windows = cooldown_windows
        self.max_step = max_step
        self.dry_run = dry_run

    def reset(self) -> Scaler:
        self.since_change_ = None
        return self

    def resume(self, since_change: int | None) -> Scaler:
        """Continue after a restart from the recorded windows since the last change."""
        self.since_change_ = since_change
        return self

    def bounds(self) -> tuple[int, int]:
        hi = check_count("max_engines", self.max_engines, low=1)
        lo = check_count("min_engines", self.min_engines) or 1
        if lo > hi:
            raise ElasticInputError("min_engines", f"{lo} exceeds max_engines {hi}")
        return lo, hi

    def decide(
        self,
        window: int,
        engines_now: int,
        observed: Observation | None = None,
        forecast: ForecastFn | None = None,
    ) -> ScalingDecision:
        """The engine count for ``window``, given what ran and was seen in the one before."""
        if not hasattr(self, "since_change_"):
            self.reset()
        lo, hi = self.bounds()
        cooldown = check_count("cooldown_windows", self.cooldown_windows)
        step = check_count("max_step", self.max_step)
        target, reason, extra = self._propose(window, engines_now, observed, forecast)
        notes = []
        clamped = min(max(target, lo), hi)
        if clamped != target:
            notes.append(f"clamped {target} to [{lo}, {hi}]")
        if step and abs(clamped - engines_now) > step:
            stepped = engines_now + step * (1 if clamped > engines_now else -1)
            notes.append(f"max_step {step}: {clamped} → {stepped}")
            clamped = stepped
        since = cooldown if self.since_change_ is None else self.since_change_
        if clamped != engines_now and cooldown and since < cooldown:
            notes.append(f"cooldown: {since} of {cooldown} windows since the last change")
            clamped = engines_now
        if notes:
            reason = f"{reason}; " + "; ".join(notes)
        applied = engines_now if self.dry_run else clamped
        self.since_change_ = 0 if applied != engines_now else min(since + 1, cooldown)
        return ScalingDecision(
            window=window,
            policy=self.name,
            engines_before=engines_now,
            proposed=clamped,
            engines_after=applied,
            reason=reason,
            dry_run=bool(self.dry_run),
            **extra,
        )

    @abstractmethod
    def _propose(
        self,
        window: int,
        engines_now: int,
        observed: Observation | None,
        forecast: ForecastFn | None,
    ) -> tuple[int, str, dict]:
        """(target engines, reason, extra decision fields) before limits are applied."""
