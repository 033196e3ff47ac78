"""The simulator calibrated on a real run (``keyshift simulate --calibrate RUN_ID``).

* :mod:`.run` reads a finished run's folder (``job.json``, ``batches.jsonl``,
  ``progress.jsonl``);
* :mod:`.model` is the micro-batch cost model and its least-squares fit;
* :mod:`.replay` routes the run's per-batch input through a plan that evolves as a policy
  would (keyshift's control loop) and times it with the model;
* :mod:`.compare` scores the replay against the run (and a held-out half);
* :mod:`.project` replays the input scaled to more engines under each policy.

Pure numpy/scipy, like the rest of :mod:`keyshift.sim`; docs/simulator.md, "Calibrated on
a real run".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .compare import ERRORS, against, calibration
from .model import CostModel, fit, list_schedule
from .project import policies_for, project, spark_task_fixed_s
from .run import Batch, CalibrationError, Run, Task, find_run, read_run

DEFAULT_ENGINES = (8, 32, 128)


def calibrate(home: Path, run_id: str, engines: list[int] | tuple[int, ...] = DEFAULT_ENGINES,
              cores: int | None = None, cfg: Any = None,
              others: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The whole answer of ``keyshift simulate --calibrate``: fitted terms, calibration
    errors (with the held-out half), the prediction of each run of ``others`` (``--against``:
    runs the model never saw) and the projection rows."""
    run = read_run(find_run(home, run_id), cfg)
    model = fit(run.batches, run.cores)
    cal = calibration(run, model)
    if others:
        cal["against"] = [against(model, run, read_run(find_run(home, o), cfg)) for o in others]
    t0, t0_from = spark_task_fixed_s(model)
    return {
        "run_id": run.run_id, "app": run.app, "policy": run.policy,
        "engines_measured": run.engines, "cores_measured": run.cores,
        "groups": run.groups, "per_window": run.per_window, "timed_by": run.timed_by,
        "settings_from": run.settings_from,
        "model": {**model.terms(), "spark_task_fixed_s": t0, "spark_task_fixed_from": t0_from},
        "calibration": cal,
        "projection": project(run, model, list(engines), cores),
    }


__all__ = [
    "DEFAULT_ENGINES", "ERRORS", "Batch", "against", "CalibrationError", "CostModel", "Run", "Task",
    "calibrate", "calibration", "find_run", "fit", "list_schedule", "policies_for",
    "project", "read_run",
]
