"""Engines as executors: how many executors a plan needs, and the order of a scale action.

Why: N engines is a number of tasks per micro-batch. Unless the job also asks its cluster
manager for the executors those tasks run on, and gives back the ones no engine needs, a
scale-in frees nothing and a scale-out adds no CPU (issue 41). The cluster manager's side
is an :class:`ExecutorClient` (the Spark adapter is ``keyshift.streaming.executors``; the
tests use a fake with a fixed clock), so the order below is decided here, without Spark:

* **scale-out**: ask for the executors first. Either wait until they have registered
  (bounded by ``wait_s``) before the plan that uses them runs its first batch (``block``),
  or run that batch at once on the executors held (``block=False``): Spark runs a task per
  free core, so the new plan's engines take turns on the old cores and the engine tasks
  still waiting for a core go to each new executor as it registers. Waiting stalls the
  stream for the executors' start-up; running on keeps the old cores busy meanwhile.
  Executors that did not come within ``wait_s`` are said in the action; the engines then
  share the cores that came (nothing is lost, the batch only takes longer).
* **scale-in**: the plan moves the groups off the retired engines first (the migration
  batch); only after that batch do the executors in excess go, those that ran the fewest
  of the plan's engines in that batch, newest first. Nothing is lost with them: an engine's
  state is durable beside the warehouse and an executor's copy is only a cache
  (docs/design.md, "Cluster-safe state").

Killing an executor lowers the cluster manager's target as well (Spark's
``killExecutors(..., adjustTargetNumExecutors = true)``; without dynamic allocation the
target starts at 0, so a kill leaves it at 0), so a request names the whole total wanted,
never a number to add, and a release sets the total it keeps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class ExecutorClient(Protocol):
    """What the job needs of a cluster manager: the executors it holds now, the total it
    wants (the target the manager launches executors up to), and the release of named ones
    (which lowers that target by as many)."""

    def held(self) -> list[str]: ...

    def request_total(self, total: int) -> bool: ...

    def release(self, ids: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class ExecutorBudget:
    """Executors per live engine count: ``ceil(engines / engines_per_executor)`` within
    ``[min_executors, max_executors]`` (the engine bounds divided alike, and a cluster cap
    such as ``spark.cores.max``)."""

    engines_per_executor: int
    min_executors: int = 1
    max_executors: int = 1_000_000

    def __post_init__(self) -> None:
        if self.engines_per_executor < 1:
            raise ValueError(f"engines_per_executor: must be >= 1, got {self.engines_per_executor}")
        if self.min_executors < 1:
            raise ValueError(f"min_executors: must be >= 1, got {self.min_executors}")
        if self.max_executors < self.min_executors:
            raise ValueError(f"max_executors: {self.max_executors} is below min_executors "
                             f"{self.min_executors}")

    def needed(self, live_engines: int) -> int:
        want = math.ceil(max(int(live_engines), 1) / self.engines_per_executor)
        return min(max(want, self.min_executors), self.max_executors)


def to_release(held: Sequence[str], keep: int, engines_on: Mapping[str, int]) -> list[str]:
    """The executors to give back so that ``keep`` remain: those that ran the fewest engines
    of the batch just run (their caches are worth least), the newest first among equals
    (Spark numbers executors in the order they came; an id that is not a number sorts as
    newest)."""
    excess = len(held) - max(int(keep), 0)
    if excess <= 0:
        return []

    def age(e: str) -> int:
        return int(e) if e.isdigit() else 1 << 62

    order = sorted(held, key=lambda e: (engines_on.get(e, 0), -age(e)))
    return order[:excess]


@dataclass
class ScaleAction:
    """One request or release as it happened: what was asked, what came, and when."""

    kind: str  # "request" | "release"
    batch_id: int
    before: int  # executors held before
    asked: int  # executors wanted after
    started: float  # wall time (epoch s) of the request or the release call
    came: int | None = None  # executors held once the wait ended (request)
    ready_s: float | None = None  # request: until registered; release: until gone
    released: list[str] = field(default_factory=list)

    def text(self) -> str:
        if self.kind == "request":
            got = "" if self.came is None else (
                f", {self.came} held after {self.ready_s:.1f} s" if self.ready_s is not None
                else f", {self.came} held")
            short = "" if self.came is None or self.came >= self.asked else (
                f" (executor_wait_s ran out; the engines share the {self.came} that came)")
            return f"executors {self.before} -> {self.asked} asked{got}{short}"
        gone = "" if self.ready_s is None else f", gone after {self.ready_s:.1f} s"
        # ids, named as such: "released 0" read as "released none"
        ids = (f"executor{'s' if len(self.released) > 1 else ''} id "
               f"{', '.join(self.released)}" if self.released else "none")
        return f"executors {self.before} -> {self.asked}: released {ids}{gone}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "batch_id": self.batch_id, "before": self.before,
                "asked": self.asked, "came": self.came, "started": self.started,
                "ready_s": self.ready_s, "released": list(self.released)}


class ExecutorScaler:
    """The job's executors follow its plan's live engines (see the module's docstring).

    ``prepare`` runs when a decision is made (the window's last batch) so the cluster
    manager starts the executors while the job writes that batch; ``ready`` runs before
    the batch that uses the plan and waits for them; ``settle`` runs after a batch and
    releases what the plan no longer needs."""

    def __init__(self, client: ExecutorClient, budget: ExecutorBudget, wait_s: float,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = 0.25,
                 block: bool = True) -> None:
        if wait_s < 0:
            raise ValueError(f"executor_wait_s: must be >= 0, got {wait_s}")
        self.client = client
        self.budget = budget
        self.wait_s = float(wait_s)
        self.block = block
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self.actions: list[ScaleAction] = []
        self._pending: ScaleAction | None = None  # a request not yet waited for
        self._leaving: dict[str, float] = {}  # released executor -> when it was released
        self._leaving_action: dict[str, ScaleAction] = {}
        self._target: int | None = None  # the total last asked of the manager (None: never)

    def needed(self, live_engines: int) -> int:
        return self.budget.needed(live_engines)

    def start(self, live_engines: int, batch_id: int = 0) -> ScaleAction | None:
        """At the run's start: a cluster manager gives an application what it may take
        (standalone: every free core up to ``spark.cores.max``); keep what the first plan
        needs and give back the rest at once."""
        return self._release_to(self.needed(live_engines), batch_id, {})

    def prepare(self, live_engines: int, batch_id: int) -> ScaleAction | None:
        """A plan with ``live_engines`` was decided: ask for the executors it lacks now."""
        held = self.held()
        want = self.needed(live_engines)
        if want <= held:
            self._target = self._target if self._target is not None else want
            return None
        if self._target is not None and want <= self._target:
            # asked already: an executor lost since (a dead worker) is the manager's to
            # replace when it can, not a reason to hold every batch for it
            return None
        action = ScaleAction("request", batch_id, held, want, self.clock())
        self.client.request_total(want)
        self._target = want
        self._pending = action
        self.actions.append(action)
        return action

    def ready(self, live_engines: int, batch_id: int) -> ScaleAction | None:
        """Before a batch: the request of the plan in force, once its executors have
        registered or ``wait_s`` from the request ran out; with ``block`` it waits for
        that, else it only looks (the batch runs on what is held). A plan that needs more
        than was asked (a restart mid-scale-out) asks now."""
        self.observe_gone()
        if self._pending is None and self.prepare(live_engines, batch_id) is None:
            return None
        return self._await(self.needed(live_engines), self.block)

    def _await(self, want: int, block: bool) -> ScaleAction | None:
        """The pending request, closed with what came once ``want`` are held or its wait
        ran out (polling until then when ``block``); None while it is still open."""
        action = self._pending
        if action is None:
            return None
        deadline = action.started + self.wait_s
        held = self.held()
        while block and held < want and self.clock() < deadline:
            self.sleep(self.poll_s)
            held = self.held()
        if held < want and self.clock() < deadline:
            return None
        action.came = held
        action.ready_s = self.clock() - action.started
        self._pending = None
        return action

    def settle(self, live_engines: int, batch_id: int,
               engines_on: Mapping[str, int]) -> ScaleAction | None:
        """After a batch: release the executors the plan in force no longer needs (its
        moves are done: this batch ran them), those that ran fewest of its engines. An
        open request that did not block is looked at too (its latency to the resolution
        of the calls that look, twice a batch): the release, else that request once it
        closed, is returned."""
        self.observe_gone()
        closed = None
        if self._pending is not None:
            closed = self._await(max(self.needed(live_engines), self._pending.asked),
                                 block=False)
        return self._release_to(self.needed(live_engines), batch_id, engines_on) or closed

    def _release_to(self, keep: int, batch_id: int,
                    engines_on: Mapping[str, int]) -> ScaleAction | None:
        held = [e for e in self.client.held() if e not in self._leaving]
        ids = to_release(held, keep, engines_on)
        if not ids:
            return None
        action = ScaleAction("release", batch_id, len(held), keep, self.clock())
        action.released = list(self.client.release(ids))
        self.client.request_total(keep)  # the target the kills left may be below it
        self._target = keep
        now = self.clock()
        for e in action.released:
            self._leaving[e] = now
            self._leaving_action[e] = action
        self.actions.append(action)
        return action

    def observe_gone(self) -> None:
        """Note the released executors that the cluster manager no longer lists: their
        release latency, to the resolution of the calls that look (once per batch)."""
        if not self._leaving:
            return
        held = set(self.client.held())
        now = self.clock()
        for e in [e for e in self._leaving if e not in held]:
            action = self._leaving_action.pop(e)
            since = self._leaving.pop(e)
            if not any(x in self._leaving for x in action.released):
                action.ready_s = now - since

    def held(self) -> int:
        """Executors held now, the released ones still leaving not counted."""
        return len([e for e in self.client.held() if e not in self._leaving])
