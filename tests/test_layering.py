"""DESIGN.md's rule: the arrows point down. Importing every module of the pure core must not
load Spark, Airflow, torch, MLflow, Kafka or any layer below keyshift/."""

import json
import subprocess
import sys

FORBIDDEN = ["pyspark", "delta", "airflow", "torch", "gpytorch", "mlflow", "kafka",
             "models", "streaming", "jobs", "dags"]


def test_pure_core_imports_nothing_heavy():
    code = f"""
import importlib, json, pkgutil, sys
import keyshift
for m in pkgutil.walk_packages(keyshift.__path__, "keyshift."):
    importlib.import_module(m.name)
bad = sorted({{name.split(".")[0] for name in sys.modules}} & set({FORBIDDEN!r}))
print(json.dumps(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
