"""The driver JVM's heap cap: ``[spark] driver_memory`` must reach the JVM as ``-Xmx`` by the
way :mod:`keyshift.lakehouse.session` starts it (its own launch, stderr to a file).

Why: ``spark.driver.memory`` is read only when the JVM starts; set on a running JVM it is
ignored without a word, and an uncapped JVM grows its heap towards a quarter of the RAM, so
a soak's driver RSS (bench/bench_soak.py) would say nothing about a leak. Fast: no JVM is
started. A clean interpreter runs ``get_spark`` with PySpark's process start replaced, which
captures the ``spark-submit`` command PySpark would run; Spark's own launcher (what
``spark-submit`` execs, with Spark's env script) then prints the java command it builds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CAPTURE = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    import pyspark.java_gateway as gateway

    from keyshift.config import load_config
    from keyshift.lakehouse import session

    home, memory, options = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    class Captured(Exception):
        pass

    def popen(command, **kwargs):
        print(json.dumps(command))
        raise Captured

    gateway.Popen = popen
    session.spark_jars = lambda *args, **kwargs: []  # no download: jars do not matter here
    session.jvm_stderr = lambda: home / "jvm.err"  # the job's path: _launch_driver
    cfg = load_config(env={}, home=str(home), spark={"driver_memory": memory,
                                                     "driver_java_options": options})
    try:
        session.get_spark(cfg)
    except Captured:
        pass
''')


def java_command(submit: list[str], spark_home: Path) -> list[str]:
    """The java command Spark's launcher builds for a ``spark-submit`` command line (what
    ``bin/spark-class`` reads from it: NUL-separated, after a NUL marker)."""
    script = ('. "$SPARK_HOME/bin/load-spark-env.sh"; '
              'exec java -Xmx128m -cp "$SPARK_HOME/jars/*" org.apache.spark.launcher.Main '
              'org.apache.spark.deploy.SparkSubmit "$@"')
    out = subprocess.run(["bash", "-c", script, "launcher", *submit],
                         env={**os.environ, "SPARK_HOME": str(spark_home)},
                         capture_output=True, timeout=120, check=True).stdout
    return [a.decode() for a in out.split(b"\0") if a]


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (as Spark does)")
@pytest.mark.parametrize("memory, options", [("768m", ""),
                                             ("2g", "-XX:TieredStopAtLevel=1 -Dks.x=1")])
def test_driver_memory_becomes_the_jvm_heap_cap(tmp_path: Path, memory: str,
                                                options: str) -> None:
    """... and ``[spark] driver_java_options`` reach it too, after keyshift's own."""
    import pyspark

    captured = subprocess.run([sys.executable, "-c", CAPTURE, str(tmp_path), memory, options],
                              capture_output=True, text=True, timeout=120, check=False)
    assert captured.returncode == 0, captured.stderr
    submit = json.loads(captured.stdout.strip().splitlines()[-1])
    assert Path(submit[0]).name == "spark-submit"
    assert f"spark.driver.memory={memory}" in submit
    command = java_command(submit[1:], Path(pyspark.__file__).parent)
    assert Path(command[0]).name == "java"
    heap = [a for a in command if a.startswith("-Xmx")]
    assert heap == [f"-Xmx{memory}"], command
    assert all(o in command for o in options.split()), command
    assert any(a.startswith("-Dderby.system.home=") for a in command), command


def test_the_driver_jvm_starts_ignoring_sigterm_as_pyspark_makes_it_ignore_sigint() -> None:
    """A SIGTERM to the whole process group must leave the JVM to the Python side's orderly
    stop, as Ctrl-C does. PySpark sets ``preexec_fn`` itself (ignoring SIGINT) over the
    ``popen_kwargs`` it is given, the way its ``launch_gateway`` does here; the child still
    starts with both signals ignored, and with SIGTERM alone when no one sets another."""
    import signal

    from keyshift.lakehouse.session import _DriverPopen

    show = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) == "
            "signal.SIG_IGN, signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)"]

    def pyspark_like(popen_kwargs: dict) -> str:
        def preexec_func() -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

        popen_kwargs["stdout"] = subprocess.PIPE
        popen_kwargs["preexec_fn"] = preexec_func
        return subprocess.Popen(show, text=True, **popen_kwargs).communicate()[0].split()

    assert pyspark_like(_DriverPopen()) == ["True", "True"]
    assert pyspark_like({}) == ["True", "False"]  # what PySpark alone does
    alone = subprocess.run(show, capture_output=True, text=True,
                           preexec_fn=_DriverPopen()["preexec_fn"])
    assert alone.stdout.split() == ["False", "True"]
