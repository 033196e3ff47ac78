"""Drivers of the control loop over the elasticity models: they stand above
:mod:`keyshift.control` (and :mod:`keyshift.sim`) and run a scaler window by window through
:class:`keyshift.control.ControlLoop`.

- :mod:`elastic_replay` — the per-window replay of a load series (elastic-cep's accounting,
  Eq. 1–2 and 11–12): the model the elasticity evaluation runs in.
- :mod:`elastic_sim` — the same scalers inside the tick-level simulator (``keyshift.sim``),
  the replay's cross-check with queues, key groups, a balancer and migration pauses.

``keyshift.elastic`` is the scaler's pure parts (costs, graph, planner, baselines); it
imports neither the loop nor these drivers.
"""
