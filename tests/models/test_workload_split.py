"""The retrain fits each workload on its own metrics rows."""

from __future__ import annotations

import pandas as pd


def test_metrics_split_by_workload_and_old_rows_count_as_the_configs_own() -> None:
    from keyshift.config import load_config
    from keyshift.models.training import split_workloads

    cfg = load_config(env={}, controller={"app": "fsd"}, kafka={"topic": "events"})
    rows = pd.DataFrame({"workload": ["heavy.clicks", None, "fsd.events", "heavy.clicks"],
                         "input_rate": [1.0, 2.0, 3.0, 4.0]})
    split = split_workloads(rows, cfg)
    assert list(split) == ["heavy.clicks", "fsd.events"]
    assert split["heavy.clicks"]["input_rate"].tolist() == [1.0, 4.0]
    assert split["fsd.events"]["input_rate"].tolist() == [2.0, 3.0]
    assert list(split_workloads(rows.drop(columns="workload"), cfg)) == ["fsd.events"]
    assert split_workloads(rows.iloc[:0].drop(columns="workload"), cfg) == {}
