"""The gang's member search (core/gangcycle.py; when to search:
plugins/coscheduling/search.py), table-driven on a real cache: each member may use some
nodes, in its order of preference, and a node holds one member."""

from __future__ import annotations

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.cache import Cache
from coscheduling.core.gangcycle import MemberSearch
from coscheduling.plugins.coscheduling.search import needs_search


def _pod(name: str, template: str = "gpu", cpu: str = "1") -> Pod:
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": name},
                      "spec": {"containers": [{"name": "c", "resources": {
                          "requests": {"cpu": cpu}}}],
                               "resourceClaims": [{"name": "gpu",
                                                   "resourceClaimTemplateName": template}]}})


def _search(cache: Cache, wants: dict[str, list[str]], budget: int) -> MemberSearch:
    """Member -> the nodes it may use, best first; a node that holds a claim is full."""
    def select_node(pod: Pod, avoid: frozenset[str]) -> tuple[str | None, str]:
        for node in wants[pod.name]:
            info = cache.node(node)
            if node not in avoid and info is not None and not info.claims:
                return node, ""
        return None, f"{pod.name}: no node"

    return MemberSearch(cache, select_node, budget)


@pytest.mark.parametrize(("wants", "budget", "placed", "expected"), [
    # member a prefers n1, the only node b can use: placed one after the other, b fails.
    ({"a": ["n1", "n2"], "b": ["n1"]}, 0, 1, {}),
    ({"a": ["n1", "n2"], "b": ["n1"]}, 4, 2, {"a": "n2", "b": "n1"}),
    # two steps back: a and b both move before c fits.
    ({"a": ["n1", "n2", "n3"], "b": ["n2", "n3"], "c": ["n1"]}, 8, 3,
     {"a": "n2", "b": "n3", "c": "n1"}),
    # no placement exists: the whole search fails and leaves no claim.
    ({"a": ["n1"], "b": ["n1"]}, 8, 1, {}),
])
def test_search_finds_a_placement_when_one_exists(wants: dict[str, list[str]], budget: int,
                                                  placed: int,
                                                  expected: dict[str, str]) -> None:
    cache = Cache()
    for name in ("n1", "n2", "n3"):
        cache.set_node(parse_node({"metadata": {"name": name}, "status": {
            "allocatable": {"cpu": "4", "memory": "4Gi", "pods": "10"}}}))
    members = [_pod(name) for name in wants]
    made, why = _search(cache, wants, budget).place(members)
    assert made == placed
    assert {m.name: cache.claimed_node(m.key) for m in members if cache.claimed_node(m.key)} \
        == expected
    assert (why == "") == bool(expected)


def test_only_members_that_differ_and_use_devices_are_searched() -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 2}})
    alike = [_pod("a"), _pod("b")]
    assert not needs_search(group, alike)
    assert needs_search(group, [_pod("a"), _pod("b", template="big-gpu")])
    assert needs_search(group, [_pod("a"), _pod("b", cpu="2")])
    constrained = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"}, "spec": {
        "minMember": 2, "deviceConstraints": [{"matchAttribute": "x.example.com/clique"}]}})
    assert needs_search(constrained, alike)
    plain = [parse_pod({"metadata": {"name": n, "namespace": "ns"}, "spec": {
        "containers": [{"name": "c"}]}}) for n in ("a", "b")]
    assert not needs_search(constrained, plain)
