"""Guardrails on the scaler's decisions: did a scale-out help, and how N may change.

Why: a scaler adds engines on the belief that load spreads over them. When it does not —
one hot key holds most of the input, and a key stays on one engine — more engines leave the
busiest engine as busy as before, the scaler sees the same pressure and adds more, up to
``engines.max``, each step a migration for nothing. The Flink Kubernetes operator's
autoscaler meets the same problem with its "ineffective scaling" check (``ScalingExecutor``:
after a scale-up, the processing rate's actual increase over the increase the scaling
expected, against ``scaling.effectiveness.threshold``; a scale-up after an ineffective one
is blocked) and delays scale-downs (``scale-down.interval``: the first request starts the
interval, the scale-down happens at its end with the largest parallelism asked for within
it). keyshift's own version, on what the control loop measures per window:

* **Effectiveness.** A realized scale-out N0 → N1 at the end of window w expected the
  busiest engine's share of the window's input to fall by N0/N1 (the scaler's model: load
  spreads over engines) and, with a backlog, the job to read faster: N1/N0 times its rate
  of window w, or all there is to read (the backlog and what arrives meanwhile) if that
  is less. Over the next ``check_windows`` windows the share (their mean) and the read rate
  (their tuples over their span) are measured; achieved / expected below ``effectiveness``
  on either is an *ineffective* scaling: recorded with its numbers and the reason, and no
  scale-out is realized for ``cooloff_windows`` windows (doubled with each ineffective
  verdict in a row, reset by an effective one). The rate, not the lag: a burst that is
  still rising grows the lag while the added engines double what is read, and a lag
  judged alone once called such a scale-out ineffective (lag 954 -> 1003 records while
  the backlog's growth fell from 2,002 to 1,003 a window); Flink's check compares
  processing rates for the same reason. A scaler
  that asks for more engines before the verdict (it sees the same pressure) gets it at
  once, on the share of the windows so far: a hot key is caught one window after the
  scale-out instead of after a climb to ``engines.max``.
* **Scale-down delay.** A scale-in is realized only after ``scale_down_windows`` windows of
  asking for it, to the largest count asked in between (requests merged); a window that
  asks for N as it is or more drops the request.
* The maximum step of a change is the scaler's (``planner.max_step``,
  :class:`keyshift.elastic.scaler.Scaler`); a merged scale-in is one of its stepped counts.

The guard's state is one small JSON value the loop records with each window
(``control_state.guard``), so a restarted job holds what the crashed one held.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from keyshift.elastic.decision import ScalingDecision

from .evaluate import Evaluation
from .window import WindowStats

Measured = tuple[float, float, float]
"""A window after a scale-out: (tuples read, tuples arrived, span s; 0 when unknown)."""

INEFFECTIVE = "ineffective"
MAX_DOUBLINGS = 6
"""The cool-off after k ineffective verdicts in a row is cooloff_windows · 2^(k−1), at most
2^6 times: a scaler that keeps asking is asked less and less often, never never again."""
LAG_FLOOR = 0.1
"""A lag below this fraction of a window's input is noise, not a backlog to judge on."""


@dataclass(frozen=True)
class GuardSettings:
    """``[planner]`` keys of the guard (see docs/elasticity.md 'Scalings that did not help')."""

    effectiveness: float = 0.0  # 0 = no check
    check_windows: int = 2
    cooloff_windows: int = 6
    scale_down_windows: int = 0  # 0 = a scale-in is realized when asked

    def __post_init__(self) -> None:
        if not 0 <= self.effectiveness < 1:
            raise ValueError(f"planner.effectiveness: must be in [0, 1), got "
                             f"{self.effectiveness}")
        for key, low in (("check_windows", 1), ("cooloff_windows", 0),
                         ("scale_down_windows", 0)):
            value = getattr(self, key)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"planner.{_KEYS[key]}: must be an integer >= {low}, "
                                 f"got {value!r}")

    @property
    def active(self) -> bool:
        return self.effectiveness > 0 or self.scale_down_windows > 0

    @classmethod
    def from_config(cls, cfg: Any) -> GuardSettings:
        p = cfg.planner
        return cls(float(p.effectiveness), int(p.effectiveness_windows),
                   int(p.ineffective_cooloff_windows), int(p.scale_down_delay_windows))


_KEYS = {"effectiveness": "effectiveness", "check_windows": "effectiveness_windows",
         "cooloff_windows": "ineffective_cooloff_windows",
         "scale_down_windows": "scale_down_delay_windows"}


def busiest_share(evaluation: Evaluation) -> float | None:
    """The busiest engine's share of the window's input (1/N when balanced); None for a
    window without group loads (the replay's engine model) or without input."""
    if evaluation.tuples <= 0 or evaluation.max_load <= 0:
        return None
    return evaluation.max_load / evaluation.tuples


