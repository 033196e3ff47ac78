"""``python -m bench`` (``make bench``): the benchmarks of bench/ by name.

    python -m bench                      # list them, with what each measures
    python -m bench stream --quick       # run bench/bench_stream.py with these arguments

Each benchmark prints ratios against a baseline run in the same process (a plain Spark peer,
the MILP, seasonal naive, ...); none asserts a time.
"""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def main(argv: list[str]) -> int:
    found = benches()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m bench NAME [ARGS...]   (make bench BENCH=NAME BENCH_ARGS=...)\n")
        width = max(map(len, found))
        for name, path in found.items():
            print(f"  {name:<{width}}  {summary(path)}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in found:
        print(f"bench: no benchmark {name!r}; one of: {', '.join(found)}", file=sys.stderr)
        return 2
    sys.argv = [str(found[name]), *rest]
    sys.path.insert(0, str(HERE))  # as when the script runs by itself (bench/timing.py)
    try:
        runpy.run_path(str(found[name]), run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
