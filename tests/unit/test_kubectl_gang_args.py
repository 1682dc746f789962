"""kubectl gang's command line: kubectl's cluster flags before or after the command mean the
same, a flag after the command wins over one before, and every flag has help."""

from __future__ import annotations

import argparse

import pytest

from coscheduling import kubectl_gang


@pytest.mark.parametrize(("argv", "expected"), [
    (["list"], {"namespace": None, "context": None, "kubeconfig": None,
                "all_namespaces": False}),
    (["-n", "a", "--context", "c", "--kubeconfig", "k", "-A", "list"],
     {"namespace": "a", "context": "c", "kubeconfig": "k", "all_namespaces": True}),
    (["list", "-n", "a", "--context", "c", "--kubeconfig", "k", "-A"],
     {"namespace": "a", "context": "c", "kubeconfig": "k", "all_namespaces": True}),
    (["-n", "before", "list", "-n", "after"], {"namespace": "after"}),
    (["--context", "c", "list", "-n", "a"], {"namespace": "a", "context": "c"}),
    (["explain", "g", "-n", "a", "--context", "c"], {"namespace": "a", "context": "c"}),
    (["whatif", "-f", "j.yaml", "--namespace", "a"], {"namespace": "a"}),
])
def test_cluster_flags_parse_the_same_before_or_after_the_command(
        argv: list[str], expected: dict[str, object]) -> None:
    args = vars(kubectl_gang.build_parser().parse_args(argv))
    assert {key: args[key] for key in expected} == expected


def test_all_namespaces_is_refused_outside_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_gang.main(["-A", "explain", "ns/g"]) == 2
    assert "explain: -A applies to list only" in capsys.readouterr().err


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += action.choices.values()
    return found


def test_every_flag_has_help() -> None:
    silent = [(p.prog, a.option_strings or a.dest)
              for p in _parsers(kubectl_gang.build_parser()) for a in p._actions
              if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not silent, silent


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (59.9, "59s"), (119, "119s"), (120, "2m"), (260, "4m20s"), (599, "9m59s"),
    (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (5 * 3600 + 180, "5h3m"),
    (8 * 3600, "8h"), (47 * 3600, "47h"), (2 * 86400 + 4 * 3600, "2d4h"), (8 * 86400, "8d"),
    (729 * 86400, "729d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
])
def test_age_as_kubectl_shows_it(seconds: float, shown: str) -> None:
    assert kubectl_gang.age(seconds) == shown
