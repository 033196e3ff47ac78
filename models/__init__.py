"""keyshift models layer: the GP forecasters of input rate and latency (elastic-cep §III-B)
and their MLflow registry. Public entry points: ``keyshift.models.features.build_features``,
``keyshift.models.gp.InputRateGP`` / ``LatencyGP``, ``keyshift.models.training.train_and_register``,
``keyshift.models.registry.load_champion`` (see docs/models.md). Importing this package is cheap:
torch, gpytorch and mlflow load only with the modules that need them."""
