"""The cache's accounting of a node: bound pods, claims, and the room victims hand over to
the claims of the preemptor they were evicted for (counted once until they are gone)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podaffinity import LabelSelector, parse_label_selector
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.cache import Cache
from tests.simulation import GROUP_LABEL


def _pod(name: str, cpu: int, node: str = "") -> Pod:
    spec: dict[str, object] = {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}
    if node:
        spec["nodeName"] = node
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
                      "spec": spec})


@dataclass(frozen=True)
class Case:
    name: str
    bound: tuple[tuple[str, int], ...]  # (pod, cpu) bound on the node
    claims: tuple[tuple[str, int], ...]  # (pod, cpu) claimed on the node
    handovers: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (victims, claimants)
    gone: tuple[str, ...]  # victims whose deletion was seen
    excluding: str  # whose own claim is left out (a claimant's own Filter)
    used: int  # cpu used, in cores
    pods: int  # pods and claims, each counted once


CASES = [
    Case("no preemption: pods and claims add up", (("a", 2), ("b", 2)), (("c", 1),), (), (),
         "", 5, 3),
    Case("victims and the claims they make room for: counted once",
         (("keep", 4), ("v1", 1), ("v2", 1), ("v3", 1), ("v4", 1)),
         (("h1", 1), ("h2", 1), ("h3", 1), ("h4", 1)),
         ((("v1", "v2", "v3", "v4"), ("h1", "h2", "h3", "h4")),), (), "", 8, 5),
    Case("a claimant's own Filter while its victims still run: no room yet",
         (("keep", 4), ("v1", 1), ("v2", 1), ("v3", 1), ("v4", 1)),
         (("h1", 1), ("h2", 1), ("h3", 1), ("h4", 1)),
         ((("v1", "v2", "v3", "v4"), ("h1", "h2", "h3", "h4")),), (), "h1", 8, 5),
    Case("victims gone: the claims hold the room",
         (("keep", 4), ("v1", 1), ("v2", 1), ("v3", 1), ("v4", 1)),
         (("h1", 1), ("h2", 1), ("h3", 1), ("h4", 1)),
         ((("v1", "v2", "v3", "v4"), ("h1", "h2", "h3", "h4")),), ("v1", "v2", "v3", "v4"),
         "h1", 7, 4),
    Case("victims beyond the claims keep their room until they go",
         (("keep", 2), ("v1", 3)), (("h1", 1),), ((("v1",), ("h1",)),), (), "", 5, 2),
    Case("a claim beyond its victims' room uses room that was free",
         (("keep", 2), ("v1", 1)), (("h1", 3),), ((("v1",), ("h1",)),), (), "", 5, 2),
    Case("claims released before the victims went: the victims count again",
         (("keep", 4), ("v1", 2)), (), ((("v1",), ("h1",)),), (), "", 6, 2),
    Case("two preemptions on one node: each shares with its own victims only",
         (("keep", 2), ("v1", 2), ("w1", 1)), (("h1", 2), ("i1", 1), ("i2", 2)),
         ((("v1",), ("h1",)), (("w1",), ("i1", "i2"))), (), "", 7, 4),
    Case("a claim two preemptions name (a gang retried with other members) shares once",
         (("v1", 2), ("v2", 2), ("x1", 2), ("x2", 2)), (("a", 2), ("c", 2)),
         ((("v1", "v2"), ("a", "b")), (("x1", "x2"), ("a", "c"))), (), "", 8, 4),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_handed_over_room_is_counted_once(case: Case) -> None:
    cache = Cache()
    cache.set_node(parse_node({"metadata": {"name": "n"},
                               "status": {"allocatable": {"cpu": "8", "pods": "110"}}}))
    bound = {name: _pod(name, cpu, "n") for name, cpu in case.bound}
    for pod in bound.values():
        cache.set_pod(pod)
    for name, cpu in case.claims:
        claimant = _pod(name, cpu)
        cache.set_pod(claimant)
        cache.claim(claimant, "n")
    for victims, claimants in case.handovers:
        cache.hand_over([bound[v] for v in victims], [f"ns/{c}" for c in claimants])
    for name in case.gone:
        cache.remove_pod(f"ns/{name}")
    info = cache.node("n")
    assert info is not None
    excluding = f"ns/{case.excluding}" if case.excluding else ""
    assert info.used("cpu", excluding) == case.used * 1000
    assert info.pod_count(excluding) == case.pods


def test_a_simulated_eviction_of_a_victim_does_not_count_its_room_twice() -> None:
    """Preemption's simulation takes a victim out (a transaction's tentative eviction): the
    claims sharing its room then count in full, so nothing is freed twice."""
    cache = Cache()
    cache.set_node(parse_node({"metadata": {"name": "n"},
                               "status": {"allocatable": {"cpu": "8"}}}))
    victim = _pod("v", 4, "n")
    cache.set_pod(victim)
    cache.set_pod(_pod("other", 4, "n"))
    claimant = _pod("h", 4)
    cache.set_pod(claimant)
    cache.claim(claimant, "n")
    cache.hand_over([victim], [claimant.key])
    info = cache.node("n")
    assert info is not None and info.used("cpu") == 8000
    with cache.transaction() as tx:
        tx.evict([victim])
        assert info.used("cpu") == 8000
    assert info.used("cpu") == 8000


# -- pods by label ---------------------------------------------------------------------------
SELECTORS = [
    {"matchLabels": {"gang": "g1"}},
    {"matchLabels": {"gang": "g2", "role": "worker"}},
    {"matchExpressions": [{"key": "role", "operator": "In", "values": ["ps", "worker"]}]},
    {"matchExpressions": [{"key": "gang", "operator": "In", "values": ["g1", "g2", "g1"]}]},
    {"matchExpressions": [{"key": "gang", "operator": "NotIn", "values": ["g1"]}]},
    {"matchExpressions": [{"key": "role", "operator": "Exists"}]},
    {},
]


def _labelled_pod(rng: random.Random, index: int, node: str = "") -> Pod:
    labels = {"gang": rng.choice(["g1", "g2", "g3"])}
    if rng.random() < 0.7:
        labels["role"] = rng.choice(["ps", "worker", "chief"])
    spec: dict[str, object] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    if rng.random() < 0.4:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"gang": labels["gang"]}},
             "topologyKey": "kubernetes.io/hostname"}]}}
    return parse_pod({"metadata": {"name": f"p{index % 40}", "namespace": "ns",
                                   "uid": f"uid-{index % 40}", "labels": labels},
                      "spec": spec})


def _present(cache: Cache, selector: LabelSelector) -> Counter[tuple[str, str]]:
    """(pod, node) of every pod or claim on a node record matching ``selector``, found the
    slow way."""
    found: Counter[tuple[str, str]] = Counter()
    for info in cache._nodes.values():  # the reference walks every record
        for holder in (info.pods, info.claims):
            found.update((p.key, info.name) for p in holder.values()
                         if selector.matches(p.labels))
    return found


def _step(cache: Cache, rng: random.Random, index: int,
          make: Callable[[random.Random, int, str], Pod] | None = None) -> None:
    """One change of the kinds the watches and the scheduler's decisions make, to a pod
    ``make`` gives (bound to the node it is given, if any)."""
    node = rng.choice(["n0", "n1", "n2"])
    action = rng.randrange(7)
    pod = (make or _labelled_pod)(rng, index, node if action == 0 else "")
    if action == 0:
        cache.set_pod(pod)
    elif action == 1:
        cache.set_pod(pod)
        cache.assume(pod, node)
    elif action == 2:
        cache.set_pod(pod)
        cache.claim(pod, node)
    elif action == 3:
        cache.drop_claim(pod.key)
        cache.forget(pod.key)
    elif action == 4:
        cache.remove_pod(pod.key)
    elif action == 5:
        cache.remove_node(node)
    else:
        cache.set_node(parse_node({"metadata": {"name": node}}))


def test_pods_found_by_label_are_every_matching_pod_on_a_node_record() -> None:
    """Whatever came and went, and whenever a label key was first asked for, the pods the
    index offers include every matching pod (bound, assumed or claimed) and no pod that is
    not there, inside a simulated eviction too."""
    rng = random.Random(20261127)
    cache = Cache()
    everything = parse_label_selector({}, "all")
    assert everything is not None
    selectors = [parse_label_selector(raw, "s") for raw in SELECTORS]
    looked_up = 0
    for index in range(3000):
        _step(cache, rng, index)
        if index % 7:
            continue
        selector = rng.choice(selectors)
        assert selector is not None
        with cache.transaction() as tx:
            tx.evict([p for p in cache.pods() if p.node_name and rng.random() < 0.2])
            offered = cache.labelled(selector)
            if offered is None:  # names no label value: the caller visits every node
                assert all(r.operator != "In" for r in selector.requirements)
                continue
            looked_up += 1
            pairs = [(p, info.name) for p, info in offered]
            slots = Counter((p.key, name) for p, name in pairs)
            matching = Counter((p.key, name) for p, name in pairs if selector.matches(p.labels))
            assert matching == _present(cache, selector)
            assert not slots - _present(cache, everything)
            _assert_affinities_held(cache)
    assert looked_up > 200


def _assert_affinities_held(cache: Cache) -> None:
    expected: dict[object, Counter[tuple[str, str]]] = {}
    for info in cache._nodes.values():  # the reference walks every record
        for holder in (info.pods, info.claims):
            for pod in holder.values():
                if pod.pod_affinity is not None:
                    expected.setdefault(pod.pod_affinity, Counter())[pod.key, info.name] += 1
    held = {affinity: Counter((p.key, info.name) for p, info in holders)
            for affinity, holders in cache.placed_affinities()}
    assert held == expected


def test_a_pod_assumed_again_elsewhere_leaves_its_first_node() -> None:
    cache = Cache()
    for name in ("a", "b"):
        cache.set_node(parse_node({"metadata": {"name": name},
                                   "status": {"allocatable": {"cpu": "8"}}}))
    pod = _pod("p", 2)
    cache.set_pod(pod)
    cache.assume(pod, "a")
    cache.assume(pod, "b")
    first, second = cache.node("a"), cache.node("b")
    assert first is not None and second is not None
    assert (first.used("cpu"), second.used("cpu")) == (0, 2000)
    cache.forget(pod.key)
    assert second.used("cpu") == 0


# -- where a gang's members are --------------------------------------------------------------
def _member(rng: random.Random, index: int, node: str) -> Pod:
    """A member of g1 or g2 (or a plain pod), bound to ``node`` when given, sometimes being
    deleted."""
    group = rng.choice(["g1", "g2", ""])
    meta: dict[str, object] = {"name": f"m{index % 30}", "namespace": "ns",
                               "uid": f"uid-{index % 30}-{rng.randrange(2)}",
                               "labels": {GROUP_LABEL: group} if group else {}}
    if rng.random() < 0.15:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return parse_pod({"metadata": meta, "spec": {"nodeName": node,
                                                 "containers": [{"name": "c"}]}})


def _group_nodes_walked(cache: Cache, group_key: str, excluding: str) -> Counter[str]:
    """Where the group's members are, found by walking every pod the cache holds."""
    found: Counter[str] = Counter()
    for pod in cache.pods():
        if pod.group_key != group_key or pod.key == excluding or pod.deleting:
            continue
        node = pod.node_name or cache.assumed_node(pod.key) or cache.claimed_node(pod.key)
        if node:
            found[node] += 1
    return found


def test_a_groups_nodes_follow_every_bind_assume_claim_forget_and_deletion() -> None:
    """The per-group node counts the cache keeps as pods move equal a walk of every pod,
    after any sequence of the changes the watches and the scheduler make (a pod replaced
    under a new uid, marked for deletion, moved from claim to assume to bind)."""
    rng = random.Random(35)
    cache = Cache()
    for index in range(4000):
        _step(cache, rng, index, _member)
        for group in ("ns/g1", "ns/g2"):
            excluding = f"ns/m{rng.randrange(30)}"
            assert cache.group_nodes(group, excluding) == \
                _group_nodes_walked(cache, group, excluding), index