@dataclass(frozen=True)
class Expectation:
    """What a realized scale-out at the end of ``window`` expected."""

    window: int
    engines_before: int
    engines_after: int
    share_before: float | None
    lag_before: float | None
    tuples_before: float
    span_before: float = 0.0  # window w's span in seconds (0: unknown, count per window)

    @property
    def share_expected(self) -> float | None:
        if self.share_before is None:
            return None
        return self.share_before * self.engines_before / self.engines_after


@dataclass(frozen=True)
class Verdict:
    """The judgement of one scale-out, ``check_windows`` windows after it."""

    window: int  # the window whose end judged it
    expectation: Expectation
    share_after: float | None
    lag_after: float | None
    effectiveness: float  # achieved / expected: the smaller of the share's and the rate's
    threshold: float
    hold_until: int | None  # first window a scale-out may run again (ineffective only)
    rate: Rates | None = None  # the read rates, where a backlog made them judge

    @property
    def ineffective(self) -> bool:
        return self.effectiveness < self.threshold

    def reason(self) -> str:
        e = self.expectation
        parts = []
        if e.share_before is not None and self.share_after is not None:
            parts.append(f"busiest engine's share {e.share_before:.0%} -> "
                         f"{self.share_after:.0%} (expected {e.share_expected:.0%})")
        if self.rate is not None:
            parts.append(self.rate.said())
        if e.lag_before is not None and self.lag_after is not None:
            parts.append(f"lag {e.lag_before:.0f} -> {self.lag_after:.0f} records")
        what = (f"scale-out {e.engines_before} -> {e.engines_after} at window {e.window}: "
                + ", ".join(parts) + f"; {self.effectiveness:.0%} of the expected "
                f"improvement")
        if not self.ineffective:
            return f"effective {what}"
        return (f"ineffective {what} < planner.effectiveness {self.threshold:.0%}; "
                f"scale-out held until window {self.hold_until}")


@dataclass(frozen=True)
class Rates:
    """What a scale-out did to the job's read rate (per second, or per window where spans
    are unknown): before, after, and what it could have reached."""

    before: float
    after: float
    expected: float
    per: str = "s"

    @property
    def achieved(self) -> float:
        return (self.after - self.before) / (self.expected - self.before)

    def said(self) -> str:
        return (f"read {self.before:.0f} -> {self.after:.0f} tuples/{self.per} "
                f"(expected {self.expected:.0f})")

    @classmethod
    def of(cls, e: Expectation, measured: tuple[Measured, ...]) -> Rates | None:
        """The rates of a scale-out with a backlog to read; None where nothing more was
        there to read than the old engines took (no rate can judge it then)."""
        if not measured or e.lag_before is None \
                or e.lag_before <= LAG_FLOOR * max(e.tuples_before, 1.0):
            return None
        read = sum(m[0] for m in measured)
        there = sum(m[1] for m in measured) + e.lag_before  # the backlog and the arrivals
        spans = sum(m[2] for m in measured)
        timed = e.span_before > 0 and all(m[2] > 0 for m in measured)
        span_before, spans = (e.span_before, spans) if timed else (1.0, float(len(measured)))
        before = e.tuples_before / span_before
        expected = min(before * e.engines_after / e.engines_before, there / spans)
        if expected - before <= 0.02 * max(before, 1e-9):
            return None
        return cls(before, read / spans, expected, "s" if timed else "window")


@dataclass(frozen=True)
class GuardState:
    """Everything the guard carries from window to window (recorded as JSON)."""

    expecting: Expectation | None = None
    shares: tuple[float, ...] = ()
    measured: tuple[Measured, ...] = ()  # the windows since the scale-out
    lag: float | None = None
    seen: int = 0  # windows measured since the scale-out
    hold_until: int | None = None
    held_by: str = ""  # the ineffective verdict's reason, for the held decisions
    down_since: int | None = None  # window of the first pending scale-in request
    down_target: int | None = None  # the largest count asked for since
    strikes: int = 0  # ineffective verdicts in a row (each doubles the cool-off)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> GuardState:
        if not text:
            return cls()
        d = json.loads(text)
        e = d.pop("expecting", None)
        return cls(expecting=None if e is None else Expectation(**e),
                   shares=tuple(d.pop("shares", ())),
                   measured=tuple(tuple(m) for m in d.pop("measured", ())), **d)


