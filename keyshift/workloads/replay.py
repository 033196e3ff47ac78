"""Readers of the real data sets in ``data/`` (:mod:`keyshift.datasets`) as keyshift events,
in event-time order.

Each reader keeps the original timestamps (epoch ms) so a replay can compress time by a
speed-up factor and keep the real burstiness; the key is what the application operators key
on (bus area, LSH bucket of the tweet, client host as the session). ``replay_events`` picks
the reader from the file name, or from ``fmt`` when the file has been renamed. A bare file
name that is not in the current folder is looked up in the data folder, so
``keyshift produce --replay nasa_19950801.tsv`` works from anywhere.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from keyshift.apps.fsd import lsh_key
from keyshift.apps.traffic import area_of
from keyshift.datasets import DataMissingError, data_file
from keyshift.workloads.skew import WorkloadInputError

Event = dict[str, Any]


def dublin_bus(path: Path) -> Iterator[Event]:
    """Dublin SIRI AVL rows (no header, 15 columns, µs timestamps) → traffic events."""
    with open(path, newline="") as f:
        for row_no, row in enumerate(csv.reader(f)):
            if len(row) < 15:
                continue
            try:
                lon, lat = float(row[8]), float(row[9])
                yield {
                    "id": f"dublin-{row_no}", "key": area_of(lon, lat),
                    "ts": int(row[0]) // 1000, "line_id": row[1], "vehicle_id": row[12],
                    "lon": lon, "lat": lat, "delay_s": float(row[10]),
                    "congestion": int(row[7]),
                }
            except ValueError:
                continue


def airline_tweets(path: Path) -> Iterator[Event]:
    """Airline tweets (minute timestamps, newest first in the file) → fsd events, oldest first."""
    rows = []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for row_no, row in enumerate(csv.DictReader(f)):
            try:
                ts = datetime.strptime(row["tweet_created"], "%m/%d/%Y %H:%M").replace(tzinfo=UTC)
            except (KeyError, ValueError):
                continue
            text = (row.get("text") or "").strip()
            if text:
                rows.append((int(ts.timestamp() * 1000), row_no, text))
    rows.sort()
    for ts, row_no, text in rows:
        yield {"id": f"tweet-{row_no}", "key": lsh_key(text), "ts": ts, "text": text}


_APACHE = re.compile(
    r'^(?P<host>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?:\S+) (?P<url>\S+)[^"]*" '
    r"(?P<status>\d{3})"
)


def apache_log(path: Path) -> Iterator[Event]:
    """Apache combined log → click events keyed by client host (a session proxy).

    Lines are written when a request completes, so they are only nearly in time order;
    the (small) file is sorted by request time, ties in file order.
    """
    events = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for row_no, line in enumerate(f):
            m = _APACHE.match(line)
            if not m:
                continue
            ts = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z")
            events.append({
                "id": f"apache-{row_no}", "key": m["host"], "ts": int(ts.timestamp() * 1000),
                "user": None if m["user"] == "-" else m["user"], "url": m["url"],
                "status": int(m["status"]),
            })
    events.sort(key=lambda e: e["ts"])
    yield from events


def nasa_log(path: Path) -> Iterator[Event]:
    """NASA-HTTP TSV (unix seconds) → click events keyed by host."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for row_no, row in enumerate(csv.DictReader(f, delimiter="\t")):
            try:
                yield {
                    "id": f"nasa-{row_no}", "key": row["host"], "ts": int(row["time"]) * 1000,
                    "user": None, "url": row["url"], "status": int(row["response"]),
                }
            except (KeyError, TypeError, ValueError):
                continue


# format → (application, reader, file-name pattern)
REPLAYS: dict[str, tuple[str, Callable[[Path], Iterator[Event]], str]] = {
    "dublin": ("traffic", dublin_bus, "dublin"),
    "tweets": ("fsd", airline_tweets, "tweets"),
    "apache": ("clicks", apache_log, "apache"),
    "nasa": ("clicks", nasa_log, "nasa"),
}


def replay_format(path: Path, fmt: str | None = None) -> str:
    if fmt:
        if fmt not in REPLAYS:
            raise WorkloadInputError(
                "format", f"unknown replay format {fmt!r}; known: {', '.join(REPLAYS)}")
        return fmt
    for name, (_, _, pattern) in REPLAYS.items():
        if pattern in path.name.lower():
            return name
    raise WorkloadInputError(
        "replay", f"cannot tell the format of {path.name}; pass --format "
        f"({', '.join(REPLAYS)})")


def replay_events(path: str | Path, fmt: str | None = None) -> tuple[str, Iterator[Event]]:
    """(application, events in event-time order) of one real data file."""
    p = Path(path)
    if not p.is_file():
        if p.parent != Path("."):
            raise WorkloadInputError("replay", f"file {p} does not exist")
        try:
            p = data_file(p.name)
        except DataMissingError as exc:
            raise WorkloadInputError(
                "replay", f"file {p} does not exist here, and {exc}") from None
    app, reader, _ = REPLAYS[replay_format(p, fmt)]
    return app, reader(p)
