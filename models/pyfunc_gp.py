"""The pyfunc face of a registered GP, logged as code (MLflow's "models from code").

MLflow logs a ``PythonModel`` instance by pickling it; any client that loads such a version
unpickles it, and whoever can write a version could run code there. Logging this file instead
stores no pickle: an MLflow client serving the model runs keyshift's own class, which reads
the ``gp`` artifact with :meth:`models.gp.GPForecaster.load` (JSON, .npz, tensors only).
keyshift itself never loads the pyfunc: :mod:`models.registry` reads the artifact directly.
"""

from mlflow.models import set_model

from models.registry import GPPyfuncModel

set_model(GPPyfuncModel())
