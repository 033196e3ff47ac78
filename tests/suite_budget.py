"""What bounds the suite's time on this machine: the CPU every process spent while it ran.

Why: the suite's wall time has a floor that no ordering or parallel workers can go under,
the CPU seconds its processes need divided by the cores (issue 25 item 7 asks for <= 20 min
on two cores). Python's ``getrusage`` undercounts it: the driver JVM of each ``keyshift run``
outlives its Python parent (it exits when its stdin closes) and is reaped by init, and a
killed process group's children too, so their CPU never reaches the suite's children. The
machine's own counters (``/proc/stat``) see every process; on a shared host they also count
the neighbours' load, which the line says.
"""

from __future__ import annotations

import os
from pathlib import Path

TARGET_S = 20 * 60.0  # issue 25 item 7


def machine_cpu_seconds(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds this machine's cores have spent busy since boot (user, nice, system, irq,
    softirq and steal; not idle or iowait), or None where there is no ``/proc/stat``."""
    try:
        first = stat.read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(x) for x in first[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def budget_line(cpu_s: float, wall_s: float, cores: int, target_s: float = TARGET_S) -> str:
    """One line for the end of a run: the CPU spent, what it means for the wall time on
    ``cores`` perfectly packed, and what the target would allow."""
    floor_s = cpu_s / cores
    verdict = ("within it" if floor_s <= target_s
               else f"{floor_s / target_s:.2f}x its {target_s / 60:.0f} min even then")
    return (f"CPU while the suite ran (every process on this machine): {cpu_s:,.0f} CPU s in "
            f"{wall_s:,.0f} s wall, {cpu_s / wall_s:.2f} of {cores} cores busy. Spread perfectly "
            f"over the {cores} cores it needs >= {floor_s:,.0f} s ({floor_s / 60:.1f} min): "
            f"{verdict}; the target allows {cores * target_s:,.0f} CPU s.")
