"""Whether a run is alive (issue 28 item 4): its job's heartbeat beside the warehouse, with a
fake clock; ``keyshift status`` reads it through ``keyshift.streaming.runs.alive``."""

from __future__ import annotations

import json
import time

import pytest

from keyshift.config import load_config
from keyshift.streaming import heartbeat
from keyshift.streaming.heartbeat import Heartbeat, stale_after_s


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_bound_is_three_triggers_and_at_least_30_s() -> None:
    assert stale_after_s(1.0) == 30.0
    assert stale_after_s(10.0) == 30.0
    assert stale_after_s(60.0) == 180.0


def test_alive_while_the_heartbeat_is_younger_than_its_bound(tmp_path) -> None:
    run_uri = str(tmp_path / "_runs" / "r1")
    clock = Clock()
    hb = Heartbeat(run_uri, trigger_s=2.0, clock=clock)
    assert heartbeat.read(run_uri) is None
    assert heartbeat.alive(None, clock.t, 2.0) == (False, None)  # never started
    hb.beat()
    beat = heartbeat.read(run_uri)
    assert beat["time"] == clock.t and beat["stale_after_s"] == 30.0
    assert heartbeat.alive(beat, clock.t + 29.9, 2.0) == (True, pytest.approx(29.9))
    # a job killed outright: its last heartbeat ages past the bound
    assert heartbeat.alive(beat, clock.t + 30.1, 2.0)[0] is False
    # an idle job keeps beating, so it stays alive however long ago its last batch was
    clock.t += 3600
    hb.beat()
    assert heartbeat.alive(heartbeat.read(run_uri), clock.t + 5, 2.0)[0] is True


def test_the_bound_the_job_wrote_wins_over_the_readers_trigger(tmp_path) -> None:
    run_uri = str(tmp_path / "r")
    Heartbeat(run_uri, trigger_s=60.0, clock=lambda: 0.0).beat()  # bound 180 s
    beat = heartbeat.read(run_uri)
    assert heartbeat.alive(beat, 170.0, trigger_s=1.0)[0] is True
    assert heartbeat.alive({"time": 0.0}, 170.0, trigger_s=1.0)[0] is False  # reader's: 30 s
    assert heartbeat.alive({"time": 0.0}, 170.0, trigger_s=60.0)[0] is True


def test_a_clean_stop_clears_it_and_the_thread_beats_meanwhile(tmp_path) -> None:
    run_uri = str(tmp_path / "r")
    hb = Heartbeat(run_uri, trigger_s=1.0, interval_s=0.05)
    hb.start()
    try:
        first = heartbeat.read(run_uri)["time"]
        deadline = time.monotonic() + 10
        while heartbeat.read(run_uri)["time"] == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert heartbeat.read(run_uri)["time"] > first, "the thread did not beat again"
    finally:
        hb.stop()
    assert heartbeat.read(run_uri) is None
    hb.stop()  # twice (the demo stops its job twice): nothing to do


def test_unreadable_heartbeats_are_not_alive(tmp_path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    for body in ("not json", "[]", json.dumps({"time": "yesterday"})):
        (run / "heartbeat").write_text(body)
        assert heartbeat.read(str(run)) is None


def test_runs_alive_reads_the_runs_heartbeat_beside_the_warehouse(tmp_path) -> None:
    """The rule ``keyshift status`` applies, without Spark: a fake heartbeat, a fake now."""
    from keyshift.streaming.runs import alive

    cfg = load_config(env={}, home=str(tmp_path / "ks"), spark={"trigger_s": 2.0})
    run_uri = cfg.runs_uri("prod")
    assert run_uri.startswith(str(tmp_path / "ks" / "warehouse"))
    assert alive(cfg, "prod", 100.0) == (False, None)
    (tmp_path / "ks" / "warehouse" / "_runs" / "prod").mkdir(parents=True)
    (tmp_path / "ks" / "warehouse" / "_runs" / "prod" / "heartbeat").write_text(
        json.dumps({"time": 100.0}))
    assert alive(cfg, "prod", 120.0) == (True, 20.0)
    assert alive(cfg, "prod", 131.0) == (False, 31.0)  # 3 x max(2 s, 10 s) = 30 s
