"""Issue 25 item 1: policies declare themselves once (name, kind, parameters on the class);
one registry (shipped + entry points of group ``keyshift.policies``) answers every consumer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from keyshift.config import ConfigError, load_config
from keyshift.plan import Plan
from keyshift.policies import Policy, PolicyInputError, PolicyKind, Window, make_policy, registry
from keyshift.policies.registry import (
    JOB_KINDS,
    SHIPPED,
    WHOLE_GROUP_KINDS,
    policy_info,
    policy_names,
)

KEYSHIFT = Path(sys.executable).with_name("keyshift")

# A third party's policy: the heaviest group to the least loaded live engine.
MYPOL = '''
import numpy as np

from keyshift.policies import Policy, PolicyKind


class MyPolicy(Policy):
    """Moves the heaviest group to the least loaded live engine, once per window."""

    name = "mine"
    kind = PolicyKind.ONLINE

    def __init__(self, theta: float = 15.0) -> None:
        self.theta = theta

    def _decide(self, plan, window):
        engines = np.bincount(plan.assignment, weights=window.loads, minlength=plan.slots)
        live = plan.live_engines
        group = int(np.argmax(window.loads))
        to = int(live[np.argmin(engines[live])])
        if window.loads[group] <= 0 or plan.assignment[group] == to:
            return plan, {"reason": "the heaviest group is on the lightest engine"}, None
        assignment = plan.assignment.copy()
        assignment[group] = to
        return plan.with_assignment(assignment), {"moved": group}, None
'''


@pytest.fixture(autouse=True)
def _fresh_registry():
    registry.clear_cache()
    yield
    registry.clear_cache()


def _plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str = MYPOL,
            module: str = "mypol_unit", **eps: str) -> None:
    """Entry points through the registry's seam, to a module in tmp_path."""
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = {name: EntryPoint(name, value, registry.ENTRY_POINT_GROUP)
             for name, value in eps.items()}
    monkeypatch.setattr(registry, "_entry_points", lambda: found)


# --- the classes declare, the registry lists --------------------------------------------
def test_every_shipped_class_declares_its_name_and_kind() -> None:
    seen = {}
    for target in SHIPPED:
        module, _, qualname = target.partition(":")
        cls = getattr(__import__(module, fromlist=[qualname]), qualname)
        assert isinstance(cls.name, str) and cls.name, target
        assert isinstance(cls.kind, PolicyKind), target
        seen[cls.name] = cls.kind
    assert seen == {
        "dlb-h": "online", "dlb-l": "online", "dlb-s": "online", "elb": "online",
        "kg": "fixed", "lptf": "from-plans", "clb": "from-plans", "uhlb": "from-plans",
        "dc": "splitter", "wc": "splitter", "pkg": "reference", "optimal": "reference",
    }


def test_the_lists_are_derived_from_the_kinds() -> None:
    assert policy_names([PolicyKind.ONLINE]) == ["dlb-h", "dlb-l", "dlb-s", "elb"]
    assert policy_names(JOB_KINDS) == ["clb", "dc", "dlb-h", "dlb-l", "dlb-s", "elb", "kg",
                                       "lptf", "uhlb", "wc"]
    assert "optimal" in policy_names() and "pkg" in policy_names()
    assert set(policy_names(WHOLE_GROUP_KINDS)) == set(policy_names(JOB_KINDS)) - {"dc", "wc"}


def test_parameters_are_the_constructor_signature() -> None:
    assert policy_info("dlb-h").parameters() == ["theta", "max_moves"]
    assert policy_info("kg").parameters() == []


def test_an_unknown_name_is_one_line_listing_the_choices(tmp_path, monkeypatch) -> None:
    _plugin(tmp_path, monkeypatch, mine="mypol_unit:MyPolicy")
    with pytest.raises(PolicyInputError) as exc:
        make_policy("nope")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("policy: unknown policy 'nope'; choose one of ")
    assert "dlb-h" in msg and "mine" in msg and "keyshift.policies" in msg


def test_a_reference_policy_is_refused_by_the_job_naming_its_kind() -> None:
    with pytest.raises(PolicyInputError, match="optimal is a reference policy, not one for "
                                               "keyshift run"):
        policy_info("optimal", JOB_KINDS, "keyshift run")


@pytest.mark.parametrize("module, source, value, needle", [
    ("mypol_bad0", "", "no_such_module_xyz:P", "does not load: ModuleNotFoundError"),
    ("mypol_bad1", "raise RuntimeError('boom')\n", "mypol_bad1:P",
     "does not load: RuntimeError: boom"),
    ("mypol_bad2", "class P:\n    pass\n", "mypol_bad2:P",
     "is class mypol_bad2.P, not a subclass of keyshift.policies.Policy"),
    ("mypol_bad3", "P = 3\n", "mypol_bad3:P", "is a int object, not a subclass"),
    ("mypol_bad4", "from keyshift.policies import Policy\nclass P(Policy):\n"
     "    def _decide(self, plan, window):\n        return plan, {}, None\n",
     "mypol_bad4:P", "P declares no kind; set the class attribute kind to one of online"),
])
def test_a_bad_entry_point_is_refused_in_one_line_naming_it(tmp_path, monkeypatch, module,
                                                            source, value, needle) -> None:
    _plugin(tmp_path, monkeypatch, source=source, module=module, bad=value)
    with pytest.raises(PolicyInputError) as exc:
        make_policy("bad")
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"policy: entry point bad = {value!r} of group keyshift.policies")
    assert needle in msg
    assert "bad" not in policy_names()  # left out of the listings, refused when chosen


def test_a_shipped_name_wins_over_an_entry_point(tmp_path, monkeypatch) -> None:
    _plugin(tmp_path, monkeypatch, **{"dlb-h": "mypol_unit:MyPolicy"})
    assert policy_info("dlb-h").origin == "shipped"


