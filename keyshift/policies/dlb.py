"""DLB, dynamic load balancing (dlb §3, Algorithm 1), with the DLB-H and DLB-L key choices.

Semantics chosen against Algorithm 1's lines, and why:

* Lines 3–4: imbScore is RSTD over the *live* engines (Eq. 2). The loop runs while
  imbScore > θ. Because moving load never changes the mean, "imbScore improves" is the same
  as "the variance falls", and moving a load x from engine a to engine b changes
  Σ(L−μ)² by exactly 2x(x − (L_a − L_b)). A move therefore helps iff 0 < x < L_a − L_b:
  no std is ever recomputed per candidate.
* Lines 5–11: e_min is the least loaded live engine; engines are examined from the most
  loaded down and the first one that owns a group whose move to e_min helps is e_loaded.
  Reaching e_min (line 10–11) means no engine has such a group: stop and return. Engine a
  qualifies iff its smallest positive group is below L_a − L_min; the most loaded
  qualifying engine (ties: the lower slot id, i.e. a stable descending sort) comes from a
  heap in O(log n) per move rather than a scan of all engines.
* Line 12, ``selectKey``: DLB-H takes the *heaviest* group of e_loaded whose move still
  helps (largest x < L_a − L_min, as §3.2 words it: "the most loaded key ... that reduces
  the imbalancing score"), DLB-L the *lightest* positive group (its move always helps on a
  qualifying engine). Zero-load groups never move: moving them changes nothing but ψ.
* Lines 16–20: a helping move is applied and the search restarts with a fresh e_min. The
  paper's inner loop would try the next engine when the chosen key does not help; with the
  key choices above the chosen key always helps on the engine we pick, so the two readings
  visit the same engines.
* ``max_moves`` (default unbounded) caps the moves per window for callers that want to
  bound a migration; the stop reason is reported in ``info``.

``info.details["steps"]`` lists the moves in the order they were made (group, from, to) so the
property tests and the event log can replay the decision.

Cost: a radix sort of the groups by engine once, a sort of each *source* engine's groups
on first use, then O(log n + log k) per move. DLB-L makes many more moves than DLB-H by
design (light keys, ~8× on the benchmark's burst), so it has its own lean loop
(:func:`lightest_first`) and, from ROUNDS_FROM_ENGINES live engines, decides its moves in
rounds of up to one move per engine (:func:`lightest_first_in_rounds`). Both make exactly
the generic loop's moves, in the same order (equality tests).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import DecisionInfo, Policy, PolicyInputError, PolicyKind, Window
from keyshift.policies.engine_index import EngineIndex

_NO_STEPS = np.empty((0, 3), dtype=np.int64)


HELP_TOL = 1e-9  # a move must beat rounding: x < gap − HELP_TOL·μ


def _help_tol(mean: float) -> float:
    """How much a move must improve on 'x < L_a − L_min' to count. Loads are floats kept up
    to date by += and −=; with x equal to the gap up to rounding, moving x swaps the two
    engines' loads and the next move swaps them back, for ever (a hypothesis run found such
    a case). Demanding x < gap − 1e-9·μ ends that and changes no decision that matters."""
    return HELP_TOL * mean


def check_theta(theta: float) -> float:
    try:
        value = float(theta)
    except (TypeError, ValueError):
        raise PolicyInputError("theta", f"must be a number, got {theta!r}") from None
    if not np.isfinite(value) or value < 0:
        raise PolicyInputError("theta", f"must be a finite number >= 0, got {theta!r}")
    return value


class DynamicLoadBalancing(Policy):
    """Algorithm 1 of dlb with a key choice ``pick`` ("heavy" = DLB-H, "light" = DLB-L)."""
    name: ClassVar[str] = "dlb"
    kind: ClassVar[PolicyKind] = PolicyKind.ONLINE
    pick: ClassVar[str] = "heavy"
    # DLB-L runs :func:`lightest_first`; the generic loop below stays able to pick the
    # lightest key too, as the reference the equality test compares it with.
    lean: ClassVar[bool] = True

    def __init__(self, theta: float = 15.0, max_moves: int | None = None) -> None:
        self.theta = theta
        self.max_moves = max_moves

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        theta = check_theta(self.theta)
        if self.max_moves is not None and (
            not isinstance(self.max_moves, int | np.integer) or self.max_moves < 0
        ):
            raise PolicyInputError("max_moves", f"must be an integer >= 0, got {self.max_moves!r}")
        limit = np.inf if self.max_moves is None else int(self.max_moves)
        details: dict[str, Any] = {"theta": theta, "policy": self.name}
        start, why = imbalance_start(plan, window, theta)
        if start is None:
            return self._finish(plan, details, _NO_STEPS, why)
        index = EngineIndex(start.engine_of, window.loads, start.n)
        if self.pick == "light" and self.lean:
            if start.n >= ROUNDS_FROM_ENGINES:
                steps, reason = lightest_first_in_rounds(
                    index, eng=start.eng, slots=start.slots, mean=start.mean,
                    bound=start.bound, dev2=start.dev2, limit=limit)
            else:
                steps, reason = lightest_first(
                    index, load=start.eng.tolist(), slot_of=start.slots.tolist(),
                    mean=start.mean, bound=start.bound, dev2=start.dev2, limit=limit)
        else:
            steps, reason = self._moves(index, start, limit)
        return self._finish(plan, details, steps, reason)

    def _moves(self, index: EngineIndex, start: ImbalanceStart,
               limit: float) -> tuple[list[tuple[int, int, int]], str]:
        """Algorithm 1, one move at a time: the most loaded engine that can help gives its
        heaviest group below the gap (DLB-H) or its lightest (DLB-L) to the least loaded."""
        # engine a can help iff its smallest positive group x satisfies x < L_a − L_min;
        # ``small`` is kept exact per move (only a's bucket is ever searched for it: an
        # engine that receives x simply takes min(small, x)).
        small = index.smallest_positive().tolist()
        load = start.eng.tolist()
        slot_of = start.slots.tolist()
        mean, bound, dev2 = start.mean, start.bound, start.dev2
        steps: list[tuple[int, int, int]] = []
        heavy = self.pick == "heavy"
        heaps = _EngineHeaps(load)
        tol = _help_tol(mean)
        while dev2 > bound:
            if len(steps) >= limit:
                return steps, "max_moves reached"
            low, b = heaps.least()
            a = heaps.most_helping(small, low + tol)
            if a is None:
                return steps, "no move improves imbScore"
            gap = load[a] - low
            found = index.largest_below(a, gap - tol) if heavy else index.smallest(a)
            if found is None:  # defensive: ``small`` says a helping group exists
                return steps, "no move improves imbScore"
            x, g, handle = found
            index.take(a, handle)
            index.put(b, x, g)
            load[a] -= x
            load[b] += x
            dev2 += 2.0 * x * (x - gap)
            steps.append((g, slot_of[a], slot_of[b]))
            if len(steps) % EXACT_EVERY == 0:
                dev2 = float(((np.asarray(load) - mean) ** 2).sum())
            nxt = index.smallest(a)
            small[a] = nxt[0] if nxt is not None else np.inf
            if x < small[b]:
                small[b] = x
            heaps.changed(a, b)
        return steps, "imbScore within theta"

    @staticmethod
    def _finish(
        plan: Plan, details: dict[str, Any], steps: list[tuple[int, int, int]] | np.ndarray,
        reason: str,
    ) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        done = np.array(steps, dtype=np.int64).reshape(-1, 3)
        info = DecisionInfo(reason=reason, details={**details, "steps": done})
        if not len(done):
            return plan, info, None
        assignment = plan.assignment.copy()
        latest = done[::-1]  # a group may move twice: its last move decides
        groups, first = np.unique(latest[:, 0], return_index=True)
        assignment[groups] = latest[first, 2]
        return plan.with_assignment(assignment), info, None


@dataclass(frozen=True)
class ImbalanceStart:
    """What DLB's loops start from: the live slots, each group's engine position, the
    engines' loads, their mean, the bound on Σ(L−μ)² that imbScore ≤ θ means, and
    Σ(L−μ)² now (above the bound)."""

    slots: np.ndarray
    engine_of: np.ndarray
    eng: np.ndarray
    mean: float
    bound: float
    dev2: float

    @property
    def n(self) -> int:
        return int(self.slots.size)


def imbalance_start(plan: Plan, window: Window,
                    theta: float) -> tuple[ImbalanceStart | None, str]:
    """The start of DLB's loop, or None and why nothing needs to move."""
    slots = plan.live_engines
    n = slots.size
    engine_of = plan.dense_index[plan.assignment]
    eng = np.bincount(engine_of, weights=window.loads, minlength=n)
    total = float(eng.sum())
    if n < 2 or total <= 0:
        return None, "fewer than two live engines or no load"
    mean = total / n
    bound = n * (theta * mean / 100.0) ** 2  # imbScore ≤ θ  ⇔  Σ(L−μ)² ≤ bound
    dev2 = float(((eng - mean) ** 2).sum())
    if dev2 <= bound:
        return None, "imbScore already within theta"
    return ImbalanceStart(slots, engine_of, eng, mean, bound, dev2), ""


