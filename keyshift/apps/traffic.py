"""Traffic anomaly on bus positions and delays, key = city area (elastic-cep §IV).

The paper's Esper rule "checked if more than 10 buses have continuously high delay values and
whether at some time instance inside the examined window their distance was less than 10m".
Here, per area and within a sliding event-time window:

* a bus is *delayed* when its last ``streak`` reports all had ``delay_s`` ≥ ``high_delay_s``
  (continuously high delay) and its latest report lies inside the window;
* a *close encounter* happens when a delayed bus reports a position within ``near_m`` metres of
  another delayed bus's latest position;
* ``traffic_anomaly`` fires when more than ``min_buses`` buses are delayed and a close
  encounter lies inside the window. It fires on the transition into that condition and is
  re-armed when the condition clears, so a long jam is one complex event, not thousands.

``area_of`` maps a position to the key (a grid cell), shared by producers and replays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from keyshift.apps.base import ComplexEvent, Operator, OperatorInputError, detail_json
from keyshift.schemas import Column

_EARTH_M = 6_371_000.0


def area_of(lon: float, lat: float, cell_deg: float = 0.01) -> str:
    """Grid cell of a position, the traffic key (0.01° ≈ 1.1 km × 0.7 km in Dublin)."""
    if cell_deg <= 0:
        raise OperatorInputError("cell_deg", f"must be > 0, got {cell_deg}")
    return f"a{math.floor(lon / cell_deg)}_{math.floor(lat / cell_deg)}"


def distance_m(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """Equirectangular distance: exact enough at the scale of a city area."""
    x = math.radians(lon2 - lon1) * math.cos(math.radians((lat1 + lat2) / 2))
    y = math.radians(lat2 - lat1)
    return _EARTH_M * math.hypot(x, y)


class TrafficAnomaly(Operator):
    """Per area: > ``min_buses`` continuously delayed buses and two of them within ``near_m``."""

    app = "traffic"
    event_columns = (
        Column("line_id", "STRING"), Column("vehicle_id", "STRING"),
        Column("lon", "DOUBLE", False), Column("lat", "DOUBLE", False),
        Column("delay_s", "DOUBLE", False, "delay against the timetable, seconds"),
        Column("congestion", "INT"),
    )
    event_doc = "bus positions and delays; key = city area (elastic-cep §IV)"
    required = ("vehicle_id", "lon", "lat", "delay_s")

    def __init__(
        self,
        min_buses: int = 10,
        high_delay_s: float = 300.0,
        streak: int = 3,
        near_m: float = 10.0,
        window_s: float = 600.0,
    ) -> None:
        super().__init__()
        if min_buses < 0:
            raise OperatorInputError("min_buses", f"must be >= 0, got {min_buses}")
        if streak < 1:
            raise OperatorInputError("streak", f"must be >= 1, got {streak}")
        if near_m <= 0:
            raise OperatorInputError("near_m", f"must be > 0, got {near_m}")
        if window_s <= 0:
            raise OperatorInputError("window_s", f"must be > 0, got {window_s}")
        self.min_buses = min_buses
        self.high_delay_s = high_delay_s
        self.streak = streak
        self.near_m = near_m
        self.window_s = window_s

    def _new_state(self) -> dict[str, Any]:
        # buses: vehicle → [high-delay streak, last ts, lon, lat]
        return {"buses": {}, "close_ts": None, "firing": False}

    def _on_event(self, state: dict[str, Any], event: Mapping[str, Any]) -> list[ComplexEvent]:
        lon, lat = float(event["lon"]), float(event["lat"])
        # a position off the globe is refused before the state changes: its distance to
        # another bus would be meaningless, or no number at all (cos of an infinite angle)
        if not -180.0 <= lon <= 180.0:
            raise OperatorInputError("lon", f"must be in [-180, 180], got {lon}")
        if not -90.0 <= lat <= 90.0:
            raise OperatorInputError("lat", f"must be in [-90, 90], got {lat}")
        ts = int(event["ts"])
        horizon = ts - int(self.window_s * 1000)
        buses: dict[str, list] = state["buses"]
        for vid in [v for v, b in buses.items() if b[1] < horizon]:
            del buses[vid]
        vid = str(event["vehicle_id"])
        high = float(event["delay_s"]) >= self.high_delay_s
        prev = buses.get(vid)
        streak = (prev[0] + 1 if prev else 1) if high else 0
        buses[vid] = [streak, ts, lon, lat]
        delayed = [v for v, b in buses.items() if b[0] >= self.streak]
        if streak >= self.streak:
            for other in delayed:
                if other != vid:
                    b = buses[other]
                    if distance_m(lon, lat, b[2], b[3]) < self.near_m:
                        state["close_ts"] = ts
                        break
        close = state["close_ts"] is not None and state["close_ts"] >= horizon
        now = len(delayed) > self.min_buses and close
        fired = now and not state["firing"]
        state["firing"] = now
        if not fired:
            return []
        return [
            ComplexEvent(
                key=str(event["key"]),
                ts=ts,
                kind="traffic_anomaly",
                detail=detail_json(delayed_buses=len(delayed), close_ts=state["close_ts"]),
                event_id=str(event["id"]),
            )
        ]
