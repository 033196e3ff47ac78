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

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in [*(root / "jobs").rglob("*.py"), *(root / "dags").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names
                      if n.startswith(("keyshift.streaming", "streaming"))]
    assert found == []


ROOT = Path(__file__).resolve().parents[2]
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


# ---- the floors of the pure core (issue 25 item 3) --------------------------------------
# Every module of keyshift/ stands on one floor; it may import its own floor and the floors
# below, never one above, and no modules import each other in a circle. A prefix names a
# module or a package with everything under it. The order is `farm-studio look keyshift`'s.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("keyshift", "keyshift.schemas", "keyshift.errors", "keyshift.groups", "keyshift.plan",
     "keyshift.metrics", "keyshift.sketch", "keyshift.quantiles", "keyshift.datasets",
     "keyshift.workload_names"),
    ("keyshift.apps", "keyshift.split", "keyshift.policies", "keyshift.elastic"),
    ("keyshift.config", "keyshift.cli", "keyshift.workloads", "keyshift.control",
     "keyshift.kafka_security"),
    ("keyshift.sim",),                                                # drives the loop
    ("keyshift.drivers",),              # the loop over the elastic replay and the simulator
    ("keyshift.experiments",),
    ("keyshift.commands",),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, name: str) -> list[tuple[str, int]]:
    """Every module name an import statement of the file names, anywhere in it (top level,
    under ``if TYPE_CHECKING:``, inside a function), with its line: ``from a import b``
    names ``a`` and ``a.b`` (b may be a submodule)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((module, node.lineno))
            found += [(f"{module}.{a.name}", node.lineno) for a in node.names]
    return found


def module_graph(root: Path, package: str = "keyshift") -> dict[str, dict[str, int]]:
    """module -> {imported module of the same package: the first line that imports it}."""
    files = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for m, path in files.items():
        for target, line in imported_names(path, m):
            if target in files and target != m:
                graph[m].setdefault(target, line)
    return graph


def floor_of(module: str, floors: tuple[tuple[str, ...], ...] = FLOORS) -> int | None:
    best: tuple[int, int] | None = None  # (length of the longest matching prefix, floor)
    for i, prefixes in enumerate(floors):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, dict[str, int]],
                   floors: tuple[tuple[str, ...], ...] = FLOORS) -> list[str]:
    return [f"{m}:{line} imports {t} (floor {floor_of(m, floors)} -> {floor_of(t, floors)})"
            for m, targets in graph.items() for t, line in targets.items()
            if floor_of(t, floors) > floor_of(m, floors)]


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_core_module_stands_on_a_floor() -> None:
    assert [m for m in module_graph(ROOT) if floor_of(m) is None] == []


def test_no_import_in_the_core_runs_back_up() -> None:
    """control sits above elastic and policies, the simulator above control, the drivers of
    the loop (keyshift.drivers) above both: a module imports only its floor and below,
    TYPE_CHECKING and function-level imports included."""
    assert upward_imports(module_graph(ROOT)) == []


def test_no_modules_of_the_core_import_each_other_in_a_circle() -> None:
    assert circles(module_graph(ROOT)) == []


def test_the_checker_catches_an_import_back_up_and_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "keyshift"
    (pkg / "control").mkdir(parents=True)
    (pkg / "elastic").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "control" / "__init__.py").write_text("from keyshift.control.loop import Loop\n")
    (pkg / "control" / "loop.py").write_text("from ..elastic import replay\nclass Loop: ...\n")
    (pkg / "elastic" / "__init__.py").write_text("")
    (pkg / "elastic" / "replay.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import keyshift.sim\n"
        "def run():\n    from keyshift.control import Loop\n    return Loop()\n")
    (pkg / "sim.py").write_text("")
    graph = module_graph(tmp_path)
    assert graph["keyshift.control.loop"] == {"keyshift.elastic": 1, "keyshift.elastic.replay": 1}
    assert upward_imports(graph) == [
        "keyshift.elastic.replay:3 imports keyshift.sim (floor 1 -> 3)",
        "keyshift.elastic.replay:5 imports keyshift.control (floor 1 -> 2)",
    ]
    assert circles(graph) == [["keyshift.control", "keyshift.control.loop",
                               "keyshift.elastic.replay"]]


# --- small functions where the runtime lives (issue 43 item 4) ------------------------------
MAX_FUNCTION_LINES = 60
SMALL_FUNCTION_TREES = ("streaming", "lakehouse", "keyshift/control")


def long_functions(root: Path, trees=SMALL_FUNCTION_TREES,
                   limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:name lines`` of every function (methods and nested ones too) longer than
    ``limit`` lines, its decorators and docstring included."""
    found = []
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        found.append(f"{path.relative_to(root)}:{node.name} {lines}")
    return found


def test_no_function_of_the_runtime_is_over_60_lines() -> None:
    """A function that needs more than a screen does more than one thing: the streaming job,
    the lakehouse gateway and the control loop keep theirs under 60 lines."""
    assert long_functions(Path(__file__).resolve().parents[2]) == []


def test_the_length_check_finds_a_long_method(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    (tmp_path / "streaming").mkdir()
    (tmp_path / "streaming" / "long.py").write_text(
        f"class A:\n    def short(self):\n        return 1\n\n    def long(self):\n{body}\n")
    assert long_functions(tmp_path, ("streaming",)) == ["streaming/long.py:long 61"]