class _EngineHeaps:
    """Two heaps with lazy deletion instead of O(n) scans per move: the least loaded
    engine, and the most loaded engine that can help. L_min never falls (a move of
    x < L_a − L_min leaves a above the old minimum), so an unchanged engine that cannot
    help now never can again: it is dropped until its own load changes. Ties break on the
    lower engine id, exactly as argmin/argmax would. ``load`` is the caller's list, read
    as it changes."""

    def __init__(self, load: list[float]) -> None:
        n = len(load)
        self.load = load
        self.version = [0] * n
        self.lows = [(load[e], e, 0) for e in range(n)]
        self.highs = [(-load[e], e, 0) for e in range(n)]
        heapq.heapify(self.lows)
        heapq.heapify(self.highs)

    def least(self) -> tuple[float, int]:
        """(L_min, its engine)."""
        lows, version = self.lows, self.version
        while lows[0][2] != version[lows[0][1]]:
            heapq.heappop(lows)
        return lows[0][0], lows[0][1]

    def most_helping(self, small: list[float], above: float) -> int | None:
        """The most loaded engine whose smallest positive group leaves it above ``above``."""
        highs, version, load = self.highs, self.version, self.load
        while highs:
            _, a, v = highs[0]
            if v == version[a] and load[a] - small[a] > above:
                return a
            heapq.heappop(highs)
        return None

    def changed(self, *engines: int) -> None:
        for e in engines:
            self.version[e] += 1
            heapq.heappush(self.lows, (self.load[e], e, self.version[e]))
            heapq.heappush(self.highs, (-self.load[e], e, self.version[e]))


