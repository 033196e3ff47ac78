"""Plans: which engine owns each key group.

A plan is an integer array ``group → engine`` over engine *slots* ``0..slots-1`` plus a
``live`` mask. Slots keep their identity when ELB removes an engine (the slot is marked
not live) so that a scale-in never renumbers the survivors: renumbering would look like,
and in Spark would be, a state move of every group on a renumbered engine.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Plan:
    """Assignment of p key groups to engine slots, with a version for the plans table."""

    assignment: np.ndarray
    slots: int  # engine ids 0..slots-1, live or not (the live count: parallelism)
    version: int = 0
    live: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        a = np.asarray(self.assignment, dtype=np.int64)
        if a.ndim != 1:
            raise ValueError("plan assignment must be one-dimensional")
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")
        live = (
            np.ones(self.slots, dtype=bool)
            if self.live is None
            else np.asarray(self.live, dtype=bool)
        )
        if live.shape != (self.slots,):
            raise ValueError(f"live mask has {live.shape[0]} entries for {self.slots} slots")
        if not live.any():
            raise ValueError("a plan needs at least one live engine")
        if a.size and (a.min() < 0 or a.max() >= self.slots):
            raise ValueError(f"plan assigns a group to an engine outside 0..{self.slots - 1}")
        if a.size and not live[a].all():
            raise ValueError("plan assigns a group to an engine that is not live")
        a.setflags(write=False)
        live.setflags(write=False)
        object.__setattr__(self, "assignment", a)
        object.__setattr__(self, "live", live)

    @property
    def engines(self) -> int:
        """The slots, by their name before 2026-12-06: a policy written against it still
        runs, and a DeprecationWarning (shown under pytest and ``python -W``) names the two
        counts it may have meant."""
        warnings.warn("Plan.engines is Plan.slots (engine ids, live or not); use slots, or "
                      "parallelism for the live engines", DeprecationWarning, stacklevel=2)
        return self.slots

    @property
    def groups(self) -> int:
        return int(self.assignment.size)

    @property
    def live_engines(self) -> np.ndarray:
        """Slot ids of the live engines, ascending."""
        return np.flatnonzero(self.live)

    @property
    def parallelism(self) -> int:
        """π: the number of live engines."""
        return int(self.live.sum())

    @property
    def dense_index(self) -> np.ndarray:
        """Slot → position among the live engines (−1 for a dead slot): policies work on
        the π live engines as 0..π−1 and map back through :attr:`live_engines`."""
        dense = np.full(self.slots, -1, dtype=np.int64)
        dense[self.live_engines] = np.arange(self.parallelism)
        return dense

    @classmethod
    def hashed(cls, groups: int, engines: int, version: int = 0) -> Plan:
        """Key grouping (KG): group g on engine ``g mod engines``. Never moves anything."""
        return cls(np.arange(groups, dtype=np.int64) % engines, engines, version)

    def engine_loads(self, loads: np.ndarray) -> np.ndarray:
        """L = Aᵀ Y: load per engine slot (dead slots get 0)."""
        return np.bincount(self.assignment, weights=loads, minlength=self.slots)

    def with_assignment(
        self, assignment: np.ndarray, slots: int | None = None, live: np.ndarray | None = None
    ) -> Plan:
        """The next version of this plan."""
        return Plan(
            assignment,
            self.slots if slots is None else slots,
            self.version + 1,
            self.live if live is None and slots is None else live,
        )

    def to_dict(self) -> dict:
        return {  # "engines": the plans table's name for the slots
            "version": self.version,
            "engines": self.slots,
            "live": self.live.tolist(),
            "assignment": self.assignment.tolist(),
        }
