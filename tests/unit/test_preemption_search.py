"""The victim search (coscheduling.preemption.search.choose): runs of units are spared
whole when they can be, and the result is exactly the one-by-one reprieve order's."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.cache import Cache
from coscheduling.preemption.search import choose
from coscheduling.preemption.units import Unit


def cluster(units: int, cpu_each: int) -> tuple[Cache, list[Unit]]:
    """One node full of ``units`` single-pod units of ``cpu_each`` cpu, priorities 0..n-1."""
    cache = Cache()
    cache.set_node(parse_node({"metadata": {"name": "n"},
                               "status": {"allocatable": {"cpu": str(units * cpu_each)}}}))
    made: list[Unit] = []
    for i in range(units):
        pod = parse_pod({"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
                         "spec": {"nodeName": "n", "priority": i, "containers": [
                             {"name": "c", "resources": {"requests": {"cpu": str(cpu_each)}}}]}})
        cache.set_pod(pod)
        made.append(Unit(core=[pod], priority=i))
    return cache, made


def free_at_least(cache: Cache, cpu: int, calls: list[int]) -> Callable[[], bool]:
    def fits() -> bool:
        calls.append(1)
        info = cache.node("n")
        assert info is not None and info.node is not None
        return info.node.allocatable["cpu"] - info.used("cpu") >= cpu * 1000
    return fits


def one_by_one(units: Sequence[Unit], cpu_each: int, needed: int) -> set[str]:
    """The reference: reprieve in order (higher priority first) while the room stays."""
    evicted = {u.core[0].key for u in units}
    room = len(units) * cpu_each
    for unit in sorted(units, key=lambda u: -u.priority):
        if room - cpu_each >= needed:
            evicted.discard(unit.core[0].key)
            room -= cpu_each
    return evicted


def no_violations(pods: Sequence[Pod]) -> set[str]:
    return set()


@pytest.mark.parametrize(("units", "needed"), [(1, 1), (16, 1), (16, 3), (16, 16), (64, 5),
                                               (7, 4), (33, 32)])
def test_spared_whole_where_possible_and_the_same_victims_as_one_by_one(
        units: int, needed: int) -> None:
    cache, made = cluster(units, 1)
    calls: list[int] = []
    found = choose(cache, made, free_at_least(cache, needed, calls), no_violations)
    assert found is not None
    assert {p.key for p in found.pods} == one_by_one(made, 1, needed)
    # O(victims x log units) placements, not one per unit.
    assert len(calls) <= 2 + 2 * needed * units.bit_length(), len(calls)
    if (units, needed) == (64, 5):
        assert len(calls) < units // 2, len(calls)


def test_no_victims_when_even_all_do_not_make_room() -> None:
    cache, made = cluster(4, 1)
    assert choose(cache, made, free_at_least(cache, 5, []), no_violations) is None


@pytest.mark.parametrize("units", [2, 50, 500])
def test_one_unit_needed_among_many_costs_a_few_placements(units: int) -> None:
    """The storm's case: the lowest unit alone is enough. The last one gone alone, then the
    last one spared too (which fails): two placements, whatever the count."""
    cache, made = cluster(units, 1)
    calls: list[int] = []
    found = choose(cache, made, free_at_least(cache, 1, calls), no_violations)
    assert found is not None
    assert {p.key for p in found.pods} == {"ns/p0"} == one_by_one(made, 1, 1)
    assert len(calls) == 2, len(calls)
