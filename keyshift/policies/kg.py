"""KG, key grouping (dlb §4): a fixed hash of the group, never moves anything.

The baseline every other policy is compared with: Storm's default ``key % |Engines|``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from keyshift.plan import Plan
from keyshift.policies.base import Policy, PolicyKind, Window


class KeyGrouping(Policy):
    name = "kg"
    kind = PolicyKind.FIXED

    def _decide(self, plan: Plan, window: Window) -> tuple[Plan, dict[str, Any], np.ndarray | None]:
        return plan, {"reason": "kg never moves"}, None
