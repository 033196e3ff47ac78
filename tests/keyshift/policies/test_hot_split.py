"""Which groups the Spark job splits with dc / wc, over which engines (pure core), and the
refusals before Spark starts."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshift.groups import group_of
from keyshift.plan import Plan
from keyshift.policies import PolicyInputError, make_policy
from keyshift.policies.hot_split import hot_groups, splitting_policy
from keyshift.workloads.events import make_generator

GROUPS = 4096


def _zipf_loads(n: int = 3000, skew: str = "zipf:1.5") -> np.ndarray:
    keys = [e["key"] for e in make_generator("wordcount", skew=skew, seed=3, keys=500)
            .batch(n, 0.0, 0)]
    return np.bincount([group_of(k, GROUPS) for k in keys], minlength=GROUPS).astype(float)


@pytest.mark.parametrize("policy", ["dc", "wc"])
def test_the_hot_words_of_zipf_1_5_are_the_head(policy):
    loads = _zipf_loads()
    plan = Plan.hashed(GROUPS, 4)
    head = hot_groups(make_policy(policy), loads, plan)
    order = np.argsort(-loads, kind="stable")
    # θ = 2/(5n) = 10 % on 4 engines: the two hottest words (~41 % and ~13 %), heaviest first
    assert head == tuple(int(g) for g in order[:2])
    assert loads[order[2]] / loads.sum() < 0.1 < loads[order[1]] / loads.sum()
    assert hot_groups(make_policy(policy), loads, plan) == head  # deterministic
    assert hot_groups(make_policy(policy, hot_threshold=0.5), loads, plan) == ()


def test_nothing_is_split_without_a_head_or_with_one_engine():
    assert hot_groups(make_policy("dc"), np.ones(GROUPS), Plan.hashed(GROUPS, 4)) == ()
    assert hot_groups(make_policy("dc"), np.zeros(GROUPS), Plan.hashed(GROUPS, 4)) == ()
    assert hot_groups(make_policy("wc"), _zipf_loads(), Plan.hashed(GROUPS, 1)) == ()


@settings(max_examples=60, deadline=None)
@given(loads=st.lists(st.integers(0, 1000), min_size=8, max_size=8), engines=st.integers(2, 5))
def test_the_head_is_every_group_above_theta(loads, engines):
    x = np.array(loads, dtype=float)
    head = hot_groups(make_policy("wc"), x, Plan.hashed(8, engines))
    theta = 2 / (5 * engines)
    assert set(head) == ({g for g in range(8) if x[g] / x.sum() > theta} if x.sum() else set())
    assert [x[g] for g in head] == sorted((x[g] for g in head), reverse=True)


def test_pkg_is_not_a_splitter_of_the_job():
    with pytest.raises(PolicyInputError, match="^policy: pkg splits every key over two engines"):
        splitting_policy(make_policy("pkg"))


def test_keyshift_run_refuses_dc_with_fsd_in_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "keyshift.cli", "run", "--app", "fsd", "--policy",
                        "dc", "--topic", "t"], check=False, capture_output=True, text=True,
                       env={**os.environ, "KEYSHIFT_HOME": str(tmp_path)}, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "keyshift run: --policy: dc splits a hot key's events over several engines, but "
        "operator 'fsd'"), r.stderr


def test_split_in_the_input_tasks_then_home_engine_equal_one_engine_without_spark(
        tmp_path, monkeypatch):
    """The engines' own functions, no Spark: a hot group's events summarized by three input
    tasks (a partition of the events, as Kafka's partitions are), the summaries run by the
    home engine with the other groups' events, over two batches with a late event and an
    event the operator refuses: the same complex events, dead letters and state as one
    engine fed everything."""
    import json

    from keyshift.streaming import engines
    from keyshift.streaming.engines import (
        DEAD,
        OUT,
        TASK,
        BatchSpec,
        input_batch,
        run_engine,
        run_split,
    )

    monkeypatch.setattr(engines, "cache_root", lambda _key: tmp_path / "cache")
    t0 = 1_700_000_000_000

    def rows(batch: int, n: int):
        for i in range(n):
            key = "hot" if i % 3 else f"w{i % 5}"
            ts = t0 + batch * 1_000 + i * 37 - (900 if (batch, i) == (1, 4) else 0)  # one late
            e = {"id": f"b{batch}e{i}", "key": key, "word": key, "ts": ts}
            if (batch, i) == (1, 7):
                del e["word"]  # refused by the operator: a dead letter, not a lost count
            yield (0 if key == "hot" else 1 + i % 2, i % 4 % 3, batch * 100 + i, e,
                   None, f"raw{i}", ts / 1e3, None)

    def spec(root: str, batch: int, split: bool) -> BatchSpec:
        return BatchSpec(batch, "wordcount", {"window_s": 0.3}, root, str(tmp_path / root),
                         split_homes={0: 70} if split else {}, engine0_pkey=70)

    whole, parts = [], []
    for b in range(2):
        one = list(run_engine(spec("one", b, False), 0, [input_batch("wordcount", rows(b, 40))]))
        whole += sorted(r for kind, r in one if kind in (OUT, DEAD))
        hot = [r for r in rows(b, 40) if r[0] == 0]
        made = [s for task in range(3)
                for s in run_split(spec("split", b, True), task,
                                   [input_batch("wordcount", [r for r in hot if r[1] == task])])]
        assert {s[7] for s in made} == {70} and all(s[3] is None for s in made)
        rest = [r for r in rows(b, 40) if r[0] != 0]
        recs = list(run_engine(spec("split", b, True), 0,
                               [input_batch("wordcount", rest + [s[:7] + (s[8],) for s in made])]))
        parts += sorted(r for kind, r in recs if kind in (OUT, DEAD))
        tasks = [r for kind, r in recs if kind == TASK]
        assert len(tasks) == 1 + len({r[1] for r in hot}) >= 3 and sum(t["events"] for t in tasks if t.get("split")) == \
            sum(t.get("summarized", 0) for t in tasks)
    assert parts == whole and any(r[2] == "hot" for r in whole if len(r) == 7)
