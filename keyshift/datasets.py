"""Where the real data sets are: the one place that resolves the ``data/`` folder.

The real data sets (bus positions, tweets, access logs, load series; their sources and
licences are in ``data/README.md``) are vendored in the repository's ``data/`` folder, beside
``keyshift/``. Every reader asks this module for the folder: the replays
(``keyshift.workloads.replay``), ``keyshift simulate --scenario elastic``, ``keyshift produce``
examples, the forecast benchmarks and the tests.

The folder is resolved, in this order:

1. an explicit folder (``--data-dir`` of a command), when given;
2. ``$KEYSHIFT_DATA``, when set;
3. ``<checkout>/data``: the folder beside the ``keyshift/`` package of a source checkout
   (``make venv`` installs keyshift editable, so this is the repository's ``data/``).

The data are deliberately **not** package data: 11 MB of test and benchmark inputs do not
belong in every wheel, and nothing a user runs on a fresh install (``keyshift demo``, the
generators) needs them. An installed, non-editable keyshift has no ``data/`` beside its
package; point ``KEYSHIFT_DATA`` at a checkout's ``data/`` (or a copy of it) there.

A missing folder or file is a :class:`DataMissingError` naming the folder, where its
location came from and how to set another.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "KEYSHIFT_DATA"
CHECKOUT_DATA = Path(__file__).resolve().parents[1] / "data"
"""``data/`` of the source checkout this module was imported from."""


class DataMissingError(FileNotFoundError):
    """The data folder, or a data file in it, does not exist; the message names it."""


def _where(override: str | os.PathLike[str] | None) -> tuple[Path, str]:
    if override:
        return Path(override).expanduser(), "the given folder"
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser(), f"${ENV}"
    return CHECKOUT_DATA, "the source checkout"


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the real data sets (see the module's docstring for the order)."""
    path, source = _where(override)
    if not path.is_dir():
        raise DataMissingError(
            f"data folder {path} ({source}) does not exist: the real data sets live in the "
            f"repository's data/ folder; set {ENV} to a copy of it")
    return path


def data_file(name: str, override: str | os.PathLike[str] | None = None) -> Path:
    """One data file by name (e.g. ``nab_nyc_taxi.csv``) in :func:`data_dir`."""
    folder = data_dir(override)
    path = folder / name
    if not path.is_file():
        raise DataMissingError(
            f"data file {name} is missing from {folder} (listed with its source in "
            f"data/README.md)")
    return path
