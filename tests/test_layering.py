"""docs/design.md's rule: the arrows point down. Importing every module of the pure core must not
load Spark, Airflow, torch, MLflow, Kafka or any layer below keyshift/."""

import json
import subprocess
import sys

FORBIDDEN = ["pyspark", "delta", "airflow", "torch", "gpytorch", "mlflow", "kafka",
             "models", "streaming", "jobs", "lakehouse", "examples", "dags"]


def test_pure_core_imports_nothing_heavy():
    code = f"""
import importlib, json, pkgutil, sys
import keyshift
for m in pkgutil.walk_packages(keyshift.__path__, "keyshift."):
    importlib.import_module(m.name)
names = {{name.split(".")[0] for name in sys.modules}}
names |= {{name.split(".")[1] for name in sys.modules if name.startswith("keyshift.")}}
bad = sorted(names & set({FORBIDDEN!r}))
print(json.dumps(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_batch_layer_does_not_import_the_speed_layer():
    """jobs/ and streaming/ both stand on lakehouse/ (session, jars, Delta gateway); a batch
    job never imports the streaming job to get a session."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [*(root / "jobs").rglob("*.py"), *(root / "dags").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names
                      if n.startswith(("keyshift.streaming", "streaming"))]
    assert found == []
