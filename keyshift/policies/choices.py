"""D-Choices (``dc``) and W-Choices (``wc``): PKG for the tail, more choices for the head
(Nasir, De Francisci Morales, Kourtellis and Serafini, ICDE 2016, "When Two Choices Are not
Enough: Balancing at Scale in Distributed Stream Processing").

Why: under Zipf 1.5 the hottest key carries ~40 % of the tuples. Two choices give it at most
two engines, so with 50 engines PKG's busiest engine stays ~9× the mean. Splitting only the
*heavy hitters* over more engines fixes that while every other key keeps PKG's two choices
(few engines hold a key's partial state, so little is merged).

Definitions, as read from the paper and the authors' simulator (our code, not theirs):

- **Head** H: the keys whose frequency (share of the window's tuples) exceeds θ; by default
  θ = 2/(5n), n the live engines (the authors' partitioners use 2/(n·5)). The **tail** is
  every other key. Online, H comes from a SpaceSaving sketch (:mod:`keyshift.sketch`).
- **W-Choices**: a head key may go to any of the n engines, the least loaded.
- **D-Choices**: a head key gets d hashed choices (candidates ``h_1(k) … h_d(k)``, the first
  two being PKG's), d the least value ≥ max(2, ⌈p₁·n⌉) such that, for every prefix h of the
  head sorted by frequency (p₁ ≥ p₂ ≥ …), with b_h/n = 1 − ((n−1)/n)^{h·d} the expected
  fraction of engines the first h keys' choices cover,

      Σ_{i≤h} p_i + (b_h/n)^d · Σ_{h<i≤|H|} p_i + (b_h/n)² · p_T  ≤  b_h/n + ε

  (the load that can only land on those engines — the first h keys, the other head keys
  whose d choices all fall there, the tail keys whose two choices do — fits their fair
  share). No such d < n means every engine: W-Choices.
- **Tail**: PKG's two choices (:func:`keyshift.policies.pkg.two_choices`), so ``dc``/``wc``
  with no head decide exactly as ``pkg`` does.

Routing model: the fluid limit of tuple-by-tuple least-loaded routing, as PKG's
(heaviest group first; a group's tuples raise its least loaded candidates to a common water
line). :meth:`Policy.decide` routes the window's loads from empty engines and returns the
split in ``info.routing`` (PKG's shape; a group split over k engines appears k − 1 times, the
plan's engine — the largest share — takes the rest). The simulator routes every tick through
:class:`ChoicesRouter`, the paper's partitioner: its own sketch over the stream so far and a
local estimate of the tuples it sent each engine.

A split key has partial state on several engines: only operators that merge partial per-key
state may use these policies (:func:`keyshift.policies.check_operator`).
"""

from __future__ import annotations

import math
from abc import abstractmethod

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import (
    DecisionInfo,
    Policy,
    PolicyInputError,
    PolicyKind,
    SplitRouting,
    Window,
)
from keyshift.policies.pkg import two_choices
from keyshift.policies.uhlb import check_seed, hash_coefficients, universal_hash
from keyshift.sketch import SpaceSaving

HEAD_FACTOR = 2.0 / 5.0
"""θ = HEAD_FACTOR / n when ``hot_threshold`` is not given."""


def head_threshold(n: int, hot_threshold: float | None) -> float:
    return HEAD_FACTOR / n if hot_threshold is None else float(hot_threshold)


def choices_needed(head: np.ndarray, n: int, epsilon: float = 1e-4) -> int:
    """D-Choices' d for head frequencies ``head`` (fractions of the stream) over n engines."""
    p = np.sort(np.asarray(head, dtype=np.float64))[::-1]
    if n <= 2 or p.size == 0:
        return min(2, n)
    prefix = np.cumsum(p)
    p_head = float(prefix[-1])
    p_tail = max(1.0 - p_head, 0.0)
    h = np.arange(1, p.size + 1)
    for d in range(max(2, math.ceil(p[0] * n - 1e-9)), n):
        cover = 1.0 - ((n - 1) / n) ** (h * d)
        need = prefix + cover**d * (p_head - prefix) + cover**2 * p_tail
        if (need <= cover + epsilon).all():
            return d
    return n