@dataclass
class ScalingGuard:
    """The guardrails of one run's loop; :class:`~keyshift.control.loop.ControlLoop` calls
    :meth:`judge` with each window, :meth:`admit` with each scaler decision and
    :meth:`expect` after a realized change of N."""

    settings: GuardSettings
    state: GuardState = field(default_factory=GuardState)

    last: Verdict | None = None  # the verdict reached in the window being decided

    def judge(self, window: WindowStats, evaluation: Evaluation) -> Verdict | None:
        """Measure the window that just ran; a verdict once the scale-out before it has had
        ``check_windows`` windows."""
        self.last = None
        st = self.state
        e = st.expecting
        if e is None or window.index <= e.window:
            return None
        share = busiest_share(evaluation)
        measured = (window.tuples, window.arrived, window.span_s or 0.0)
        self.state = replace(st, shares=st.shares + ((share,) if share is not None else ()),
                             measured=st.measured + (measured,), lag=window.lag,
                             seen=st.seen + 1)
        if self.state.seen < self.settings.check_windows:
            return None
        return self._conclude(window.index, with_lag=True)

    def _conclude(self, window: int, with_lag: bool) -> Verdict | None:
        st, s = self.state, self.settings
        e = st.expecting
        assert e is not None
        share_after = sum(st.shares) / len(st.shares) if st.shares else None
        ratios = []
        if share_after is not None and e.share_before is not None:
            expected = e.share_before - e.share_expected
            ratios.append((e.share_before - share_after) / expected if expected > 0 else 1.0)
        lag_after = st.lag if with_lag else None
        rates = Rates.of(e, st.measured) if with_lag else None
        if rates is not None:
            ratios.append(rates.achieved)
        self.state = replace(st, expecting=None, shares=(), measured=(), lag=None, seen=0)
        if not ratios:  # nothing measurable (an idle stretch): no verdict
            return None
        achieved = min(ratios)
        strikes = self.state.strikes + 1 if achieved < s.effectiveness else 0
        hold = None
        if strikes:  # the cool-off doubles with each ineffective verdict in a row
            hold = window + 1 + s.cooloff_windows * 2 ** min(strikes - 1, MAX_DOUBLINGS)
        self.last = Verdict(window, e, share_after, lag_after, achieved, s.effectiveness, hold,
                            rates)
        self.state = replace(self.state, strikes=strikes)
        if self.last.ineffective:
            self.state = replace(self.state, hold_until=hold, held_by=self.last.reason())
        return self.last

    def admit(self, d: ScalingDecision, window: int, engines: int) -> ScalingDecision:
        """The scaler's decision for window ``window + 1`` after the guardrails: a scale-out
        in a cool-off is held, a scale-in waits out the delay and takes the merged count."""
        if d.proposed > engines and self.state.expecting is not None \
                and self.state.seen >= 1:
            # another scale-out before the last one's verdict: judge it now, on the windows
            # it has had (the share only: a rate right after a migration's pause is no sign)
            self._conclude(window, with_lag=False)
        st, s = self.state, self.settings
        if d.proposed > engines:
            self.state = replace(st, down_since=None, down_target=None)
            if st.hold_until is not None and window + 1 < st.hold_until:
                return _held(d, engines, f"scale-out held until window {st.hold_until} "
                                         f"(cool-off): {st.held_by}")
            return d
        if d.proposed == engines:
            if st.down_since is not None:
                self.state = replace(st, down_since=None, down_target=None)
                return replace(d, reason=f"{d.reason}; pending scale-in dropped")
            return d
        if not s.scale_down_windows:
            return d
        since = window if st.down_since is None else st.down_since
        target = d.proposed if st.down_target is None else max(st.down_target, d.proposed)
        waited = window - since
        if waited < s.scale_down_windows:
            self.state = replace(st, down_since=since, down_target=target)
            return _held(d, engines, f"scale-in to {target} delayed: {waited} of "
                                     f"{s.scale_down_windows} windows "
                                     "(planner.scale_down_delay_windows)")
        self.state = replace(st, down_since=None, down_target=None)
        note = f"scale-in after {waited} windows, to the largest count asked ({target})"
        after = engines if d.dry_run else target
        return replace(d, proposed=target, engines_after=after, reason=f"{d.reason}; {note}")

    def expect(self, window: WindowStats, before: int, after: int,
               evaluation: Evaluation) -> None:
        """A change of N was realized at the end of ``window``: a scale-out is judged later,
        a scale-in ends any judgement."""
        if after > before and self.settings.effectiveness > 0:
            self.state = replace(self.state, expecting=Expectation(
                window.index, before, after, busiest_share(evaluation), window.lag,
                window.tuples, window.span_s or 0.0), shares=(), measured=(), lag=None, seen=0)
        else:
            self.state = replace(self.state, expecting=None, shares=(), measured=(), lag=None,
                                 seen=0)


def _held(d: ScalingDecision, engines: int, why: str) -> ScalingDecision:
    return replace(d, proposed=engines, engines_after=engines, held=why,
                   reason=f"{d.reason}; declined: {why}")