EXACT_EVERY = 256  # re-derive Σ(L−μ)² every so many moves so rounding cannot accumulate
ROUNDS_FROM_ENGINES = 256  # below this a round costs more than the heap steps it replaces


class _LightKeys:
    """Each engine's positive keys, ascending, consumed from the front (DLB-L only ever
    gives a donor's smallest key), plus a heap per engine of the keys it received.
    The bucket's front wins a tie with the received heap's top, as in EngineIndex."""

    def __init__(self, index: EngineIndex) -> None:
        n = index.engines
        self.index = index
        self.keys: list[tuple[list[float], list[int]] | None] = [None] * n
        self.ptr = [0] * n
        self.received: list[list[tuple[float, int]]] = [[] for _ in range(n)]

    def take(self, a: int) -> tuple[float, int, float] | None:
        """Remove a's smallest positive key: (load, group, a's next smallest or inf)."""
        bucket = self.keys[a]
        if bucket is None:
            groups, values = self.index.sorted_bucket(a)
            lo = int(np.searchsorted(values, 0.0, side="right"))
            bucket = self.keys[a] = (values[lo:].tolist(), groups[lo:].tolist())
        values, groups = bucket
        i = self.ptr[a]
        got = self.received[a]
        if i < len(values) and not (got and got[0][0] < values[i]):
            x, g = values[i], groups[i]
            self.ptr[a] = i = i + 1
        elif got:
            x, g = heapq.heappop(got)
        else:
            return None
        nxt = values[i] if i < len(values) else np.inf
        return x, g, got[0][0] if got and got[0][0] < nxt else nxt

    def give(self, b: int, x: float, g: int) -> None:
        heapq.heappush(self.received[b], (x, g))


