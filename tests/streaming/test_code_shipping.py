"""A user's code on the executors (keyshift.streaming.code_shipping): what is zipped for a
module, a package and an installed distribution, ``--py-files``, the import check's line, and
(keyshift.lakehouse.python_daemon) that the executors' Python workers never take a module
from the folder a run starts in.

The cluster runs of a user's operator are in test_cluster_user_operator.py."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from keyshift.cli import main
from keyshift.lakehouse.python_daemon import cwd_entries
from keyshift.streaming import code_shipping
from keyshift.streaming.code_shipping import (
    ExecutorImportError,
    ShippingError,
    driver_py_files,
    import_failures,
    operator_code,
    ship,
    zip_code,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder on the driver's path: a module, a package (with bytecode and a cache
    to leave behind) and a data file of the package's."""
    folder = tmp_path / "mine"
    (folder / "fraud" / "__pycache__").mkdir(parents=True)
    (folder / "shipops46.py").write_text("class Op:\n    pass\n")
    (folder / "fraud" / "__init__.py").write_text("")
    (folder / "fraud" / "rules.py").write_text("class CardFraud:\n    pass\n")
    (folder / "fraud" / "limits.json").write_text("{}")
    (folder / "fraud" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"\0")
    (folder / "fraud" / "old.pyc").write_bytes(b"\0")
    (folder / "msgpack.py").write_text("")  # not the operator's: never shipped with it
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("shipops46", "fraud", "fraud.rules"):
        sys.modules.pop(name, None)


def _names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return sorted(zf.namelist())


def test_a_module_of_the_users_folder_is_zipped_alone(user_folder: Path, tmp_path: Path) -> None:
    importlib.import_module("shipops46")
    code = operator_code("shipops46")
    assert code.kind == "local" and code.source == user_folder / "shipops46.py"
    zipped = zip_code([code.source], tmp_path / "pyfiles", code.top)
    assert _names(zipped) == ["shipops46.py"]


def test_a_package_is_zipped_whole_without_bytecode(user_folder: Path, tmp_path: Path) -> None:
    importlib.import_module("fraud.rules")
    code = operator_code("fraud.rules")
    assert (code.top, code.kind, code.source) == ("fraud", "local", user_folder / "fraud")
    zipped = zip_code([code.source], tmp_path / "pyfiles", code.top)
    assert _names(zipped) == ["fraud/__init__.py", "fraud/limits.json", "fraud/rules.py"]


def test_the_zip_is_named_by_its_content(user_folder: Path, tmp_path: Path) -> None:
    """Spark refuses a second file of one name from another path in one application: the
    same code is the same path, changed code a new one."""
    source = user_folder / "shipops46.py"
    first = zip_code([source], tmp_path / "a", "shipops46")
    assert zip_code([source], tmp_path / "a", "shipops46") == first
    source.write_text("class Op:\n    changed = True\n")
    second = zip_code([source], tmp_path / "a", "shipops46")
    assert second != first and second.is_file() and first.is_file()


def test_installed_and_keyshift_code_is_not_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert operator_code("keyshift.apps.wordcount").kind == "keyshift"
    assert not operator_code("keyshift.apps.wordcount").needs_check
    installed = operator_code("msgpack")  # site-packages
    assert installed.kind == "installed" and installed.needs_check
    # an editable install lives outside site-packages: its distribution says it is installed
    monkeypatch.setattr(code_shipping, "_installed_roots", lambda: [])
    assert operator_code("msgpack").distribution == "msgpack"


def test_ship_adds_the_users_code_and_nothing_installed(user_folder: Path,
                                                        tmp_path: Path) -> None:
    added: list[str] = []
    spark = SimpleNamespace(sparkContext=SimpleNamespace(addPyFile=added.append))
    importlib.import_module("shipops46")
    ship(spark, operator_code("shipops46"), [], tmp_path / "pyfiles")
    assert len(added) == 1 and _names(Path(added[0])) == ["shipops46.py"]
    added.clear()
    ship(spark, operator_code("msgpack"), [], tmp_path / "pyfiles")
    assert added == []


def test_py_files_go_on_the_drivers_path_and_cover_the_operator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyfops46.py").write_text("from pyfhelp46 import RATE\nclass Op:\n    rate = RATE\n")
    (src / "pyfhelp46.py").write_text("RATE = 3\n")
    lib = tmp_path / "lib46.zip"
    with zipfile.ZipFile(lib, "w") as zf:
        zf.writestr("libmod46.py", "X = 1\n")
    try:
        shipped = driver_py_files(f"{src / 'pyfops46.py'}, {src / 'pyfhelp46.py'},{lib}",
                                  tmp_path / "pyfiles")
        assert len(shipped) == 2 and shipped[1] == lib
        assert _names(shipped[0]) == ["pyfhelp46.py", "pyfops46.py"]
        assert importlib.import_module("pyfops46").Op.rate == 3
        assert importlib.import_module("libmod46").X == 1
        code = operator_code("pyfops46", shipped)
        assert code.kind == "py-files"  # shipped with the --py-files zip, not zipped again
    finally:
        for name in ("pyfops46", "pyfhelp46", "libmod46"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("entry, needle", [
    ("nothere.py", "nothere.py: no such file"),
    ("notes.txt", "expected a .py, .zip or .egg file"),
    ("fake.zip", "not a zip archive"),
    ("a/dup.py,b/dup.py", "more than one module named dup"),
])
def test_bad_py_files_are_one_line(tmp_path: Path, entry: str, needle: str) -> None:
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "fake.zip").write_text("not a zip")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "dup.py").write_text("")
    entries = ",".join(str(tmp_path / e) for e in entry.split(","))
    with pytest.raises(ShippingError, match=f"^--py-files: .*{needle}"):
        driver_py_files(entries, tmp_path / "pyfiles")


