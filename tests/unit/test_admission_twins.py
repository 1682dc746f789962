"""Every refusal the scheduler makes when it reads a PodGroup or Queue has an admission twin.

Each run-time check in coscheduling/api/podgroups.py and queues.py (a statement that
appends to ``errors`` or raises ValueError) must be reached by some object of
tests/admission_cases.py's bad tables, which the real API server refuses naming the field
(tests/integration/test_crd.py), unless NOT_AT_ADMISSION lists it with the reason. The good
tables must pass the scheduler's checks too: admission is no stricter than the scheduler
where both look.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from coscheduling.api import podgroups, queues
from tests.admission_cases import (
    BAD_PODGROUPS,
    BAD_QUEUES,
    GOOD_PODGROUPS,
    GOOD_QUEUES,
    NOT_AT_ADMISSION,
    podgroup,
    queue,
)

CHECKED = (Path(podgroups.__file__), Path(queues.__file__))
Site = tuple[str, int]  # (file name, line)


def _is_check(node: ast.AST) -> bool:
    """``errors.append(...)`` or ``raise ValueError(...)``."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        return (isinstance(func, ast.Attribute) and func.attr == "append"
                and isinstance(func.value, ast.Name) and func.value.id == "errors")
    return (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "ValueError")


def run_time_checks() -> dict[Site, tuple[str, str]]:
    """Every check's place, with its function and the first words of its message."""
    found = {}
    for path in CHECKED:
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if _is_check(node):
                    text = ast.get_source_segment(path.read_text(), node) or ""
                    words = re.search(r'f?"([^"]*)"', text)
                    found[(path.name, node.lineno)] = (function.name,
                                                       words.group(1) if words else text)
    return found


def reached(calls: Iterable[Callable[[], object]]) -> set[Site]:
    """The lines of CHECKED that ``calls`` run."""
    names = {str(p) for p in CHECKED}
    seen: set[Site] = set()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            seen.add((Path(frame.f_code.co_filename).name, frame.f_lineno))
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in names else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        for call in calls:
            call()
    finally:
        sys.settrace(previous)
    return seen


def test_every_run_time_check_is_reached_by_an_object_admission_refuses() -> None:
    checks = run_time_checks()
    assert len(checks) > 30, checks  # the scan found the checks
    seen = reached([*(lambda s=s: podgroups.parse_podgroup(podgroup(s))
                      for s, _ in BAD_PODGROUPS),
                    *(lambda s=s: queues.parse_queue(queue(s)) for s, _ in BAD_QUEUES)])
    missing = {site: what for site, what in checks.items()
               if site not in seen and what not in NOT_AT_ADMISSION}
    assert not missing, ("run-time checks with no refusal at admission (add a bad object "
                         f"to tests/admission_cases.py and a rule to the CRD): {missing}")
    stale = set(NOT_AT_ADMISSION) - set(checks.values())
    assert not stale, f"NOT_AT_ADMISSION names checks that are gone: {stale}"


def names_the_field(errors: Iterable[str], field: str) -> bool:
    """Whether one of the scheduler's errors names ``field``, the list or map holding it
    (the scheduler says ``spec.minResources: cpu: ...`` where the API server says
    ``spec.minResources[cpu]``) or a field of it (``spec.subGroups[1].name`` for a
    duplicate ``spec.subGroups[1]``); never just ``spec`` for a field inside it."""
    def inside(inner: str, outer: str) -> bool:
        return outer != "spec" and inner.startswith((f"{outer}.", f"{outer}["))

    named = [error.split(": ", 1)[0] for error in errors]
    return any(n == field or inside(field, n) or inside(n, field) for n in named)


@pytest.mark.parametrize(("spec", "field"), BAD_PODGROUPS)
def test_a_refused_podgroup_the_scheduler_reads_is_refused_naming_the_same_field(
        spec: Any, field: str) -> None:
    errors = podgroups.parse_podgroup(podgroup(spec)).errors
    if errors:  # unknown fields are the schema's alone: the scheduler ignores them
        assert names_the_field(errors, field), errors


@pytest.mark.parametrize(("spec", "field"), BAD_QUEUES)
def test_a_refused_queue_the_scheduler_reads_is_refused_naming_the_same_field(
        spec: Any, field: str) -> None:
    assert names_the_field(queues.parse_queue(queue(spec)).errors, field)


@pytest.mark.parametrize("spec", GOOD_PODGROUPS)
def test_an_admitted_podgroup_is_one_the_scheduler_can_use(spec: Any) -> None:
    assert podgroups.parse_podgroup(podgroup(spec)).errors == ()


@pytest.mark.parametrize("spec", GOOD_QUEUES)
def test_an_admitted_queue_is_one_the_scheduler_can_use(spec: Any) -> None:
    assert queues.parse_queue(queue(spec)).errors == ()