def lightest_first(
    index: EngineIndex,
    load: list[float],
    slot_of: list[int],
    mean: float,
    bound: float,
    dev2: float,
    limit: float,
) -> tuple[list[tuple[int, int, int]], str]:
    """DLB-L's loop (Algorithm 1 with the lightest key), lean enough for 10⁵ moves.

    The same decisions, in the same order, as the generic loop in
    :meth:`DynamicLoadBalancing._decide` (an equality test holds them together); what
    differs is only bookkeeping, because DLB-L makes ~8× the moves of DLB-H:

    * a donor only ever gives its smallest key (:class:`_LightKeys`: a pointer into its
      sorted bucket, no tombstones, and a small heap of the keys it received);
    * the two heaps hold (load, engine) pairs and an entry is current iff its load equals
      the engine's load now: no version counters. A stale entry that happens to equal the
      current load is the current entry's twin and decides the same way.
    """
    n = len(load)
    keys = _LightKeys(index)
    small = index.smallest_positive().tolist()
    lows = [(load[e], e) for e in range(n)]
    highs = [(-load[e], e) for e in range(n)]
    heapq.heapify(lows)
    heapq.heapify(highs)
    push, pop = heapq.heappush, heapq.heappop
    steps: list[tuple[int, int, int]] = []
    reason = "no move improves imbScore"
    tol = _help_tol(mean)
    while dev2 > bound:
        if len(steps) >= limit:
            reason = "max_moves reached"
            break
        while lows[0][0] != load[lows[0][1]]:
            pop(lows)
        low, b = lows[0]
        while highs:
            neg, a = highs[0]
            if -neg == load[a] and load[a] - small[a] > low + tol:
                break
            pop(highs)
        else:
            break
        found = keys.take(a)
        if found is None:  # defensive: ``small`` says a helping group exists
            break
        x, g, small[a] = found
        keys.give(b, x, g)
        gap = load[a] - low
        load[a] -= x
        load[b] += x
        dev2 += 2.0 * x * (x - gap)
        steps.append((g, slot_of[a], slot_of[b]))
        if len(steps) % EXACT_EVERY == 0:
            dev2 = float(((np.asarray(load) - mean) ** 2).sum())
        if x < small[b]:
            small[b] = x
        push(lows, (load[a], a))
        push(lows, (load[b], b))
        push(highs, (-load[a], a))
        push(highs, (-load[b], b))
    else:
        reason = "imbScore within theta"
    return steps, reason


class DLBHeavy(DynamicLoadBalancing):
    """DLB-H: fewest keys moved (good for length-based streams, dlb §3.2)."""

    name = "dlb-h"
    pick = "heavy"


class DLBLight(DynamicLoadBalancing):
    """DLB-L: many light keys, finer balance (dlb §3.2)."""

    name = "dlb-l"
    pick = "light"


