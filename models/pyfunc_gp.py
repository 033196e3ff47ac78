"""The pyfunc face of a registered GP, logged as code (MLflow's "models from code").

MLflow logs a ``PythonModel`` instance by pickling it; any client that loads such a version
unpickles it, and whoever can write a version could run code there. Logging this file instead
stores no pickle. It is self-contained on purpose: an MLflow client serving the model needs
mlflow, numpy and pandas (the version's pinned requirements) and the ``gp_predictor`` module
packaged with the version (``code_paths``) — neither keyshift's ``models`` package nor torch.
The ``predictor`` artifact is :meth:`keyshift.models.gp.GPForecaster.predictor_parts` (JSON and .npz).
keyshift itself never loads the pyfunc: :mod:`keyshift.models.registry` reads the ``gp`` artifact.
"""

import pandas as pd
from mlflow.models import set_model
from mlflow.pyfunc import PythonModel

try:  # the copy packaged with the version: MLflow puts its code/ folder on sys.path
    from gp_predictor import GPPredictor
except ImportError:  # logging from keyshift, where MLflow runs this file to check it
    from keyshift.models.gp_predictor import GPPredictor


class GPPyfuncModel(PythonModel):
    """A DataFrame of the model's feature columns in, ``mean`` and ``std`` columns out."""

    def load_context(self, context) -> None:
        self.gp = GPPredictor.load(context.artifacts["predictor"])

    def predict(self, context, model_input, params=None):
        names = list(self.gp.feature_names)
        missing = [c for c in names if c not in model_input.columns]
        if missing:
            raise ValueError(f"model_input: missing feature columns {missing}")
        mean, std = self.gp.predict(model_input[names].to_numpy("float64"))
        return pd.DataFrame({"mean": mean, "std": std})


set_model(GPPyfuncModel())
