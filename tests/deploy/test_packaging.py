"""Installing keyshift adds one top-level package, ``keyshift`` (issue 12): the layers keep
their folders (models/, streaming/, jobs/, lakehouse/, examples/) but install as
``keyshift.models`` and so on, so ``import models`` in a user's own code never finds ours."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder_of(package: str) -> Path:
    """Where a dotted package's files are, by pyproject's package-dir mapping."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in SETUP["package-dir"]:
            return ROOT / SETUP["package-dir"][head] / Path(*parts[n:])
    return ROOT / Path(*parts)


def test_every_package_folder_is_listed_and_every_listed_package_exists() -> None:
    """The package list is explicit (package-dir mappings need it): a new sub-folder with an
    ``__init__.py`` that is not listed would be missing from the wheel."""
    listed = set(SETUP["packages"])
    for package in listed:
        assert (_folder_of(package) / "__init__.py").is_file(), package
    roots = {"keyshift": ROOT / "keyshift",
             **{name: ROOT / folder for name, folder in SETUP["package-dir"].items()}}
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            if "__pycache__" in rel:
                continue
            assert ".".join([name, *rel]) in listed, f"{init.parent} is not in [tool.setuptools] packages"


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(tmp_path) -> None:
    # built from a copy: setuptools leaves build/ and *.egg-info beside the sources
    src = tmp_path / "src"
    src.mkdir()
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, src / name)
    for folder in ["keyshift", *SETUP["package-dir"].values()]:
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(src)],
                   check=True, capture_output=True, text=True)
    wheel, = tmp_path.glob("keyshift-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"keyshift"}
    for module in ("keyshift/streaming/engines.py", "keyshift/models/gp_predictor.py",
                   "keyshift/jobs/airflow_tasks.py", "keyshift/lakehouse/delta.py",
                   "keyshift/examples/sessions.py", "keyshift/defaults.toml"):
        assert module in names, module
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "run = keyshift.streaming.commands.run" in text


def test_outside_the_repository_only_the_namespace_imports() -> None:
    """From another folder (no repository on sys.path) the installed keyshift resolves
    ``keyshift.streaming`` and leaves the generic names free."""
    code = ("import importlib.util as u, json; import keyshift.streaming.engines, "
            "keyshift.lakehouse.delta, keyshift.models, keyshift.jobs, keyshift.examples; "
            "print(json.dumps([m for m in ('models', 'streaming', 'jobs', 'examples', "
            "'lakehouse') if u.find_spec(m)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip().splitlines()[-1] == "[]"
