"""ELB, eager load balancing (elb-clb §3, Algorithm 1): keep every engine inside a band.

The objective "minimise imbalance" is relaxed to "every live engine's load in [v, u]",
which admits plans that move far less state. ELB may change the parallelism π.

Semantics chosen against Algorithm 1's lines, and why:

* **Band.** ``band=(v, u)`` in load units (tuples per window), or ``band_fraction=(a, b)``
  as fractions of the current mean load μ over the live engines (the controller's
  ``band_low``/``band_high``): [aμ, bμ]. With neither, the *default band*: π stays put
  (ELB only rebalances) and the band is [μ(1 − θ/100), μ(1 + θ/100)] with ``theta``
  (default 15, DLB's threshold), widened so that it is feasible: if some group is heavier
  than θμ/100, no plan may fit the θ band (a group of 1.9μ never fits under 1.15μ), and
  ELB would churn every window chasing it. The band is then widened to one that a plan
  provably fits (:func:`feasible_band`): LPT of the hot groups (heavier than h = θμ/100)
  plus list scheduling of the light ones is the witness. If no group is heavier than h,
  that witness already fits the θ band, so nothing is widened (the common, fast path).
  An absolute band (or a fractional one not centred on 1) lets ELB scale.
* **Line 4.** π = ⌈2w/(u+v)⌉ (clipped to [min_engines, max_engines]), l̄ = w/π. The
  ceiling is taken with a 1e-9 relative tolerance so that w/μ = n does not round up to
  n+1 through floating-point noise.
* **Lines 6–10.** Scale-out revives dead slots first (lowest ids), then appends slots;
  scale-in marks the n − π least loaded live engines dead (set R). Slots are never
  renumbered (see :mod:`keyshift.plan`).
* **Nothing to do.** If π equals the live count and every engine is already inside
  [v, u], ELB returns the plan unchanged: the band is the relaxation, and being inside it
  is success. (Read literally, Algorithm 1 would shed load from every engine above l̄
  in every window.)
* **Lines 15–21.** For an engine j above l̄ the *budget* is l_j − l̄ and each pick is the
  largest group lighter than the *remaining budget* and than the emptiest receiver's room
  u − min_e l_e (a heavier group would only carry the overload to its new engine). The
  paper writes θ = min{l_j − l̄,
  (u − v)/2}: it *assumes* every group is lighter than (u − v)/2 ("can be fulfilled by
  choosing suitable p"), it does not mean to pin heavier ones. Enforcing it as a cap makes
  every hot group immovable: with the θ band no group heavier than 0.15μ could ever move
  (issue 13: band [8, 12], groups of 2, "scaled 4 -> 10" with 0 groups moved). Picking
  against the budget moves hot groups, heaviest first (the paper's heuristic 1, hot spots
  spread first), never takes a donor below l̄, and never sends a group that would put
  even the emptiest engine above u. Groups of zero load are never picked (moving them
  changes ψ, not load). One greedy traversal in descending load order, vectorised: runs
  of consecutive picks are found with a cumulative sum and the next start with a binary
  search (:func:`shed`).
* **Lines 25–30.** Picked groups, heaviest first, go to the least loaded engine of UI; an
  engine leaves UI once it reaches l̄. The paper uses (u + v)/2 there; that equals l̄ only
  when 2w/(u+v) is an integer, and filling to (u+v)/2 > l̄ starves the last engines
  below v. If UI runs empty, the rest go to the least loaded live engine.
* **Honest outcome.** When engines stay outside [v, u] (a group alone heavier than u,
  donors whose groups are all heavier than their excess), ``info.details["outside"]`` lists them
  and ``info.reason`` says why; if no group moved at all, the plan is returned
  unchanged (no "rebalanced" for a plan that did nothing), or, when π differs (a scaler
  asked for it: the control loop's ``scale_plan``), the slots change and the reason says
  "engines n -> π with no group moved" and why, never "scaled".

Guarantee (tested): if every group is lighter than ε with ε < (u − v)/2, v ≤ l̄ − (π+1)ε
and l̄ + ε ≤ u, every live engine ends inside [v, u].
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import DecisionInfo, Policy, PolicyInputError, PolicyKind, Window
from keyshift.policies.dlb import check_theta
from keyshift.policies.engine_index import radix_key
from keyshift.policies.lptf import lpt_partition


def check_band(band: Any, field: str = "band") -> tuple[float, float] | None:
    if band is None:
        return None
    try:
        v, u = (float(x) for x in band)
    except (TypeError, ValueError):
        raise PolicyInputError(field, f"must be two numbers [v, u], got {band!r}") from None
    if not (math.isfinite(v) and math.isfinite(u)) or v < 0 or u <= 0 or v > u:
        raise PolicyInputError(field, f"needs 0 <= v <= u and u > 0, got {band!r}")
    return v, u


def shed(loads_asc: np.ndarray, budget: float, cap: float) -> np.ndarray:
    """Positions picked by "largest positive load < min(remaining budget, cap)", repeated.

    A run of consecutive picks from position i downwards is valid while the running sum
    stays below the budget (y_j < budget − S_{j−1} ⇔ S_j < budget), so each run is one
    cumulative sum; the first position that fails ends the run and the next pick is the
    largest load below the new budget further down, found by binary search.
    """
    lo = int(np.searchsorted(loads_asc, 0.0, side="right"))
    hi = lo + int(np.searchsorted(loads_asc[lo:], min(budget, cap), side="left"))
    picked: list[np.ndarray] = []
    while hi > lo and budget > 0:
        run = np.cumsum(loads_asc[lo:hi][::-1])
        k = int(np.searchsorted(run, budget, side="left"))
        if k:
            picked.append(np.arange(hi - 1, hi - 1 - k, -1))
            budget -= float(run[k - 1])
        fail = hi - k - 1
        if fail < lo:
            break
        hi = lo + int(np.searchsorted(loads_asc[lo:fail], min(budget, cap), side="left"))
    return np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)


def water_level(base: np.ndarray, mass: float) -> float:
    """The level W with Σ_e max(W − base_e, 0) = ``mass`` (pouring mass onto engines)."""
    s = np.sort(base)
    k = np.arange(1, s.size + 1)
    cand = (mass + np.cumsum(s)) / k
    nxt = np.r_[s[1:], np.inf]
    ok = np.flatnonzero((cand >= s) & (cand <= nxt))
    return float(cand[ok[0]]) if ok.size else float(cand[-1])


def feasible_band(loads: np.ndarray, n: int, h: float) -> tuple[float, float]:
    """[lo, hi] that some plan of ``loads`` onto n engines fits, with hi ≥ μ + h and
    lo ≤ μ − h: the witness is LPT of the *hot* groups (y > h) and then every light group
    onto the least loaded engine (list scheduling).

    Why it holds: let H_e be the hot load of engine e and W the water level of the light
    mass R over H (Σ max(W − H_e, 0) = R; W ≤ μ). An engine r that received a light group
    was the least loaded when it got its last one, so final(r) ≤ min_e final(e) + h; some
    receiver ends ≥ W (else less than R was poured), so every engine ends ≥ W − h; every
    receiver ends ≤ min + h ≤ μ + h, every other engine at its H_e ≤ max H. Only the hot
    groups are sorted (a handful at 4,096 × 64 or 10⁶ × 1,000), so this stays cheap.
    """
    w = float(loads.sum())
    mean = w / n
    hot = loads[loads > h]
    base = (np.bincount(lpt_partition(hot, n), weights=hot, minlength=n)
            if hot.size else np.zeros(n))
    level = water_level(base, w - float(hot.sum()))
    return min(mean - h, level - h), max(mean + h, float(base.max()))


class EagerLoadBalancing(Policy):
    name = "elb"
    kind = PolicyKind.ONLINE

    def __init__(
        self,
        band: tuple[float, float] | None = None,
        band_fraction: tuple[float, float] | None = None,
        theta: float = 15.0,
        min_engines: int = 1,
        max_engines: int | None = None,
    ) -> None:
        self.band = band
        self.band_fraction = band_fraction
        self.theta = theta
        self.min_engines = min_engines
        self.max_engines = max_engines

    def _bounds(self) -> tuple[int, int | None]:
        lo, hi = self.min_engines, self.max_engines
        if isinstance(lo, bool) or not isinstance(lo, int | np.integer) or lo < 1:
            raise PolicyInputError("min_engines", f"must be an integer >= 1, got {lo!r}")
        if hi is not None and (
            isinstance(hi, bool) or not isinstance(hi, int | np.integer) or hi < lo
        ):
            raise PolicyInputError("max_engines", f"must be an integer >= min_engines, got {hi!r}")
        return int(lo), None if hi is None else int(hi)

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        band = check_band(self.band)
        fraction = check_band(self.band_fraction, "band_fraction")
        if band is not None and fraction is not None:
            raise PolicyInputError("band_fraction", "give either band or band_fraction, not both")
        theta = check_theta(self.theta)
        limits = self._bounds()
        slots = plan.live_engines
        n = slots.size
        engine_of = plan.dense_index[plan.assignment]
        loads = window.loads
        eng = np.bincount(engine_of, weights=loads, minlength=n)
        w = float(eng.sum())
        if w <= 0:
            return plan, DecisionInfo(reason="no load", details={"pi": n}), None
        default = band is None and fraction is None
        v, u, widened = self._target_band(band, fraction, theta, loads, eng)
        pi = n if default else self._engine_count(w, (u + v) / 2.0, n, limits)
        details: dict[str, Any] = {"band": [v, u], "pi": pi, "removed": [], "added": []}
        if widened:
            details["band_widened"] = ("a group is heavier than θμ/100: widened to hold the "
                                       "LPT plan")
        if pi == n and bool(((eng >= v) & (eng <= u)).all()):
            return plan, DecisionInfo(reason="all engines inside the band", details=details), None
        avg = w / pi
        # Phase 1: preparing (engine ids here are positions in ``ids``, a growing slot list)
        prep = _Prepared.of(plan, eng, pi)
        details.update(added=prep.added, removed=prep.removed)
        eng, removing = prep.eng, prep.removing
        over = (eng > avg) & ~removing
        # Phase 2: identifying the groups that leave; Phase 3: reassigning them
        moving = _identify(engine_of=engine_of, loads=loads, eng=eng, over=over,
                           removing=removing, n=n, u=u, avg=avg)
        target, fallback = _reassign(moving=moving, loads=loads, eng=eng, engine_of=engine_of,
                                     over=over, removing=removing, avg=avg)
        tol = 1e-9 * max(u, 1.0)
        outside = [int(prep.ids[j]) for j in np.flatnonzero(~removing)
                   if not v - tol <= eng[j] <= u + tol]
        details.update(moved_to_fallback=fallback, overloaded=int(over.sum()), outside=outside)
        why = self._why_outside(outside, ids=prep.ids, target=target, loads=loads, eng=eng,
                                v=v, u=u, avg=avg) if outside else ""
        reason = _reason(int(moving.size), n, pi, outside, why)
        info = DecisionInfo(reason=reason, engines_changed=pi != n, details=details)
        if moving.size == 0 and pi == n:
            return plan, info, None
        assignment = np.asarray(prep.ids, dtype=np.int64)[target]
        if prep.slots != plan.slots or pi != n:
            return plan.with_assignment(assignment, slots=prep.slots, live=prep.live), \
                info, None
        return plan.with_assignment(assignment), info, None

    def _target_band(self, band: tuple[float, float] | None,
                     fraction: tuple[float, float] | None, theta: float, loads: np.ndarray,
                     eng: np.ndarray) -> tuple[float, float, bool]:
        """[v, u] for this window, and whether the default band was widened to hold the
        LPT plan of a group heavier than θμ/100."""
        n, mean = eng.size, float(eng.sum()) / eng.size
        default = band is None and fraction is None
        if fraction is not None:
            band = (mean * fraction[0], mean * fraction[1])
        elif band is None:
            band = (mean * (1 - theta / 100.0), mean * (1 + theta / 100.0))
        v, u = band
        inside = bool(((eng >= v) & (eng <= u)).all())
        if default and not inside and float(loads.max()) > theta * mean / 100.0:
            lo, hi = feasible_band(loads, n, theta * mean / 100.0)
            v, u = min(v, lo), max(u, hi)
            return v, u, (v, u) != band
        return v, u, False

    @staticmethod
    def _engine_count(w: float, centre: float, n: int, limits: tuple[int, int | None]) -> int:
        """π: the engines that hold load ``w`` at the band's centre, within the limits (the
        default band only rebalances: π = n there)."""
        lo_engines, hi_engines = limits
        pi = max(1, math.ceil(w / centre * (1 - 1e-9))) if centre > 0 else n
        pi = max(pi, lo_engines)
        return min(pi, hi_engines) if hi_engines is not None else pi

    @staticmethod
    def _why_outside(outside: list[int], ids: list[int], target: np.ndarray, loads: np.ndarray,
                     eng: np.ndarray, v: float, u: float, avg: float) -> str:
        """One line on why these engines stay outside [v, u] (the decision's reason)."""
        pos = {slot: j for j, slot in enumerate(ids)}
        parts = []
        for slot in outside[:3]:
            j = pos[slot]
            mine = loads[target == j]
            top = float(mine.max()) if mine.size else 0.0
            if eng[j] > u and top > u:
                parts.append(f"engine {slot} holds a group of {top:.4g} > u = {u:.4g} on its own")
            elif eng[j] > u:
                parts.append(f"engine {slot} ({eng[j]:.4g}) has no group lighter than both its "
                             f"excess {eng[j] - avg:.4g} over l̄ and the emptiest engine's room "
                             "under u")
            else:
                parts.append(f"engine {slot} ({eng[j]:.4g} < v = {v:.4g}): no donor can give it "
                             "load without falling below l̄")
        more = f" (+{len(outside) - 3} more)" if len(outside) > 3 else ""
        return f"{len(outside)} engine(s) outside [{v:.4g}, {u:.4g}]: " + "; ".join(parts) + more


@dataclass
class _Prepared:
    """ELB's phase 1 for π engines: the slots (``ids``: positions → slot ids, revived dead
    slots and fresh ones appended), their live mask and count, the loads per position, the
    engines being removed, and the slots added and removed."""

    ids: list[int]
    live: np.ndarray
    slots: int
    eng: np.ndarray
    removing: np.ndarray
    added: list[int]
    removed: list[int]

    @classmethod
    def of(cls, plan: Plan, eng: np.ndarray, pi: int) -> _Prepared:
        live_ids = plan.live_engines
        n = live_ids.size
        ids, live, slots = live_ids.tolist(), plan.live.copy(), plan.slots
        added: list[int] = []
        removed: list[int] = []
        if pi > n:
            dead = np.flatnonzero(~plan.live)[: pi - n].tolist()
            fresh = list(range(slots, slots + pi - n - len(dead)))
            slots += len(fresh)
            live = np.concatenate([live, np.ones(len(fresh), dtype=bool)])
            live[dead] = True
            ids += dead + fresh
            eng = np.concatenate([eng, np.zeros(pi - n)])
            added = dead + fresh
        removing = np.zeros(len(ids), dtype=bool)
        if pi < n:
            order = np.argsort(eng, kind="stable")
            removing[order[: n - pi]] = True
            live[live_ids[order[: n - pi]]] = False
            removed = sorted(live_ids[order[: n - pi]].tolist())
        return cls(ids, live, slots, eng, removing, added, removed)


def _identify(*, engine_of: np.ndarray, loads: np.ndarray, eng: np.ndarray, over: np.ndarray,
              removing: np.ndarray, n: int, u: float, avg: float) -> np.ndarray:
    """ELB's phase 2: the groups that leave (all of the removed engines', and what each
    overloaded engine sheds down to l̄), heaviest first; ``eng`` loses them. ``n``: the
    engines before phase 1, the ones that hold groups."""
    # Only the overloaded engines' groups need sorting: by load (any tie order is a valid
    # greedy), then a stable radix sort by engine.
    on_over = np.flatnonzero(over[engine_of])
    on_over = on_over[np.argsort(loads[on_over])]
    on_over = on_over[np.argsort(radix_key(engine_of[on_over], n), kind="stable")]
    bounds = np.searchsorted(engine_of[on_over], np.arange(n + 1))
    queue: list[np.ndarray] = [np.flatnonzero(removing[engine_of])]
    # a group heavier than the emptiest receiver's room under u would only move the
    # overload from one engine to another: pick below it (never binding for groups
    # lighter than (u − v)/2 when l̄ ≤ u − (u − v)/2, the paper's setting)
    cap = max(u - float(eng[~removing].min()), 0.0)
    eng[removing] = 0.0
    for j in np.flatnonzero(over).tolist():
        groups_j = on_over[bounds[j] : bounds[j + 1]]
        loads_j = loads[groups_j]
        picked = shed(loads_j, eng[j] - avg, cap)
        if picked.size:
            queue.append(groups_j[picked])
            eng[j] -= float(loads_j[picked].sum())
    moving = np.concatenate(queue)
    return moving[np.argsort(-loads[moving], kind="stable")]


def _reassign(*, moving: np.ndarray, loads: np.ndarray, eng: np.ndarray, engine_of: np.ndarray,
              over: np.ndarray, removing: np.ndarray, avg: float) -> tuple[np.ndarray, int]:
    """ELB's phase 3: each leaving group, heaviest first, onto the least loaded
    under-loaded engine (else the least loaded remaining one, counted as a fallback);
    returns the position of every group's engine and the fallbacks; ``eng`` follows."""
    under = [(float(eng[j]), j) for j in np.flatnonzero(~over & ~removing).tolist()]
    under = [e for e in under if e[0] < avg]
    heapq.heapify(under)
    target = engine_of.copy()
    fallback = 0
    for g, y in zip(moving.tolist(), loads[moving].tolist(), strict=True):
        if under:
            load, j = under[0]
            load += y
            if load >= avg:
                heapq.heappop(under)
            else:
                heapq.heapreplace(under, (load, j))
        else:
            j = int(np.argmin(np.where(removing, np.inf, eng)))
            fallback += 1
        eng[j] += y
        target[g] = j
    return target, fallback


def _reason(moved: int, n: int, pi: int, outside: list[int], why: str) -> str:
    """The decision's reason: what moved, and why engines stay outside the band."""
    if moved == 0 and pi == n:
        return f"nothing moved: {why or 'no group fits'}"
    if moved == 0 and outside:
        # the slots change (a scaler asked for π), but nothing was balanced: say so
        return f"engines {n} -> {pi} with no group moved: {why}"
    if outside:
        return ("rebalanced" if pi == n else f"scaled {n} -> {pi}") + f", but {why}"
    return "rebalanced into the band" if pi == n else f"scaled {n} -> {pi}"
