"""``make bench`` (``python -m bench``): lists the benchmarks and runs one by name."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_lists_every_benchmark_with_what_it_measures() -> None:
    out = _bench()
    assert out.returncode == 0
    names = {p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py")}
    listed = {line.split()[0] for line in out.stdout.splitlines()[2:] if line.strip()}
    assert listed == names
    assert "plain Spark" in out.stdout  # the stream bench's first docstring line


def test_runs_one_by_name_and_refuses_an_unknown_one() -> None:
    out = _bench("split", "--help")
    assert out.returncode == 0 and "usage" in out.stdout.lower()
    bad = _bench("nope")
    assert bad.returncode == 2 and "no benchmark 'nope'" in bad.stderr