def test_an_entry_point_policy_reaches_every_consumer(tmp_path, monkeypatch) -> None:
    from engines_support import MemoryControlLog

    from keyshift.streaming.commands.demo import demo_policies
    from keyshift.streaming.commands.run import job_policies
    from keyshift.streaming.controller import Controller

    _plugin(tmp_path, monkeypatch, mine="mypol_unit:MyPolicy")
    info = policy_info("mine")
    assert (info.kind, info.origin, info.parameters()) == ("online", "entry point", ["theta"])
    assert "mine" in job_policies() and "mine" in demo_policies()
    cfg = load_config(env={"KEYSHIFT_CONTROLLER__POLICY": "mine"})
    assert cfg.controller.policy == "mine"
    # the job's controller decides with it every window: an online policy, not a fixed plan
    c = Controller(cfg, "r", "mine", groups=4, initial_engines=2, windows=1,
                   log=MemoryControlLog())
    c.recover(0)
    on = c.plan_for(0).assignment
    loads = np.where(on == on[0], 3.0, 0.0)  # engine of group 0: 3 + 3 (+ ...), the other: 1
    loads[np.flatnonzero(on != on[0])[0]] = 1.0
    loads[np.flatnonzero(on == on[0])[1:]] = 2.0
    c.collect(0, loads, np.zeros(4))
    d = c.end_of_batch(0)
    assert type(c.loop.policy).__name__ == "MyPolicy"
    assert d.action == "rebalance" and d.plan.assignment[0] != on[0], d.reason


def test_config_refuses_an_unknown_policy_listing_the_choices() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(env={"KEYSHIFT_CONTROLLER__POLICY": "pkg"})
    assert "controller.policy" in str(exc.value) and "pkg is a reference policy" in str(exc.value)


def test_a_decision_of_the_example_policy() -> None:
    namespace: dict = {}
    exec(MYPOL, namespace)
    cls = namespace["MyPolicy"]
    assert issubclass(cls, Policy)
    d = cls().decide(Plan(np.array([0, 0, 1, 1]), 2), Window(np.array([5.0, 3, 1, 1])))
    assert d.plan.assignment.tolist() == [1, 0, 1, 1]


# --- a real package, installed ----------------------------------------------------------
def _niced(cmd: list[str]) -> list[str]:
    return ["nice", "-n", "19", *cmd] if shutil.which("nice") else cmd


def test_an_installed_package_policy_is_accepted_everywhere(tmp_path: Path) -> None:
    """Build a package declaring ``mine`` in ``keyshift.policies``, pip-install it into this
    venv, use it from rebalance, config, simulate and run's checks, uninstall it."""
    pkg = tmp_path / "mypol-pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(textwrap.dedent('''\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "keyshift-test-mypol"
        version = "0.1.0"

        [project.entry-points."keyshift.policies"]
        mine = "mypol:MyPolicy"

        [tool.setuptools]
        py-modules = ["mypol"]
        '''))
    (pkg / "mypol.py").write_text(MYPOL)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "KEYSHIFT_HOME": str(tmp_path / "home")}
    env.pop("KEYSHIFT_CONFIG", None)

    def run(cmd: list[str], stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(_niced(cmd), input=stdin, capture_output=True, text=True,
                              cwd=work, env={**env, **extra}, timeout=300)

    pip = [sys.executable, "-m", "pip"]
    installed = run([*pip, "install", "--quiet", "--no-deps", "--no-build-isolation",
                     "--no-index", str(pkg)])
    assert installed.returncode == 0, installed.stderr
    try:
        out = run([str(KEYSHIFT), "rebalance", "--policy", "mine"],
                  '{"engines": 2, "plan": [0, 0, 1, 1], "loads": [5, 3, 1, 1]}')
        assert out.returncode == 0, out.stderr
        decision = json.loads(out.stdout)
        assert decision["plan"] == [1, 0, 1, 1] and decision["moved_groups"] == 1

        help_ = run([str(KEYSHIFT), "rebalance", "-h"])
        assert "mine" in help_.stdout

        out = run([str(KEYSHIFT), "config"], KEYSHIFT_CONTROLLER__POLICY="mine")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["controller"]["policy"] == "mine"

        out = run([str(KEYSHIFT), "simulate", "--policy", "mine", "--engines", "4", "--groups",
                   "64", "--rate", "500", "--duration", "10", "--window", "2",
                   "--report-dir", str(tmp_path / "reports"), "--json"])
        assert out.returncode == 0, out.stderr
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["policy"] == "mine" and summary["processed"] > 0

        check_run = textwrap.dedent('''\
            import argparse, sys
            from keyshift.config import load_config
            from keyshift.streaming.commands.run import add_arguments, options_from
            p = argparse.ArgumentParser()
            add_arguments(p)
            opts = options_from(p.parse_args(["--app", "wordcount", "--policy", "mine"]),
                                load_config())
            print(opts.policy)
            ''')
        out = run([sys.executable, "-c", check_run])
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "mine"

        out = run([str(KEYSHIFT), "rebalance", "--policy", "nope"],
                  '{"engines": 2, "loads": [1]}')
        assert out.returncode == 2 and "unknown policy 'nope'" in out.stderr
        assert "mine" in out.stderr  # the choices list the installed policy
    finally:
        gone = run([*pip, "uninstall", "--quiet", "-y", "keyshift-test-mypol"])
        assert gone.returncode == 0, gone.stderr
    out = run([str(KEYSHIFT), "rebalance", "--policy", "mine"], '{"engines": 2, "loads": [1]}')
    assert out.returncode == 2 and "unknown policy 'mine'" in out.stderr