def test_run_refuses_bad_py_files_before_spark(tmp_path: Path, capsys,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSHIFT_HOME", str(tmp_path / "home"))
    code = main(["run", "--app", "wordcount", "--py-files", str(tmp_path / "gone.py")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"keyshift run: --py-files: {tmp_path / 'gone.py'}: "
                                 "no such file"]


def test_the_import_checks_line_names_the_executors_the_module_and_the_fix() -> None:
    rows = [("host-a", "0", "ModuleNotFoundError: No module named 'helpers46' (at x.py:1)"),
            ("host-b", "1", None),
            ("host-a", "2", "ModuleNotFoundError: No module named 'helpers46' (at x.py:1)"),
            ("host-c", "", "ModuleNotFoundError: No module named 'helpers46' (at x.py:1)")]
    line = import_failures(rows, "userops")
    assert line is not None and "\n" not in line
    assert "'userops'" in line and "No module named 'helpers46'" in line
    assert "executor 0 on host-a, executor 2 on host-a, an executor on host-c" in line
    assert "executor 1" not in line and "--py-files" in line
    assert import_failures([("h", "0", None)], "userops") is None
    assert issubclass(ExecutorImportError, Exception)


def test_the_daemon_drops_the_folder_it_starts_in() -> None:
    """``python -m`` puts the folder first; a relative or empty PYTHONPATH entry names it or
    a folder under it (Python has made both absolute by then); absolute entries stay."""
    path = ["/run/here", "/site", "/run/here/rel", "/elsewhere", "/usr/lib/python3.11"]
    assert cwd_entries(path, "/run/here", ":rel:/elsewhere") == ["/run/here", "/run/here/rel"]
    assert cwd_entries(["", ".", "/site"], "/run/here", "") == ["", "."]
    assert cwd_entries(["/site"], "/run/here", "") == []


# -- integration: Spark's own Python workers ---------------------------------------------------

PROBE = textwrap.dedent('''
    import json, sys
    from keyshift.config import load_config
    from keyshift.lakehouse.session import get_spark

    spark = get_spark(load_config(), app_name="keyshift-cwd-probe")

    def probe(_):
        import os, sys
        try:
            import msgpack
            where = msgpack.__file__
        except ImportError as exc:
            where = f"ImportError: {exc}"
        return [{"cwd": os.getcwd(), "msgpack": where}]

    print(json.dumps(spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()))
    spark.stop()
''')


@pytest.mark.integration
def test_python_workers_do_not_import_a_module_of_the_folder_a_run_starts_in(
        tmp_path: Path) -> None:
    folder = tmp_path / "start-here"
    folder.mkdir()
    marker = tmp_path / "planted-msgpack-imported"
    (folder / "msgpack.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nraise ImportError('planted')\n")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "KEYSHIFT_HOME": str(tmp_path / "home"),
           "KEYSHIFT_SPARK__MASTER": "local[1]", "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "1",
           "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": ".:"}  # the worst a user's shell may hold: the current folder
    env.setdefault("KEYSHIFT_CACHE", str(ROOT / ".keyshift" / "cache"))
    res = subprocess.run([sys.executable, str(tmp_path / "probe.py")], cwd=folder, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen[0]["cwd"] == str(folder)  # a local master's workers run in the driver's folder
    assert not marker.exists(), seen
    assert "site-packages" in seen[0]["msgpack"], seen


@pytest.mark.integration
def test_the_import_check_on_a_local_master(spark, tmp_path: Path) -> None:
    """One task per executor: a module they cannot import is named with the executor, and
    once shipped (addPyFile) it imports."""
    from keyshift.streaming.code_shipping import check_executors_import

    with pytest.raises(ExecutorImportError, match="'localcheck46'.*No module named "
                       "'localcheck46'.*--py-files"):
        check_executors_import(spark, "localcheck46")
    source = tmp_path / "localcheck46.py"
    source.write_text("VALUE = 46\n")
    spark.sparkContext.addPyFile(str(zip_code([source], tmp_path / "pyfiles", "localcheck46")))
    check_executors_import(spark, "localcheck46")
