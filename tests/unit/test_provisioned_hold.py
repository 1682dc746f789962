"""The room a Provisioned scale-up added, held for its gang in the real cache: planned on
the new nodes first, lent to the gang's own admission, planned again when new nodes change
while it is incomplete, released once and never made again for the same request."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.cache import Cache
from coscheduling.provisioning.hold import ProvisionedHolds, plan_room

GPU = "nvidia.com/gpu"
GROUP = parse_podgroup({"metadata": {"name": "train", "namespace": "ns", "uid": "u1"},
                        "spec": {"minMember": 2}})


def _pod(name: str, gpus: int) -> Pod:
    resources = {"requests": {"cpu": "1", GPU: str(gpus)}}
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": name},
                      "spec": {"containers": [{"name": "main", "resources": resources}]}})


def _cache(**gpus: int) -> Cache:
    cache = Cache()
    for name, count in gpus.items():
        _join(cache, name, count)
    return cache


def _join(cache: Cache, name: str, gpus: int, taint: bool = False) -> None:
    spec = {"taints": [{"key": "booting", "effect": "NoSchedule"}]} if taint else {}
    cache.set_node(parse_node({"metadata": {"name": name}, "spec": spec, "status": {
        "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: str(gpus)}}}))


def _free_gpus(cache: Cache, name: str) -> int:
    info = cache.node(name)
    assert info is not None and info.node is not None
    return info.node.allocatable.get(GPU, 0) - info.used(GPU)


def _first_free(cache: Cache, claimed: dict[str, int]) -> Callable[[Pod, Sequence[str]], str]:
    """A placer by free GPUs (untainted nodes), counting what it placed before."""
    def place(member: Pod, nodes: Sequence[str]) -> str:
        for name in nodes:
            info = cache.node(name)
            assert info is not None and info.node is not None
            free = _free_gpus(cache, name) - claimed.get(name, 0)
            if not info.node.taints and free >= member.requests.get(GPU, 0):
                claimed[name] = claimed.get(name, 0) + member.requests.get(GPU, 0)
                return name
        return ""
    return place


@pytest.mark.parametrize(("gpus", "nodes", "room", "placed"), [
    ((4, 4), {"new": 8}, {"new": 8}, 2),  # both on the new node
    ((4, 4), {"new": 4, "old": 4}, {"new": 4, "old": 4}, 2),  # new first, then the rest
    ((8, 4), {"new": 8}, {"new": 8}, 1),  # the second fits nowhere: incomplete
    ((4, 4), {}, {}, 0),  # its node has not joined yet
])
def test_plan_room_places_members_in_node_order(gpus: tuple[int, int], nodes: dict[str, int],
                                                room: dict[str, int], placed: int) -> None:
    cache = _cache(**nodes)
    members = [_pod(f"m{i}", n) for i, n in enumerate(gpus)]
    found, count = plan_room(members, list(nodes), _first_free(cache, {}))
    assert {node: held[GPU] for node, held in found.items()} == room
    assert count == placed


def _plan(cache: Cache, holds: ProvisionedHolds, members: list[Pod], now: float = 0.0
          ) -> list[str]:
    """What the plugin does for each due gang; returns the node order it was given."""
    due = holds.due(lambda key, request: request == "train-gang-1")
    if not due:
        return []
    _, nodes = due[0]
    holds.lend(GROUP.key)
    room, placed = plan_room(members, nodes, _first_free(cache, {}))
    holds.hold(GROUP.key, room, placed == len(members), 0, now)
    return nodes


def test_hold_claims_the_new_room_lends_it_to_the_gang_and_ends_once() -> None:
    cache = _cache(old=8)
    holds = ProvisionedHolds(cache, 60.0)
    holds.asked(GROUP, "train-gang-1", cache.node_names())
    assert holds.due(lambda key, request: False) == []  # not Provisioned yet
    _join(cache, "new", 8)
    members = [_pod("m0", 4), _pod("m1", 4)]
    assert _plan(cache, holds, members, now=100.0) == ["new", "old"]
    hold = holds.of(GROUP.key)
    assert hold is not None and hold.complete and hold.until == 160.0
    assert (_free_gpus(cache, "new"), _free_gpus(cache, "old")) == (0, 8)
    assert _plan(cache, holds, members) == []  # complete: nothing to plan again
    holds.lend(GROUP.key)  # the gang's own admission
    assert _free_gpus(cache, "new") == 8
    holds.restore(GROUP.key)  # it did not fit after all
    assert _free_gpus(cache, "new") == 0
    assert [k for k, _ in holds.expired(159.0)] == []
    assert [k for k, _ in holds.expired(160.0)] == [GROUP.key]
    assert _free_gpus(cache, "new") == 8
    assert holds.release(GROUP.key) is None  # once
    assert _plan(cache, holds, members) == []  # never again for this request


def test_incomplete_hold_is_planned_again_when_a_new_node_becomes_usable() -> None:
    cache = _cache(old=0)
    holds = ProvisionedHolds(cache, 60.0)
    holds.asked(GROUP, "train-gang-1", cache.node_names())
    members = [_pod("m0", 8)]
    assert _plan(cache, holds, members) == ["old"]  # Provisioned before its node joined
    _join(cache, "old", 0, taint=True)  # an old node changing is no reason
    assert _plan(cache, holds, members) == []
    _join(cache, "new", 8, taint=True)  # joined, not ready yet
    assert _plan(cache, holds, members) == ["new", "old"]
    hold = holds.of(GROUP.key)
    assert hold is not None and not hold.complete and hold.room == {}
    _join(cache, "new", 8)  # ready: planned again, now complete
    assert _plan(cache, holds, members) == ["new", "old"]
    assert hold.complete and _free_gpus(cache, "new") == 0
    cache.remove_node("new")  # its node gone: planned again (nothing left to hold)
    assert _plan(cache, holds, members) == ["old"]
    assert not hold.complete


def test_asking_again_releases_the_last_requests_hold() -> None:
    cache = _cache()
    holds = ProvisionedHolds(cache, 60.0)
    holds.asked(GROUP, "train-gang-1", [])
    _join(cache, "new", 8)
    _plan(cache, holds, [_pod("m0", 8)])
    assert _free_gpus(cache, "new") == 0
    holds.asked(GROUP, "train-gang-2", cache.node_names())
    assert _free_gpus(cache, "new") == 8
    holds.forget(GROUP.key)
    assert holds.of(GROUP.key) is None
