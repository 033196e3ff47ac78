"""keyshift models layer: the GP forecasters of input rate and latency (elastic-cep §III-B)
and their MLflow registry. Public entry points: ``models.features.build_features``,
``models.gp.InputRateGP`` / ``LatencyGP``, ``models.training.train_and_register``,
``models.registry.load_champion`` (see docs/models.md). Importing this package is cheap:
torch, gpytorch and mlflow load only with the modules that need them."""