class Candidates:
    """Candidate engines (dense ids 0..n−1) of every group for one n and seed."""

    def __init__(self, groups: int, n: int, seed: int) -> None:
        self.n = n
        self.first, self.second = two_choices(groups, n, seed)
        self._seed = seed
        self._coef: list[tuple[int, int]] = []
        self._cache: dict[tuple[int, int], np.ndarray] = {}
        self._everyone = np.arange(n)

    def of(self, group: int, d: int) -> np.ndarray:
        """The distinct engines among the group's ``d`` hashed choices (all n when d ≥ n)."""
        if d >= self.n:
            return self._everyone
        found = self._cache.get((group, d))
        if found is None:
            if len(self._coef) < d:
                self._coef = hash_coefficients(self._seed, max(d, 2 * len(self._coef)))
            g = np.array([group])
            extra = [int(universal_hash(g, self.n, a, b)[0]) for a, b in self._coef[2:d]]
            found = np.unique([int(self.first[group]), int(self.second[group]), *extra])
            self._cache[(group, d)] = found
        return found


def _water_fill(levels: np.ndarray, x: float) -> np.ndarray:
    """Amounts summing to x that raise the lowest ``levels`` to one common line."""
    order = np.argsort(levels, kind="stable")
    s = levels[order]
    below = np.cumsum(s)
    k = int(np.count_nonzero(np.arange(1, s.size + 1) * s - below <= x))
    line = (x + below[k - 1]) / k
    out = np.zeros(s.size)
    out[order[:k]] = np.maximum(line - s[:k], 0.0)
    return out


def route(
    counts: np.ndarray,
    candidates: Candidates,
    hot: dict[int, int],
    loads: np.ndarray,
    record: bool = False,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Send each group's ``counts`` to its least loaded candidates, heaviest group first.

    ``hot`` maps a head group to its number of choices; every other group has PKG's two.
    ``loads`` (dense engines) is raised in place. With ``record``, returns group →
    (engines, amounts) for every group with tuples.
    """
    first, second = candidates.first, candidates.second
    nz = np.flatnonzero(counts)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for g in nz[np.argsort(-counts[nz], kind="stable")].tolist():
        x = float(counts[g])
        d = hot.get(g)
        if d is not None and d > 2:
            engines = candidates.of(g, d)
            amounts = _water_fill(loads[engines], x)
            loads[engines] += amounts
        else:
            a, b = int(first[g]), int(second[g])
            if a == b:
                loads[a] += x
                if record:
                    out[g] = (np.array([a]), np.array([x]))
                continue
            gap = float(loads[b] - loads[a])
            to_a = x if gap >= x else 0.0 if -gap >= x else (x + gap) / 2.0
            loads[a] += to_a
            loads[b] += x - to_a
            engines, amounts = np.array([a, b]), np.array([to_a, x - to_a])
        if record:
            out[g] = (engines, amounts)
    return out


class _ManyChoices(Policy):
    """dc and wc differ only in the number of choices a head key gets (:meth:`_head_choices`)."""
    kind = PolicyKind.SPLITTER
    splits_keys = True

    def __init__(
        self,
        seed: int = 0,
        hot_threshold: float | None = None,
        epsilon: float = 1e-4,
        capacity: int | None = None,
    ) -> None:
        self.seed = check_seed(seed)
        if hot_threshold is not None and (
            isinstance(hot_threshold, bool)
            or not isinstance(hot_threshold, int | float)
            or not 0 < hot_threshold <= 1
        ):
            raise PolicyInputError(
                "hot_threshold", f"must be a fraction in (0, 1] or null, got {hot_threshold!r}"
            )
        if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not (
            0 <= epsilon < 1
        ):
            raise PolicyInputError("epsilon", f"must be a number in [0, 1), got {epsilon!r}")
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise PolicyInputError("capacity", f"must be an integer >= 1 or null, got {capacity!r}")
        self.hot_threshold = hot_threshold
        self.epsilon = epsilon
        self.capacity = capacity

    @abstractmethod
    def _head_choices(self, head: np.ndarray, n: int) -> int:
        """How many choices each head key gets, given the head's frequencies."""

    def head(self, frequencies: np.ndarray, n: int) -> tuple[np.ndarray, int]:
        """Head groups (heaviest first) of a frequency vector and their number of choices."""
        theta = head_threshold(n, self.hot_threshold)
        groups = np.flatnonzero(frequencies > theta)
        groups = groups[np.argsort(-frequencies[groups], kind="stable")]
        return groups, self._head_choices(frequencies[groups], n)

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, DecisionInfo, np.ndarray | None]:
        slots = plan.live_engines
        n = slots.size
        loads = window.loads
        total = float(loads.sum())
        freq = loads / total if total > 0 else np.zeros_like(loads)
        head, d = self.head(freq, n)
        candidates = Candidates(plan.groups, n, self.seed)
        eng = np.zeros(n)
        sent = route(loads, candidates, dict.fromkeys(head.tolist(), d), eng, record=True)
        primary = candidates.first.copy()
        g_out: list[int] = []
        e_out: list[int] = []
        s_out: list[float] = []
        split = 0
        for g, (engines, amounts) in sent.items():
            keep = int(np.argmax(amounts))  # first of equal shares: PKG's tie rule
            primary[g] = engines[keep]
            others = [i for i in range(engines.size) if i != keep and amounts[i] > 0]
            split += bool(others)
            for i in others:
                g_out.append(g)
                e_out.append(int(engines[i]))
                s_out.append(float(amounts[i]) / float(loads[g]))
        order = np.lexsort((e_out, g_out))  # by group, then engine
        info = DecisionInfo(
            split_keys=split,
            routing=SplitRouting(
                groups=np.asarray(g_out, dtype=np.int64)[order],
                engines=slots[np.asarray(e_out, dtype=np.int64)[order]],
                share=np.asarray(s_out, dtype=np.float64)[order],
            ),
            stateful_safe=False,
            details={
                "hot_keys": head,
                "choices": d,
                "hot_threshold": head_threshold(n, self.hot_threshold),
                "warning": f"{self.name} splits a key's state over engines: the operator "
                "must merge partial per-key state",
            },
        )
        return plan.with_assignment(slots[primary]), info, eng

    def router(self, groups: int) -> ChoicesRouter:
        return ChoicesRouter(self, groups)


