"""bench/bench_staged_checksum.py runs on a file as an engine task stages it and prints both
digests' times and their ratio (never asserted: a bench's numbers are read, not tested)."""

from __future__ import annotations

from bench import bench_staged_checksum as bench


def test_the_bench_times_both_digests_of_a_staged_file(capsys) -> None:
    assert bench.main(["--rows", "64", "--repeats", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# key_loads, 64 rows a file, medians of 3"
    assert [x.split()[0] for x in out[1:3]] == ["value", "column"]
    assert out[3].startswith("RATIO column by column / value by value: ")