class _FlatKeys:
    """:class:`_LightKeys` for whole rounds at once: the donors' sorted positive keys are
    copied into flat arrays (one segment per engine, on first use) with a pointer per
    engine, so a round takes every donor's front key in a few numpy operations. Received
    keys are only logged; an engine's heap of them is built the first time that engine
    donates after receiving (rare: recipients are the least loaded engines), and keys it
    receives after that go straight to its heap."""

    def __init__(self, index: EngineIndex) -> None:
        n = index.engines
        self.index = index
        self.values = np.empty(index.loads.size)
        self.groups = np.empty(index.loads.size, dtype=np.int64)
        self.filled = 0
        self.start = np.zeros(n, dtype=np.int64)
        self.end = np.zeros(n, dtype=np.int64)
        self.ready = np.zeros(n, dtype=bool)
        self.received = np.zeros(n, dtype=bool)
        self.heaps: dict[int, list[tuple[float, int]]] = {}
        self.log: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _load_segments(self, engines: np.ndarray) -> None:
        for e in engines[~self.ready[engines]].tolist():
            groups, values = self.index.sorted_bucket(e)
            lo = int(np.searchsorted(values, 0.0, side="right"))
            a, b = self.filled, self.filled + values.size - lo
            self.values[a:b] = values[lo:]
            self.groups[a:b] = groups[lo:]
            self.start[e], self.end[e], self.ready[e], self.filled = a, b, True, b

    def _heap(self, e: int) -> list[tuple[float, int]]:
        heap = self.heaps.get(e)
        if heap is None:
            heap = []
            for engines, xs, gs in self.log:
                mine = engines == e
                heap += zip(xs[mine].tolist(), gs[mine].tolist(), strict=True)
            heapq.heapify(heap)
            self.heaps[e] = heap
        return heap

    def take(self, donors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove each donor's smallest positive key: (groups, each donor's next smallest)."""
        self._load_segments(donors)
        at = self.start[donors]
        groups = self.groups[np.minimum(at, self.groups.size - 1)]
        after = at + 1
        nxt = np.where(after < self.end[donors], self.values[np.minimum(after, self.values.size - 1)], np.inf)
        self.start[donors] = after
        for j in np.flatnonzero(self.received[donors]).tolist():
            e = int(donors[j])
            heap = self._heap(e)
            front = float(self.values[at[j]]) if at[j] < self.end[e] else np.inf
            if heap and heap[0][0] < front:
                x, g = heapq.heappop(heap)
                self.start[e] = at[j]  # the bucket's front stays
                groups[j] = g
            else:
                front = float(nxt[j])
            nxt[j] = heap[0][0] if heap and heap[0][0] < front else front
        return groups, nxt

    def give(self, recipients: np.ndarray, x: np.ndarray, groups: np.ndarray) -> None:
        self.received[recipients] = True
        self.log.append((recipients, x, groups))
        for j in [j for j, e in enumerate(recipients.tolist()) if e in self.heaps]:
            heapq.heappush(self.heaps[int(recipients[j])], (float(x[j]), int(groups[j])))


def lightest_first_in_rounds(
    index: EngineIndex,
    eng: np.ndarray,
    slots: np.ndarray,
    mean: float,
    bound: float,
    dev2: float,
    limit: float,
) -> tuple[np.ndarray, str]:
    """DLB-L's moves, identical to :func:`lightest_first`, decided many at a time.

    On a wide cluster DLB-L works at a "water level": the most loaded engines are within
    one light key of each other, so every move has a new donor (the next most loaded) and
    a new recipient (the next least loaded), and no pair ever repeats. A round therefore
    ranks the qualifying donors by (−load, id) and all engines by (load, id) once, pairs
    the t-th donor with the t-th recipient, and keeps the longest prefix that the
    one-move-at-a-time loop is *proven* to make: for move t, no engine touched earlier in
    the round may rank at or beyond the t-th donor or recipient (strict comparisons, so
    ties always end a round and the next round re-ranks them exactly), donor t must still
    qualify against recipient t's load, and Σ(L−μ)² must still exceed the bound (its
    running value is accumulated move by move, in the same order and precision as the
    loop). Untouched engines that did not qualify at the round's start cannot qualify
    later, because the least load never falls. Rounds end at every EXACT_EVERY-th move,
    where the loop re-derives Σ(L−μ)². Every round keeps at least its first move, which
    is the loop's own next move, so the result is the same move list.
    """
    load = eng.astype(np.float64).copy()
    small = index.smallest_positive()
    keys = _FlatKeys(index)
    chunks: list[np.ndarray] = []
    done = 0
    reason = "no move improves imbScore"
    tol = _help_tol(mean)
    while dev2 > bound:
        if done >= limit:
            reason = "max_moves reached"
            break
        cap = EXACT_EVERY - done % EXACT_EVERY  # a round ends where the loop re-derives Σ
        if limit != np.inf:
            cap = min(cap, int(limit) - done)
        pairs = _round_pairs(load, small, tol, cap)
        if pairs is None:
            break
        d, r = pairs
        x = small[d]
        k, running = _proven_prefix(load, d, r, x, tol, dev2, bound)
        d, r, x = d[:k], r[:k], x[:k]
        groups, small[d] = keys.take(d)
        keys.give(r, x, groups)
        chunks.append(np.column_stack((groups, slots[d], slots[r])))
        done += k
        load[d] -= x
        load[r] += x
        small[r] = np.minimum(small[r], x)
        dev2 = float(running[k])
        if done % EXACT_EVERY == 0:
            dev2 = float(((load - mean) ** 2).sum())
    else:
        reason = "imbScore within theta"
    return np.concatenate(chunks) if chunks else np.empty((0, 3), dtype=np.int64), reason


def _round_pairs(load: np.ndarray, small: np.ndarray, tol: float,
                 cap: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A round's candidate moves, at most ``cap``: the qualifying donors ranked by
    (−load, id) and all engines by (load, id), the t-th donor paired with the t-th
    recipient; None when no engine can help."""
    recipients = np.argsort(load, kind="stable")  # (load, id): stable keeps ids in order
    low = load[recipients[0]]
    donors = np.flatnonzero(load - small > low + tol)
    if donors.size == 0:
        return None
    donors = donors[np.argsort(-load[donors], kind="stable")]  # (−load, id)
    m = min(donors.size, cap)
    return donors[:m], recipients[:m]


