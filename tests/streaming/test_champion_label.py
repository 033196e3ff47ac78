"""Issue 44: a decision planned on a champion that is seasonal naive (or the profile alone)
says so; a champion that is a GP reads as before."""

from __future__ import annotations

from types import SimpleNamespace

from keyshift.streaming.scaling import ChampionForecast


def _version(name: str, version: str, **gp) -> SimpleNamespace:
    return SimpleNamespace(name=name, version=version, gp=SimpleNamespace(**gp))


def test_a_champion_without_a_gp_is_named_in_the_decisions_label():
    naive = ChampionForecast(
        _version("keyshift-input-rate", "3", signal_=False,
                 choice_="the weekly seasonal naive alone"),
        _version("keyshift-latency", "2", signal_=True, choice_="GP (ard+load, constant mean)"))
    assert naive.label == ("champion GPs keyshift-input-rate v3 (the weekly seasonal naive "
                           "alone), keyshift-latency v2")


def test_a_gp_champion_or_an_older_version_reads_as_before():
    gp = ChampionForecast(_version("keyshift-input-rate", "3", signal_=True, choice_="GP on x"),
                          _version("keyshift-latency", "2"))
    assert gp.label == "champion GPs keyshift-input-rate v3, keyshift-latency v2"
    old = ChampionForecast(SimpleNamespace(name="keyshift-input-rate", version="1"),
                           SimpleNamespace(name="keyshift-latency", version="1"))
    assert old.label == "champion GPs keyshift-input-rate v1, keyshift-latency v1"
