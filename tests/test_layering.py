"""docs/design.md's rule: the arrows point down. Importing every module of the pure core must not
load Spark, Airflow, torch, MLflow, Kafka or any layer below keyshift/. And one control loop:
only the policies, the loop and the papers' experiment tables call a policy's ``decide``."""

import ast
import json
import subprocess
import sys
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ("keyshift/policies/", "keyshift/control/", "keyshift/experiments/")
PRODUCT = ("keyshift", "streaming", "jobs", "models", "lakehouse", "dags", "examples")


def decide_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "decide"]


def test_only_the_policies_the_loop_and_the_experiments_call_decide() -> None:
    """Issue 25 item 2. Every other module asks the control loop (keyshift.control.ControlLoop
    through its driver, or keyshift.control.once.decide_once for a one-off answer), so the
    job, the simulator and the replays decide alike; bench/ and tests/ measure and test the
    policies themselves and are not product code."""
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            found += [f"{rel}:{line}" for line in decide_calls(path)]
    assert found == []


def test_the_scan_finds_a_call(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f(p, plan, w):\n    return p.decide(plan, w)\n")
    assert decide_calls(f) == [2]


DELTA_ACCESS = ("DeltaTable", 'format("delta")', "import deltalake", "from deltalake",
                "delta.tables", "write_deltalake")


def delta_access(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(root)}: {needle}" for needle in DELTA_ACCESS if needle in text]


def test_only_the_lakehouse_opens_delta_tables() -> None:
    """Issue 25 item 4: every production read or write of a Delta table (time travel,
    maintenance and key lookups included) goes through lakehouse/ (docs/architecture.md)."""
    outside = [d for d in PRODUCT if d != "lakehouse"]
    found = [hit for d in outside for path in sorted((ROOT / d).rglob("*.py"))
             for hit in delta_access(path)]
    assert found == []


def test_the_delta_scan_finds_an_access(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text('df = spark.read.format("delta").load(path)\n', encoding="utf-8")
    assert delta_access(job, tmp_path) == ['job.py: format("delta")']
