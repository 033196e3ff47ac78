"""The repository stands on its own (issue 25 item 6): no tracked file points outside the
checkout, the design document is the project's own (docs/design.md) and matches the code's
data contracts, and the real data sets are vendored in data/ where every loader finds them."""

from __future__ import annotations

import hashlib
import itertools
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, import_bench

from keyshift import datasets
from keyshift.datasets import DataMissingError, data_dir, data_file
from keyshift.elastic.errors import ElasticInputError
from keyshift.experiments import elastic
from keyshift.schemas import TABLES
from keyshift.workloads import WorkloadInputError, replay_events
from keyshift.workloads.replay import REPLAYS

# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    r"\.\./" + "shared" + r"|\b" + "shared" + r"/(data|papers|DESIGN)"
    r"|" + "DESIGN" + r"\.md"
    r"|parents?(\[\d\])?\s*/\s*[\"']" + "shared" + r"[\"']"
)


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_refers_outside_the_repository():
    found = []
    for path in _tracked_files():
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary data
            continue
        text = data.decode("utf-8", errors="replace")
        for no, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()[:100]}")
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_the_design_document_lists_every_delta_table():
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Data contracts", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\s*\| `([a-z_]+)` \|", section, flags=re.M))
    assert listed == set(TABLES)


# --- data/ ----------------------------------------------------------------------------------

def _readme() -> str:
    return (ROOT / "data" / "README.md").read_text()


def readme_files() -> list[str]:
    """The data files data/README.md's table lists (first column, one file per row)."""
    return re.findall(r"^\| `([^`]+)` \|", _readme(), flags=re.M)


def readme_checksums() -> dict[str, str]:
    return {m[2]: m[1] for m in re.finditer(r"^([0-9a-f]{64})  (\S+)$", _readme(), flags=re.M)}


def test_the_readme_lists_every_file_of_the_folder_with_its_checksum():
    names = readme_files()
    assert len(names) == 10, names
    on_disk = {p.name for p in (ROOT / "data").iterdir()
               if p.name not in ("README.md", "LICENSE-Apache-2.0.txt")}
    assert set(names) == on_disk
    assert set(readme_checksums()) == set(names)


@pytest.fixture(scope="module")
def loaders_read() -> dict[str, list[str]]:
    """Data file → the loaders that read it: every replay (by the file's bare name, found in
    the data folder from any current directory), every series of the elastic scenario and
    of the forecast benchmark, each run once with the data lookup recorded."""
    reads: dict[str, list[str]] = {}
    for name in readme_files():
        for fmt, (_, _, pattern) in REPLAYS.items():
            if pattern in name.lower():
                _, events = replay_events(name)
                first = list(itertools.islice(events, 50))
                assert first and all({"id", "key", "ts"} <= e.keys() for e in first), name
                reads.setdefault(name, []).append(f"replay {fmt}")

    bench = import_bench("bench_forecast")
    runs = [(f"elastic {s}", elastic, lambda s=s: elastic.load_series(s))
            for s in elastic.SERIES]
    runs += [(f"bench_forecast {s}", bench, load) for s, (_, load) in bench.SERIES.items()]
    for label, module, load in runs:
        asked: list[str] = []

        def recording(name, *args, asked=asked):
            asked.append(name)
            return data_file(name, *args)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(module, "data_file", recording)
            t, y = load()
        assert len(t) > 10 and len(t) == len(y), label
        for name in asked:
            reads.setdefault(name, []).append(label)
    return reads


@pytest.mark.parametrize("name", readme_files())
def test_every_data_file_exists_unchanged_and_a_loader_reads_it(name, loaders_read):
    path = data_file(name)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == readme_checksums()[name]
    assert loaders_read.get(name), f"no loader reads {name}"


def test_the_folder_resolves_from_the_environment_and_a_missing_one_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(datasets.ENV, str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(DataMissingError, match="nab_nyc_taxi.csv is missing from"):
        data_file("nab_nyc_taxi.csv")
    with pytest.raises(ElasticInputError, match="nab_nyc_taxi.csv"):
        elastic.load_series("taxi")
    with pytest.raises(WorkloadInputError, match="nasa_19950801.tsv"):
        replay_events("nasa_19950801.tsv")

    gone = tmp_path / "gone"
    monkeypatch.setenv(datasets.ENV, str(gone))
    named = f"data folder {re.escape(str(gone))} .*KEYSHIFT_DATA"
    with pytest.raises(DataMissingError, match=named):
        data_dir()
    assert data_dir(ROOT / "data") == ROOT / "data"  # an explicit folder wins


def test_keyshift_data_is_not_taken_for_a_config_key(tmp_path: Path):
    from keyshift.config import load_config

    load_config(env={datasets.ENV: str(tmp_path)})  # no "config key data: unknown key"
