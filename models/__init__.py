"""keyshift models layer: the GP forecasters of input rate and latency (elastic-cep §III-B)
and their MLflow registry. Public entry points: ``keyshift.models.features.build_features``,
``keyshift.models.gp.InputRateGP`` / ``LatencyGP``, ``keyshift.models.training.train_and_register``,
``keyshift.models.registry.load_champion`` (see docs/models.md). Importing this package is cheap:
torch, gpytorch and mlflow load only with the modules that need them."""

import os as _os

# MLflow's usage telemetry is on by default and writes under ~/.config: a user of keyshift
# did not ask for either (issue 46 item 11). A caller that sets it keeps its choice.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
