"""Where keyshift keeps its runtime files (issue 28 item 3): ``home`` is resolved once, in
``keyshift.config.resolve_home``, and is absolute after load, whatever the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from keyshift.config import PROJECT_FILE, load_config, project_root, resolve_home

ROOT = Path(__file__).resolve().parents[2]


def test_this_checkout_is_a_project_whose_home_is_its_dot_keyshift(monkeypatch) -> None:
    """``make demo`` and the tests keep using ``<repo>/.keyshift``, from any folder below."""
    assert (ROOT / PROJECT_FILE).is_file()
    for where in (ROOT, ROOT / "docs", ROOT / "streaming" / "commands"):
        monkeypatch.chdir(where)
        assert project_root() == ROOT
        assert load_config(env={}).home == str(ROOT / ".keyshift")


def test_from_another_folder_the_project_marker_finds_the_same_home(tmp_path, monkeypatch) -> None:
    project = tmp_path / "proj"
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    (project / PROJECT_FILE).write_text("# a keyshift project\n")
    homes = set()
    for where in (project, deep, project / "a"):
        monkeypatch.chdir(where)
        cfg = load_config(env={})
        homes.add(cfg.home)
        assert cfg.home_path == (project / ".keyshift").resolve()
        assert cfg.run_dir("r") == (project / ".keyshift" / "runs" / "r").resolve()
        assert cfg.warehouse_path == (project / ".keyshift" / "warehouse").resolve()
    assert len(homes) == 1


def test_the_project_file_is_the_config_and_its_relative_home_is_its_folders(
        tmp_path, monkeypatch) -> None:
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    (project / PROJECT_FILE).write_text('home = "state"\n[kafka]\nport = 19092\n')
    monkeypatch.chdir(project / "sub")
    cfg = load_config(env={})
    assert cfg.kafka.port == 19092
    assert cfg.home == str(project / "state")  # the file's folder, not the current one


def test_a_relative_home_in_a_config_file_is_relative_to_that_file(tmp_path, monkeypatch) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    conf = conf_dir / "ks.toml"
    conf.write_text('home = "../var/ks"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_config(conf, env={}).home == str(tmp_path / "var" / "ks")
    # a file without home: the home is found (here: the data directory, no project above)
    bare = conf_dir / "bare.toml"
    bare.write_text("[kafka]\nport = 19093\n")
    assert load_config(bare, env={"XDG_DATA_HOME": str(tmp_path / "data")}).home == str(
        tmp_path / "data" / "keyshift")


def test_keyshift_home_wins_over_project_and_file(tmp_path, monkeypatch) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / PROJECT_FILE).write_text('home = "from-file"\n')
    monkeypatch.chdir(project)
    assert load_config(env={"KEYSHIFT_HOME": str(tmp_path / "env-home")}).home == str(
        tmp_path / "env-home")
    # a relative KEYSHIFT_HOME is the current directory's, as any path on a command line
    assert load_config(env={"KEYSHIFT_HOME": "rel"}).home == str(project / "rel")
    assert load_config(env={"KEYSHIFT_HOME": "~/ks"}).home == str(Path("~/ks").expanduser())
    # an argument (the tests' home=...) wins over the environment
    assert load_config(env={"KEYSHIFT_HOME": "x"}, home=str(tmp_path / "arg")).home == str(
        tmp_path / "arg")


def test_outside_any_project_the_home_is_the_users_data_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert project_root() is None
    cfg = load_config(env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert cfg.home == str(tmp_path / "xdg" / "keyshift")
    for env in ({"HOME": str(tmp_path / "user")},
                {"HOME": str(tmp_path / "user"), "XDG_DATA_HOME": "relative/ignored"}):
        home = load_config(env=env).home
        assert Path(home).is_absolute()
        assert home == str(tmp_path / "user" / ".local" / "share" / "keyshift")
    assert Path(load_config(env={}).home).is_absolute()


@pytest.mark.parametrize("home", ["", "ks", "/abs/ks", "~/ks", "a/../b"])
def test_the_resolved_home_is_always_absolute(home, tmp_path) -> None:
    got = resolve_home(home, base=None, cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert got.is_absolute() and ".." not in got.parts


def test_a_config_built_without_the_loader_resolves_its_home_too(tmp_path, monkeypatch) -> None:
    from keyshift.config import Config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Config().home == str(tmp_path / "xdg" / "keyshift")
    assert Config(home="rel").home == str(tmp_path / "rel")
