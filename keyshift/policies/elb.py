"""ELB, eager load balancing (elb-clb §3, Algorithm 1): keep every engine inside a band.

The objective "minimise imbalance" is relaxed to "every live engine's load in [v, u]",
which admits plans that move far less state. ELB may change the parallelism π.

Semantics chosen against Algorithm 1's lines, and why:

* **Band.** ``band=(v, u)`` in load units (tuples per window), or ``band_fraction=(a, b)``
  as fractions of the current mean load μ over the live engines (the controller's
  ``band_low``/``band_high``): [aμ, bμ]. With neither, [μ(1 − θ/100), μ(1 + θ/100)] with
  ``theta`` (default 15, DLB's threshold), so π stays put and ELB only rebalances.
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
* **Lines 15–21.** For an engine j above l̄ the *budget* is l_j − l̄ and each picked group
  must be lighter than min(remaining budget, (u − v)/2). The paper writes θ = min{l_j − l̄,
  (u − v)/2} and decrements θ; read literally that caps the *total* shed at (u − v)/2 and
  can leave an engine far above u for ever. The text explains the (u − v)/2 term as the
  bound on a single substream ("hot spot"), so it caps each pick, not the total. Groups
  of zero load are never picked (moving them changes ψ, not load). One greedy traversal
  in descending load order, vectorised: runs of consecutive picks are found with a
  cumulative sum and the next start with a binary search.
* **Lines 25–30.** Picked groups, heaviest first, go to the least loaded engine of UI; an
  engine leaves UI once it reaches l̄. The paper uses (u + v)/2 there; that equals l̄ only
  when 2w/(u+v) is an integer, and filling to (u+v)/2 > l̄ starves the last engines
  below v. If UI runs empty, the rest go to the least loaded live engine.

Guarantee (tested): if every group is lighter than ε with ε < (u − v)/2, v ≤ l̄ − (π+1)ε
and l̄ + ε ≤ u, every live engine ends inside [v, u].
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyInputError, Window
from keyshift.policies.dlb import check_theta
from keyshift.policies.engine_index import radix_key


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


class EagerLoadBalancing(Policy):
    name = "elb"

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

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        band = check_band(self.band)
        fraction = check_band(self.band_fraction, "band_fraction")
        if band is not None and fraction is not None:
            raise PolicyInputError("band_fraction", "give either band or band_fraction, not both")
        theta = check_theta(self.theta)
        lo_engines, hi_engines = self._bounds()
        slots = plan.live_engines
        n = slots.size
        engine_of = plan.dense_index[plan.assignment]
        loads = window.loads
        eng = np.bincount(engine_of, weights=loads, minlength=n)
        w = float(eng.sum())
        if w <= 0:
            return plan, {"reason": "no load", "pi": n}, None
        mean = w / n
        if fraction is not None:
            band = (mean * fraction[0], mean * fraction[1])
        elif band is None:
            band = (mean * (1 - theta / 100.0), mean * (1 + theta / 100.0))
        v, u = band
        centre = (u + v) / 2.0
        pi = max(1, math.ceil(w / centre * (1 - 1e-9))) if centre > 0 else n
        pi = max(pi, lo_engines)
        if hi_engines is not None:
            pi = min(pi, hi_engines)
        info: dict[str, Any] = {"band": [v, u], "pi": pi, "removed": [], "added": []}
        if pi == n and ((eng >= v) & (eng <= u)).all():
            info["reason"] = "all engines inside the band"
            return plan, info, None
        avg = w / pi
        cap = (u - v) / 2.0

        # Phase 1: preparing (engine ids here are positions in ``ids``, a growing slot list)
        ids = slots.tolist()
        live = plan.live.copy()
        engines = plan.engines
        if pi > n:
            dead = np.flatnonzero(~plan.live)[: pi - n].tolist()
            fresh = list(range(engines, engines + pi - n - len(dead)))
            engines += len(fresh)
            live = np.concatenate([live, np.ones(len(fresh), dtype=bool)])
            live[dead] = True
            ids += dead + fresh
            eng = np.concatenate([eng, np.zeros(pi - n)])
            info["added"] = dead + fresh
        removing = np.zeros(len(ids), dtype=bool)
        if pi < n:
            order = np.argsort(eng, kind="stable")
            removing[order[: n - pi]] = True
            live[slots[order[: n - pi]]] = False
            info["removed"] = sorted(slots[order[: n - pi]].tolist())
        over = (eng > avg) & ~removing

        # Phase 2: identifying. Only the overloaded engines' groups need sorting: by load
        # (any tie order is a valid greedy), then a stable radix sort by engine.
        on_over = np.flatnonzero(over[engine_of])
        on_over = on_over[np.argsort(loads[on_over])]
        on_over = on_over[np.argsort(radix_key(engine_of[on_over], n), kind="stable")]
        bounds = np.searchsorted(engine_of[on_over], np.arange(n + 1))
        queue: list[np.ndarray] = [np.flatnonzero(removing[engine_of])]
        eng[removing] = 0.0
        for j in np.flatnonzero(over).tolist():
            groups_j = on_over[bounds[j] : bounds[j + 1]]
            loads_j = loads[groups_j]
            picked = shed(loads_j, eng[j] - avg, cap)
            if picked.size:
                queue.append(groups_j[picked])
                eng[j] -= float(loads_j[picked].sum())
        moving = np.concatenate(queue)
        moving = moving[np.argsort(-loads[moving], kind="stable")]

        # Phase 3: reassigning, heaviest first onto the least loaded under-loaded engine
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
        info.update(
            moved_to_fallback=fallback,
            overloaded=int(over.sum()),
            engines_changed=pi != n,
            reason="rebalanced into the band" if pi == n else f"scaled {n} -> {pi}",
        )
        assignment = np.asarray(ids, dtype=np.int64)[target]
        if engines != plan.engines or pi != n:
            return plan.with_assignment(assignment, engines=engines, live=live), info, None
        return plan.with_assignment(assignment), info, None