class DChoices(_ManyChoices):
    name = "dc"

    def _head_choices(self, head: np.ndarray, n: int) -> int:
        return choices_needed(head, n, self.epsilon)


class WChoices(_ManyChoices):
    name = "wc"

    def _head_choices(self, head: np.ndarray, n: int) -> int:
        return n if head.size else min(2, n)


class ChoicesRouter:
    """The paper's partitioner for one simulated source, a tick at a time.

    It keeps a SpaceSaving sketch of the stream so far (the head is what the sketch
    estimates above θ) and a local estimate of the tuples it sent each live engine, and
    routes each tick's counts with :func:`route`. A change of the live engines starts the
    load estimate afresh (a new engine would otherwise take everything until it caught up);
    the sketch stays.
    """

    def __init__(self, policy: _ManyChoices, groups: int) -> None:
        self.policy = policy
        self.groups = groups
        self._live: np.ndarray | None = None
        self._slots = np.zeros(0, dtype=np.int64)
        self._loads = np.zeros(0)
        self._candidates: Candidates | None = None
        self.sketch: SpaceSaving | None = None

    def _retarget(self, plan: Plan) -> None:
        self._live = plan.live.copy()
        self._slots = plan.live_engines
        n = self._slots.size
        self._loads = np.zeros(n)
        self._candidates = Candidates(self.groups, n, self.policy.seed)
        if self.sketch is None:
            theta = head_threshold(n, self.policy.hot_threshold)
            self.sketch = SpaceSaving(self.policy.capacity or max(16, math.ceil(2.0 / theta)))

    def route(self, counts: np.ndarray, plan: Plan) -> np.ndarray:
        """Tuples per engine slot for one tick's ``counts`` per group."""
        if self._live is None or not np.array_equal(self._live, plan.live):
            self._retarget(plan)
        assert self.sketch is not None and self._candidates is not None
        nz = np.flatnonzero(counts)
        self.sketch.update_many(nz.tolist(), counts[nz].tolist())
        n = self._slots.size
        theta = head_threshold(n, self.policy.hot_threshold)
        est = self.sketch.heavy_hitters(theta)
        hot: dict[int, int] = {}
        if est:
            freq = np.array([e.count for e in est]) / self.sketch.total
            d = self.policy._head_choices(freq, n)
            hot = {int(e.key): d for e in est}
        before = self._loads.copy()
        route(counts, self._candidates, hot, self._loads)
        out = np.zeros(plan.slots)
        out[self._slots] = self._loads - before
        return out
