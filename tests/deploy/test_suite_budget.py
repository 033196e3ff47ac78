"""The line the suite ends with: the CPU it took and the wall-time floor that sets on this
machine's cores (tests/suite_budget.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_budget import budget_line, machine_cpu_seconds


def test_busy_seconds_leave_out_idle_and_iowait(tmp_path: Path) -> None:
    import os

    stat = tmp_path / "stat"
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(f"cpu  {10 * hz} {hz} {5 * hz} {900 * hz} {50 * hz} 0 {hz} {hz} 0 0\n"
                    "cpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert machine_cpu_seconds(stat) == 18.0
    assert machine_cpu_seconds(tmp_path / "absent") is None


def test_this_machines_counter_reads_within_its_uptime_on_every_core() -> None:
    """The real ``/proc/stat`` parses: busy seconds since boot, at most uptime x cores."""
    busy = machine_cpu_seconds()
    if busy is None:
        pytest.skip("no /proc/stat here: the suite prints no CPU line")
    cores = sum(1 for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("cpu") and line[3].isdigit())
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert 0 < busy <= uptime * cores * 1.01  # counters round per tick


def test_the_line_gives_the_floor_and_the_targets_allowance() -> None:
    # the full suite of 2026-11-29: 3,224 CPU s over 2,469 s on two cores
    line = budget_line(3224.0, 2469.0, 2)
    assert "3,224 CPU s in 2,469 s wall, 1.31 of 2 cores busy" in line
    assert ">= 1,612 s (26.9 min): 1.34x its 20 min even then" in line
    assert "the target allows 2,400 CPU s" in line
    assert "within it" in budget_line(1800.0, 1500.0, 2)