def _proven_prefix(load: np.ndarray, d: np.ndarray, r: np.ndarray, x: np.ndarray, tol: float,
                   dev2: float, bound: float) -> tuple[int, np.ndarray]:
    """How many of the round's moves (donors ``d`` give ``x`` to recipients ``r``) the
    one-move-at-a-time loop is proven to make (at least the first), and the running
    Σ(L−μ)² before and after each of them."""
    n, m = load.size, d.size
    d_load, r_load = load[d], load[r]
    down, up = d_load - x, r_load + x
    t = np.arange(m)
    pos = np.full(n, m)  # an engine's position among the round's donors ...
    pos[d] = t
    valid = pos[r] >= t
    pos[d] = m
    pos[r] = t  # ... and among its recipients
    valid &= (pos[d] > t) & (down > r_load + tol)
    if m > 1:
        lowest = np.minimum(np.minimum.accumulate(up), np.minimum.accumulate(down))[:-1]
        highest = np.maximum(np.maximum.accumulate(up), np.maximum.accumulate(down))[:-1]
        valid[1:] &= (r_load[1:] < lowest) & (d_load[1:] > highest)
    valid[0] = True
    k = m if valid.all() else int(np.argmin(valid))
    running = np.add.accumulate(
        np.concatenate(([dev2], 2.0 * x[:k] * (x[:k] - (d_load[:k] - r_load[:k])))))
    stop = np.flatnonzero(running[1:k] <= bound)
    if stop.size:
        k = int(stop[0]) + 1
    return k, running
