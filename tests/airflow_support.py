"""The one environment of the Airflow tests: a private AIRFLOW_HOME with a SQLite database and
the repo's DAGs, a private keyshift home beside it, and the jar cache shared across tests
(``airflow db migrate`` and ``dag.test()`` run in subprocesses with it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"


def airflow_env(tmp: Path, **keyshift: str) -> dict[str, str]:
    """The caller's environment plus Airflow and keyshift settings under ``tmp``; ``keyshift``
    adds KEYSHIFT_* variables (e.g. ``KEYSHIFT_GROUPS__COUNT="64"``)."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp / 'airflow' / 'airflow.db'}",
        "KEYSHIFT_HOME": str(tmp / "ks"),
        "KEYSHIFT_CACHE": str(ROOT / ".keyshift" / "cache"),
        "KEYSHIFT_SPARK__SHUFFLE_PARTITIONS": "2",
        "PYSPARK_PYTHON": sys.executable,
        **keyshift,
    })
    env.pop("KEYSHIFT_CONFIG", None)
    return env


def migrate(env: dict[str, str]) -> None:
    """``airflow db migrate`` in that environment (Airflow needs it before dag.test())."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    mig = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert mig.returncode == 0, mig.stderr[-2000:]
