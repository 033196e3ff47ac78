"""The job's side of engines-as-executors without Spark (keyshift.streaming.executors): which
mode a configuration runs in and the errors for one that cannot work, the executor budget
from the config, the executor a task ran on, and what a run reports it held (executors,
cores, core-seconds, the cluster manager's count), against a fake client and clock."""

from __future__ import annotations

import pytest

from keyshift.config import load_config
from keyshift.control.resources import ExecutorBudget, ExecutorScaler
from keyshift.streaming.executors import (
    ResourcesError,
    RunResources,
    budget_from_config,
    executor_of,
    local_cores,
    resources_mode,
)


def cfg(**sections):
    base = load_config(None)
    update = {name: getattr(base, name).model_copy(update=values)
              for name, values in sections.items()}
    return base.model_copy(update=update)


def test_auto_is_executors_on_a_cluster_and_fixed_on_local_or_under_spark_da() -> None:
    assert resources_mode(cfg()) == "fixed"  # local[2]
    assert resources_mode(cfg(spark={"master": "spark://h:7077"})) == "executors"
    assert resources_mode(cfg(spark={"master": "spark://h:7077",
                                     "dynamic_allocation": True})) == "fixed"
    assert resources_mode(cfg(spark={"master": "spark://h:7077"},
                              planner={"resources": "fixed"})) == "fixed"


def test_settings_that_cannot_work_are_refused_naming_the_key() -> None:
    with pytest.raises(ResourcesError, match=r"^planner.resources: 'executors' needs a cluster"):
        resources_mode(cfg(planner={"resources": "executors"}))
    with pytest.raises(ResourcesError, match="spark.dynamic_allocation cannot both be on"):
        resources_mode(cfg(spark={"master": "spark://h:7077", "dynamic_allocation": True},
                           planner={"resources": "executors"}))


def test_run_refuses_executors_on_a_local_master_before_spark(capsys, monkeypatch) -> None:
    from keyshift.cli import main

    monkeypatch.setenv("KEYSHIFT_PLANNER__RESOURCES", "executors")
    assert main(["run", "--app", "wordcount", "--topic", "t"]) == 2
    assert "planner.resources: 'executors' needs a cluster master" in capsys.readouterr().err


def test_budget_follows_the_engine_bounds_and_cores_max() -> None:
    b = budget_from_config(cfg(engines={"min": 1, "initial": 2, "max": 8},
                               spark={"executor_cores": 2}))
    assert b == ExecutorBudget(2, 1, 4)
    b = budget_from_config(cfg(engines={"min": 1, "initial": 2, "max": 8},
                               spark={"cores_max": 3}, planner={"max_engines": 6}))
    assert b == ExecutorBudget(1, 1, 3)  # spark.cores.max caps the executors
    b = budget_from_config(cfg(planner={"engines_per_executor": 4, "min_engines": 5}))
    assert b.engines_per_executor == 4 and b.min_executors == 2


def test_executor_of_reads_a_standalone_executor_folder() -> None:
    assert executor_of("/w/worker-1/work/app-20261205142118-0000/3") == "3"
    assert executor_of("/tmp/spark-local") == "" and executor_of("") == ""
    assert local_cores("local[3]") == 3 and local_cores("local") == 1


