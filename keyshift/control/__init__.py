"""The one control loop of keyshift (pure: numpy, no Spark, no I/O of its own).

collect (:class:`WindowStats`) → evaluate (:class:`Evaluation`) → decide (the scaler, then
the balancer, then the vetoes) → realize (a :class:`Realizer`, the store's new plan version)
→ record (:class:`ControlStore`: typed state, and the ``decisions`` audit log that is never
read back). :meth:`ControlLoop.step` is the whole loop; the Spark job
(``keyshift.streaming.controller``), the simulator (``keyshift.sim.driver``, also under the
elastic bridge) and the replays (``keyshift.drivers.elastic_replay``, ``keyshift.sim.calibrate``)
drive it through thin adapters, and nothing else calls a policy (a one-off answer:
``keyshift.control.once``). See docs/architecture.md.
"""

from keyshift.control.decision import (
    ACTIONS,
    ControlDecision,
    min_gain_veto,
    plan_action,
    plan_diff,
)
from keyshift.control.evaluate import Evaluation, evaluate
from keyshift.control.floor import FLOOR_COLUMNS, FLOOR_TOLERANCE, Floor, key_group_floor
from keyshift.control.guard import (
    GuardSettings,
    GuardState,
    ScalingGuard,
    Verdict,
    busiest_share,
)
from keyshift.control.loop import (
    MODES,
    ControlLoop,
    LoopSettings,
    Realizer,
    guard_from_config,
    loop_from_config,
    policy_from_config,
    policy_params,
)
from keyshift.control.scaling import (
    MIN_FALLBACK_WINDOWS,
    FallbackForecaster,
    Forecaster,
    FunctionForecaster,
    NoForecast,
    ScalerStep,
    SourceChange,
    fallback_forecast,
    scale_plan,
)
from keyshift.control.store import (
    ControlRecord,
    ControlStore,
    MemoryControlStore,
    ScalerState,
)
from keyshift.control.window import WindowSample, WindowStats

__all__ = [
    "ACTIONS", "FLOOR_COLUMNS", "FLOOR_TOLERANCE", "MIN_FALLBACK_WINDOWS", "MODES",
    "ControlDecision", "ControlLoop", "ControlRecord", "ControlStore", "Evaluation",
    "FallbackForecaster", "Floor", "Forecaster", "FunctionForecaster", "GuardSettings",
    "GuardState", "LoopSettings", "ScalingGuard", "Verdict", "busiest_share",
    "guard_from_config",
    "MemoryControlStore", "NoForecast", "Realizer", "ScalerState", "ScalerStep", "SourceChange",
    "WindowSample", "WindowStats", "evaluate", "fallback_forecast", "key_group_floor",
    "loop_from_config", "min_gain_veto", "plan_action", "plan_diff", "policy_from_config", "policy_params",
    "scale_plan",
]
