"""Eviction units (coscheduling.preemption.units): a gang is offered whole or by its
surplus, and not at all while any of its members is still in flight."""

from __future__ import annotations

import pytest

from coscheduling.api.podgroups import PodGroup, parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.preemption.units import eviction_units
from tests.simulation import GROUP_LABEL


def _pod(name: str, node: str = "", group: str = "") -> Pod:
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "labels": {GROUP_LABEL: group} if group else {}},
        "spec": {"nodeName": node, "priority": 0, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}})


def _group(name: str, min_member: int) -> PodGroup:
    return parse_podgroup({"metadata": {"name": name, "namespace": "ns", "uid": f"g-{name}"},
                           "spec": {"minMember": min_member}})


# (gang's minMember, its members' states: "bound", "assumed" or "pending") -> the units
# offered (each as its core and surplus sizes).
CASES = [
    (4, ["bound"] * 4, [(4, 0)]),
    (2, ["bound"] * 4, [(2, 2)]),
    # Released together, one bind seen so far: evicting that one would break the gang.
    (4, ["bound", "assumed", "assumed", "assumed"], []),
    (2, ["bound", "bound", "assumed"], []),
    # A member not placed yet (no room, or created late) holds nothing in flight.
    (2, ["bound", "bound", "pending"], [(2, 0)]),
]


@pytest.mark.parametrize(("min_member", "states", "units"), CASES)
def test_gang_units(min_member: int, states: list[str], units: list[tuple[int, int]]) -> None:
    group = _group("g", min_member)
    members = [_pod(f"g-{i}", "n0" if state == "bound" else "", group="g")
               for i, state in enumerate(states)]
    assumed = {p.key for p, state in zip(members, states, strict=True) if state == "assumed"}
    plain = _pod("plain", "n1")
    offered = eviction_units([*members, plain], 10, "", {group.key: group}.get,
                             lambda g, m: 0, lambda p: p.key in assumed)
    assert [(len(u.core), len(u.surplus)) for u in offered if u.group_key] == units
    assert [u.core for u in offered if not u.group_key] == [[plain]]  # plain pods stay


def test_a_pod_that_cannot_be_read_is_never_a_victim_nor_is_its_gang() -> None:
    """Its priority and the room it frees are unknown: evicting it could be for nothing."""
    group = _group("g", 2)
    members = [_pod(f"g-{i}", "n0", group="g") for i in range(3)]
    members[2].parse_error = "spec.containers[0].resources.limits.memory: not a quantity"
    plain = _pod("plain", "n1")
    unreadable = _pod("lost", "n1")
    unreadable.parse_error = "spec.priority: must be an integer"
    offered = eviction_units([*members, plain, unreadable], 10, "", {group.key: group}.get,
                             lambda g, m: 0, lambda p: False)
    assert [u.core for u in offered] == [[plain]]