class Client:
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.totals: list[int] = []

    def held(self) -> list[str]:
        return list(self.ids)

    def request_total(self, total: int) -> bool:
        self.totals.append(total)
        return True

    def release(self, ids):
        for e in ids:
            self.ids.remove(e)
        return list(ids)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_run_reports_what_it_held_and_core_seconds() -> None:
    clock, client = Clock(), Client(["0", "1"])
    scaler = ExecutorScaler(client, ExecutorBudget(1, 1, 2), 10.0, clock=clock,
                            sleep=lambda s: None)
    told = iter([2, 2, 1, 1])
    # the application registered 3 s before the job built its resources
    res = RunResources("executors", client, scaler, executor_cores=1,
                       cores_of_master=lambda: next(told), clock=clock, since=clock.now - 3.0)
    clock.now += 5.0
    res.after_batch(2, 0, [{"events": 3, "workdir": "/w/app-1/0"},
                           {"events": 2, "workdir": "/w/app-1/1"}])
    assert res.columns() == {"executors": 2, "cores_held": 2}
    clock.now += 10.0
    act = res.after_batch(1, 1, [{"events": 3, "workdir": "/w/app-1/0"}])
    assert act.released == ["1"] and client.totals == [1]
    assert res.columns() == {"executors": 1, "cores_held": 1}
    clock.now += 10.0
    out = res.summary()
    # as the master bills: from registration, 3 + 5 s at the 2 cores start-up was given,
    # 10 s at 2, 10 s at 1
    assert out["core_seconds"] == pytest.approx(46.0)
    assert out["core_seconds_billed"] is True
    assert out["executors_min"] == 1 and out["executors_max"] == 2
    assert [a["kind"] for a in out["scale_actions"]] == ["release"]
    assert "cores_mismatches" not in out


def test_a_scale_out_that_runs_on_is_said_once_its_executor_came() -> None:
    """``planner.wait_for_executors = false``: the batch before the executor registered runs
    on one core and returns nothing to say; the one after says the request, with what came."""
    clock, client = Clock(), Client(["0"])
    scaler = ExecutorScaler(client, ExecutorBudget(1, 1, 2), 60.0, clock=clock,
                            sleep=lambda s: (_ for _ in ()).throw(AssertionError("slept")),
                            block=False)
    res = RunResources("executors", client, scaler, executor_cores=1, clock=clock)
    asked = res.after_decision(2, 9)
    assert asked is not None and client.totals == [2]
    assert res.before_batch(2, 10) is None  # no wait: the batch runs on executor 0
    clock.now += 6.0
    assert res.after_batch(2, 10, [{"events": 5, "workdir": "/w/app-1/0"}]) is None
    client.ids.append("1")  # registered during batch 11
    clock.now += 6.0
    said = res.after_batch(2, 11, [{"events": 3, "workdir": "/w/app-1/1"}])
    assert said is asked and said.came == 2 and said.ready_s == pytest.approx(12.0)
    assert "executors 1 -> 2 asked, 2 held after 12.0 s" == said.text()


def test_the_cluster_managers_count_wins_and_a_disagreement_is_counted() -> None:
    client = Client(["0", "1"])
    res = RunResources("fixed", client, None, executor_cores=2, cores_of_master=lambda: 3,
                       clock=Clock())
    res.sample()
    assert res.columns() == {"executors": 2, "cores_held": 3}  # the master's, not 2 x 2
    assert res.summary()["cores_mismatches"] == 3  # at start, the sample, the summary


def test_a_local_master_holds_its_cores_and_says_nothing_is_released() -> None:
    clock = Clock()
    res = RunResources("fixed", None, None, executor_cores=1, local_cores=2, clock=clock)
    assert res.before_batch(4, 0) is None and res.after_decision(8, 0) is None
    clock.now += 10.0
    res.after_batch(4, 0, [])
    assert res.columns() == {"executors": None, "cores_held": 2}
    out = res.summary()
    assert out["core_seconds"] == pytest.approx(20.0) and out["executors_max"] is None
    assert "share its 2 cores" in out["resources_note"]


def test_the_report_sums_what_a_run_held_from_its_metrics_rows() -> None:
    import pandas as pd

    from keyshift.streaming.report import _held

    t0 = pd.Timestamp("2026-12-05T10:00:00Z")
    m = pd.DataFrame({
        "batch_id": [0, 1, 2, 3],
        "window_start": [t0, t0 + pd.Timedelta(seconds=10), t0 + pd.Timedelta(seconds=20),
                         t0 + pd.Timedelta(seconds=30)],
        "batch_duration_s": [2.0, 2.0, 2.0, 4.0],
        "cores_held": pd.array([1, 2, 2, 1], dtype="Int32"),
    })
    # 10 s at 1, 10 s at 2, 10 s at 2, then the last batch's 4 s at 1
    assert _held(m) == {"cores_held_max": 2, "core_seconds": 54.0}
    old = m.assign(cores_held=pd.array([None] * 4, dtype="Int32"))  # rows before schema 4
    assert _held(old) == {"cores_held_max": None, "core_seconds": None}
    assert _held(m.iloc[:0]) == {"cores_held_max": None, "core_seconds": None}


