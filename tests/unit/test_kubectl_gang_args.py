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
