"""A run id is one safe folder name, checked in one place (keyshift/run_ids.py) for every
command that takes one from a user (issue 46 item 7: ``run --run-id ..`` was accepted and
wrote into the warehouse root; ``report ../x`` wrote its HTML outside the home)."""

from __future__ import annotations

import pytest

from keyshift.cli import build_parser
from keyshift.run_ids import check_run_id

BAD = ["..", ".", "a/b", "", "../x", "a\\b", "a\n", " a", "-", ".hidden", "x" * 129, "é"]
GOOD = ["run-20261205-120000-ab12", "demo-20261205-1", "default", "A.b_c-1", "7", "x" * 128]

# every way a run id arrives on a command line: (argv before the id, the option argparse names)
TAKES_A_RUN_ID = [
    (["run", "--run-id"], "--run-id"),
    (["stream", "--run-id"], "--run-id"),
    (["status", "--run-id"], "--run-id"),
    (["report"], "RUN_ID"),
    (["dead-letters"], "RUN_ID"),
    (["state", "upgrade"], "RUN_ID"),
    (["simulate", "--calibrate"], "--calibrate"),
]


def _parse(argv: list[str]):
    return build_parser(argv[0]).parse_args(argv)


@pytest.mark.parametrize("value", BAD)
def test_a_run_id_that_is_not_one_folder_name_is_refused(value) -> None:
    with pytest.raises(ValueError, match="a run id is 1-128 letters"):
        check_run_id(value)


@pytest.mark.parametrize("value", GOOD)
def test_run_ids_as_keyshift_makes_them_are_accepted(value) -> None:
    assert check_run_id(value) == value


@pytest.mark.parametrize(("before", "option"), TAKES_A_RUN_ID)
@pytest.mark.parametrize("value", ["..", ".", "a/b", ""])
def test_every_command_refuses_a_bad_run_id_in_one_line(capsys, before, option,
                                                        value) -> None:
    with pytest.raises(SystemExit) as stop:
        _parse([*before, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.count("\n") == 1, err
    assert f"error: argument {option}: a run id is 1-128 letters" in err, err
    assert repr(value) in err


@pytest.mark.parametrize(("before", "option"), TAKES_A_RUN_ID)
def test_every_command_takes_a_good_run_id(before, option) -> None:
    for value in GOOD:
        args = _parse([*before, value])
        got = args.calibrate if before[0] == "simulate" else args.run_id
        assert got == value