def test_the_report_gives_the_core_seconds_the_runs_processes_counted(tmp_path) -> None:
    """One number everywhere: the report reads what each process of the run counted from
    its registration (what ``run --json`` said), start-up included, and sums the processes
    of a resumed run; a local master's count is said not to be a cluster's bill."""
    import pandas as pd

    from keyshift.streaming.executors import read_held, write_held
    from keyshift.streaming.report import _held

    path = tmp_path / "resources.json"
    t0 = pd.Timestamp("2026-12-05T10:00:00Z")
    m = pd.DataFrame({"batch_id": [0, 1], "window_start": [t0, t0 + pd.Timedelta(seconds=10)],
                      "batch_duration_s": [2.0, 2.0],
                      "cores_held": pd.array([1, 1], dtype="Int32")})
    write_held(path, "app-1", {"core_seconds": 120.5, "core_seconds_billed": True})
    write_held(path, "app-1", {"core_seconds": 130.0, "core_seconds_billed": True})  # later
    write_held(path, "app-2", {"core_seconds": 20.0, "core_seconds_billed": True})
    assert read_held(path) == {"core_seconds": 150.0, "core_seconds_billed": True,
                               "processes": 2}
    assert _held(m, path) == {"cores_held_max": 1, "core_seconds": 150.0,
                              "core_seconds_billed": True}
    write_held(path, "local-1", {"core_seconds": 5.0, "core_seconds_billed": False})
    assert "nothing was billed by a cluster" in _held(m, path)["core_seconds_note"]
    assert _held(m, tmp_path / "none.json")["core_seconds"] == 12.0  # the rows' count
    path.write_text("{not json")
    assert read_held(path) is None


def test_executors_are_asked_for_ahead_of_the_path_and_kept_until_it_passes() -> None:
    clock, client = Clock(), Client(["0"])
    scaler = ExecutorScaler(client, ExecutorBudget(1, 1, 4), 10.0, clock=clock,
                            sleep=lambda s: None)
    res = RunResources("executors", client, scaler, executor_cores=1, clock=clock)
    assert res.lead_windows(10.0) == 1  # nothing measured yet: the decision's own window
    res.after_decision(1, 0, ahead=2)  # the path plans 2 engines a window later
    assert client.totals == [2]
    client.ids.append("1")
    res.after_batch(1, 1, [{"events": 3, "workdir": "/w/app-1/0"}])
    assert client.ids == ["0", "1"]  # kept: the path still plans it
    res.after_decision(1, 1, ahead=None)  # the path moved on
    res.after_batch(1, 2, [{"events": 3, "workdir": "/w/app-1/0"}])
    assert client.ids == ["0"]
    scaler.actions[0].ready_s = 23.0  # a request that took 23 s: 3 windows of 10 s
    assert res.lead_windows(10.0) == 3


def test_the_controller_reads_its_scalers_path_ahead() -> None:
    from types import SimpleNamespace

    from keyshift.streaming.controller import Controller

    c = Controller.__new__(Controller)
    path = SimpleNamespace(path_=[1, 2, 3, 1], position_=1)
    c.loop = SimpleNamespace(scaler=SimpleNamespace(scaler=path))
    assert c.planned_ahead(1) == 2 and c.planned_ahead(2) == 3 and c.planned_ahead(0) is None
    c.loop = SimpleNamespace(scaler=None)
    assert c.planned_ahead(3) is None
