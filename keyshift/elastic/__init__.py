"""Elasticity: choose the number of engines ahead of time (elastic-cep §III).

- :mod:`cost` — Eq. 9–13: misses, engine and reconfiguration costs, their σ.
- :mod:`graph` — shortest path over the layered (engines, window) graph, with limits.
- :mod:`planner` — :class:`GraphPlanner`: forecasts → path, cost, σ, rejection (θ1).
- :mod:`path_scaler` — Algorithm 1 (:class:`PathScaler`): follow the path, re-plan on
  rejection (θ1, θ2).
- :mod:`baselines` — static maximum, QT (M/M/c), thresholds 80/40 %, DS2-style.
- :mod:`forecast` — the series-model protocol (:class:`SeriesModel`) and a pure-numpy
  seasonal baseline.
- :mod:`capacity` — the per-window engine latency model the evaluation runs in.

The drivers that run these scalers through the control loop (the per-window replay, the
simulator bridge) stand above it, in :mod:`keyshift.drivers`.

Pure numpy/scipy: the GP forecasters of ``models/`` plug in through the protocol.
"""
