"""Issue 46 item 8: `keyshift run --app userops:X` from the folder that holds userops.py
fails on the driver (the keyshift script does not put the current folder on the path); the
one line says how to give it."""

from __future__ import annotations

import sys

import pytest

from keyshift.apps import resolve_operator
from keyshift.apps.base import OperatorInputError


def test_a_module_of_the_current_folder_gets_the_py_files_hint(tmp_path, monkeypatch):
    (tmp_path / "userops_hint_probe.py").write_text("class X: pass\n")
    monkeypatch.chdir(tmp_path)
    # as under the keyshift script: the current folder is not on the path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    with pytest.raises(OperatorInputError, match=r"give it with --py-files userops_hint_probe\.py"):
        resolve_operator("userops_hint_probe:X")


def test_a_module_nowhere_gets_no_hint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OperatorInputError, match=r"on the Python path\)$"):
        resolve_operator("nowhere_module_probe:X")
