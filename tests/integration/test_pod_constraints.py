"""Inter-pod affinity and topology spread against a real kube-apiserver (issue 14).

Every pod also carries a node selector on a label only this test's nodes have, so nodes
other tests left behind cannot change the counts.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import KubeClient
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    events_for,
    placement,
    pod_body,
    pod_condition,
    wait_until,
)

StartScheduler = Callable[..., Any]
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ANTI = "node(s) didn't match pod anti-affinity rules"


def _pod(name: str, scheduler: str, pool: str, *, group: str = "",
         labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = pod_body(name, scheduler=scheduler, cpu="100m", group=group, labels=labels)
    body["spec"]["nodeSelector"] = {"test-pool": pool}
    body["spec"].update(spec)
    return body


def _term(key: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": labels}}


def _pool() -> str:
    return uuid.uuid4().hex[:8]


def _pool_of_nodes(make_node: Any, prefix: str, count: int) -> str:
    """A fresh pool label and ``count`` nodes ``<prefix>-<pool>-<i>`` in it."""
    pool = _pool()
    for i in range(count):
        make_node(f"{prefix}-{pool}-{i}", labels={"test-pool": pool})
    return pool


def _anti_gang(kube: KubeClient, namespace: str, scheduler: str, pool: str,
               group: str, size: int) -> None:
    create_podgroup(kube, namespace, group, size)
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term(HOST, {"app": group})]}}
    for i in range(size):
        create_pod(kube, namespace, _pod(f"{group}-{i}", scheduler, pool, group=group,
                                         labels={"app": group}, affinity=anti))


def test_gang_with_required_anti_affinity_goes_one_per_node(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """One large node and three small ones: LeastAllocated alone puts every member on the
    large node (it stays the emptiest), so one member per node needs the anti-affinity."""
    sched = start_scheduler()
    pool = _pool()
    make_node(f"anti-{pool}-big", cpu="16", memory="32Gi", labels={"test-pool": pool})
    for i in range(3):  # each could hold all four members by resources
        make_node(f"anti-{pool}-{i}", cpu="500m", memory="512Mi", labels={"test-pool": pool})
    _anti_gang(kube, namespace, sched.name, pool, "spread", 4)
    wait_until(lambda: bound_count(kube, namespace, "spread") == 4, what="4 members bound")
    nodes = placement(kube, namespace)
    assert len(set(nodes.values())) == 4, nodes
    sched.watcher.check_settled()


def test_gang_with_required_anti_affinity_waits_whole_when_nodes_are_too_few(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool_of_nodes(make_node, "few", 3)
    _anti_gang(kube, namespace, sched.name, pool, "toobig", 4)

    def refused() -> bool:
        condition = pod_condition(kube, namespace, "toobig-0", "PodScheduled")
        return condition.get("reason") == "Unschedulable" and ANTI in condition.get(
            "message", "")

    wait_until(refused, what="a PodScheduled=False condition naming the anti-affinity")
    assert bound_count(kube, namespace, "toobig") == 0
    assert any(ANTI in e.get("message", "") for e in events_for(kube, namespace, "toobig-0"))
    make_node(f"few-{pool}-3", labels={"test-pool": pool})
    wait_until(lambda: bound_count(kube, namespace, "toobig") == 4,
               what="all 4 bound once a fourth node exists")
    assert len(set(placement(kube, namespace).values())) == 4
    sched.watcher.check_settled()


def test_gang_with_required_pod_affinity_follows_an_existing_pod(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool_of_nodes(make_node, "aff", 3)
    create_pod(kube, namespace, _pod("db", sched.name, pool, labels={"app": "db"}))
    wait_until(lambda: placement(kube, namespace).get("db"), what="the db pod bound")
    db_node = placement(kube, namespace)["db"]
    create_podgroup(kube, namespace, "near", 3)
    follow = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term(HOST, {"app": "db"})]}}
    for i in range(3):
        create_pod(kube, namespace, _pod(f"near-{i}", sched.name, pool, group="near",
                                         affinity=follow))
    wait_until(lambda: bound_count(kube, namespace, "near") == 3, what="3 members bound")
    nodes = placement(kube, namespace)
    assert {nodes[f"near-{i}"] for i in range(3)} == {db_node}
    sched.watcher.check_settled()


def test_gang_of_six_with_max_skew_one_over_three_zones_lands_two_two_two(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """Zone a has four nodes, b and c one each: without the spread constraint the scores
    put most members in zone a (all six, when PodTopologySpread was disabled), so 2-2-2
    needs the constraint."""
    sched = start_scheduler()
    pool = _pool()
    zone_of = {}
    for zone, count in (("a", 4), ("b", 1), ("c", 1)):
        for i in range(count):
            name = f"zone-{pool}-{zone}{i}"
            make_node(name, labels={"test-pool": pool, ZONE: f"{pool}-{zone}"})
            zone_of[name] = zone
    create_podgroup(kube, namespace, "even", 6)
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "even"}}}]
    for i in range(6):
        create_pod(kube, namespace, _pod(f"even-{i}", sched.name, pool, group="even",
                                         labels={"app": "even"},
                                         topologySpreadConstraints=spread))
    wait_until(lambda: bound_count(kube, namespace, "even") == 6, what="6 members bound")
    zones = Counter(zone_of[node] for node in placement(kube, namespace).values())
    assert zones == {"a": 2, "b": 2, "c": 2}
    sched.watcher.check_settled()


def test_affinity_namespace_selector_follows_namespace_labels(
        kube: KubeClient, namespace: str, make_namespace: Callable[[], str], make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """namespaceSelector terms read the namespaces' labels from the namespace watch: pods
    follow a pod in a namespace labelled after the scheduler started (without the label
    nothing would match their term, and they would stay pending)."""
    sched = start_scheduler()
    pool = _pool_of_nodes(make_node, "ns", 3)
    other = make_namespace()
    sched.watch(other)
    create_pod(kube, other, _pod("web", sched.name, pool, labels={"app": "web"}))
    wait_until(lambda: placement(kube, other).get("web"), what="the web pod bound")
    web_node = placement(kube, other)["web"]
    kube.patch(f"/api/v1/namespaces/{other}", {"metadata": {"labels": {"team": pool}}})
    labels = sched.service.scheduler.cache.namespace_labels
    wait_until(lambda: labels.get(other, {}).get("team") == pool,
               what="the namespace label in the scheduler's cache")
    follow = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "web"}},
        "namespaceSelector": {"matchLabels": {"team": pool}}}]}}
    for i in range(3):
        create_pod(kube, namespace, _pod(f"near-{i}", sched.name, pool, affinity=follow))
    wait_until(lambda: sum(1 for n in placement(kube, namespace).values() if n) == 3,
               what="3 pods bound")
    assert set(placement(kube, namespace).values()) == {web_node}
    sched.watcher.check_settled()
