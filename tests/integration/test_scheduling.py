"""The scheduler against a real kube-apiserver + etcd + controller-manager (issue 3)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import KubeClient
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    create_priority_class,
    delete_pod,
    placement,
    pod_body,
    pod_condition,
    start_waiting_gang,
    wait_until,
)

StartScheduler = Callable[..., Any]


def _job(name: str, group: str, scheduler: str, count: int, cpu: str = "1") -> dict[str, Any]:
    """Seed 000: a Job whose pods carry the group label."""
    template = pod_body(name, scheduler=scheduler, cpu=cpu, group=group)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": count, "completions": count, "backoffLimit": 6,
                 "template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }


def test_seed000_job_gang_all_or_nothing(kube: KubeClient, namespace: str, make_node: Any,
                                        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("s0-a", cpu="3")
    make_node("s0-b", cpu="2")  # room for 5 of the 6
    create_podgroup(kube, namespace, "qj-1", 6)
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                _job("qj-1", "qj-1", sched.name, 6))
    wait_until(lambda: len(placement(kube, namespace)) == 6, what="the Job's 6 pods")
    wait_until(lambda: pod_condition(kube, namespace, sorted(placement(kube, namespace))[0],
                                     "PodScheduled").get("reason") == "Unschedulable",
               what="a PodScheduled=False condition")
    assert bound_count(kube, namespace, "qj-1") == 0
    make_node("s0-c", cpu="1")
    wait_until(lambda: bound_count(kube, namespace, "qj-1") == 6, what="all 6 bound")
    sched.watcher.check_settled()


def _statefulset(name: str, group: str, scheduler: str, replicas: int) -> dict[str, Any]:
    template = pod_body(name, scheduler=scheduler, cpu="1", group=group,
                        labels={"app": name})
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "podManagementPolicy": "Parallel", "serviceName": name,
                 "replicas": replicas,
                 "template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }


def test_seed001_two_racing_statefulsets_one_gang_wins_whole(
        kube: KubeClient, make_namespace: Callable[[], str], make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """8 CPU with 0.9 used, two gangs of 5 x 1 CPU: exactly one is placed, ten rounds.

    Each round has its own scheduler (and schedulerName): the losing gang of a round stays
    pending, and a scheduler serving it would rightly place it on the next round's node.
    """
    rng = random.Random(1)
    for round_no in range(10):
        sched = start_scheduler()
        node = f"race-{round_no}"
        make_node(node, cpu="8")
        namespace = make_namespace()
        create_pod(kube, namespace, pod_body("system", scheduler="none", cpu="900m",
                                             node_name=node))
        sched.watch(namespace)
        order = ["group1", "group2"]
        rng.shuffle(order)
        for group in order:
            create_podgroup(kube, namespace, group, 5)
        rng.shuffle(order)
        for group in order:
            kube.create(f"/apis/apps/v1/namespaces/{namespace}/statefulsets",
                        _statefulset(f"web-{group}", group, sched.name, 5))
        wait_until(lambda ns=namespace: len(placement(kube, ns)) == 11, what="11 pods")
        wait_until(lambda ns=namespace: sorted(
            [bound_count(kube, ns, "group1"), bound_count(kube, ns, "group2")]) == [0, 5],
            what=f"round {round_no}: one gang bound whole")
        loser = "group1" if bound_count(kube, namespace, "group1") == 0 else "group2"
        wait_until(lambda ns=namespace, g=loser: pod_condition(
            kube, ns, f"web-{g}-0", "PodScheduled").get("reason") == "Unschedulable",
            what="the losing gang's pods marked Unschedulable")
        assert sorted([bound_count(kube, namespace, "group1"),
                       bound_count(kube, namespace, "group2")]) == [0, 5]
        sched.watcher.check_settled()
        sched.close()
        kube.delete(f"/api/v1/nodes/{node}")  # later rounds must not see its free room


def test_higher_priority_gang_wins(kube: KubeClient, namespace: str, make_node: Any,
                                   start_scheduler: StartScheduler) -> None:
    create_priority_class(kube, "cs-test-high", 1000)
    create_priority_class(kube, "cs-test-low", 10)
    make_node("prio-a", cpu="4")
    sched = start_scheduler(start=False)
    create_podgroup(kube, namespace, "low", 4)
    create_podgroup(kube, namespace, "high", 4)
    for i in range(4):
        create_pod(kube, namespace, pod_body(f"low-{i}", scheduler=sched.name, group="low",
                                             priority_class="cs-test-low"))
        create_pod(kube, namespace, pod_body(f"high-{i}", scheduler=sched.name, group="high",
                                             priority_class="cs-test-high"))
    sched.start()
    wait_until(lambda: bound_count(kube, namespace, "high") == 4, what="high gang bound")
    wait_until(lambda: pod_condition(kube, namespace, "low-0", "PodScheduled").get("reason")
               == "Unschedulable", what="low gang reported Unschedulable")
    assert bound_count(kube, namespace, "low") == 0


def test_timeout_rejects_gang_and_releases_room(kube: KubeClient, namespace: str,
                                                make_node: Any,
                                                start_scheduler: StartScheduler) -> None:
    """Two members wait, the third is deleted: at maxScheduleTime the gang is rejected as a
    whole, its room is released, and a later gang that fits is placed."""
    make_node("to-a", cpu="4")
    sched = start_scheduler(start=False)
    sched.start(loops=False)
    scheduler = sched.service.scheduler
    waiting = start_waiting_gang(kube, namespace, sched, "slow", 3, maxScheduleTime="3s")
    assert len(waiting) == 2, waiting
    third = ({"slow-0", "slow-1", "slow-2"} - set(waiting)).pop()
    delete_pod(kube, namespace, third)
    wait_until(lambda: len(scheduler.waiting_pods) == 0, timeout=10, what="gang timeout")
    info = scheduler.cache.node("to-a")
    wait_until(lambda: info is not None and not info.requested.get("cpu") and not info.claims,
               timeout=5, what="room released")
    gang = scheduler.framework.instances["Coscheduling"].manager.state(f"{namespace}/slow")
    assert gang.timeouts == 1 and "timed out" in gang.last_failure
    assert bound_count(kube, namespace, "slow") == 0
    create_podgroup(kube, namespace, "fits", 4)
    for i in range(4):
        create_pod(kube, namespace, pod_body(f"fits-{i}", scheduler=sched.name, group="fits"))
    scheduler.start_loops()
    wait_until(lambda: bound_count(kube, namespace, "fits") == 4, what="later gang placed")
    assert bound_count(kube, namespace, "slow") == 0


def test_missing_group_waits_with_reason_and_plain_pods_schedule(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("mg-a", cpu="4")
    create_pod(kube, namespace, pod_body("orphan", scheduler=sched.name, group="later"))
    create_pod(kube, namespace, pod_body("plain", scheduler=sched.name))
    wait_until(lambda: placement(kube, namespace).get("plain"), what="plain pod bound")
    condition = wait_until(lambda: pod_condition(kube, namespace, "orphan", "PodScheduled"),
                           what="orphan's condition")
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert f'PodGroup (batch.scheduler.tencent.com/v1) "{namespace}/later" not found' in \
        condition["message"]
    create_podgroup(kube, namespace, "later", 1)
    wait_until(lambda: placement(kube, namespace).get("orphan"), what="orphan bound")


RACK = "example.com/rack"


def test_randomized_gangs_invariants_and_progress(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """Random gangs, a third of them Required to one rack and a third Preferred, on racks of
    random nodes, half of the placed ones deleted each round: at every observed moment no
    gang below minMember is bound, no node over-committed, no pod bound twice (the watcher);
    after each round a Required gang sits in one rack, and no pending gang fits room left
    idle."""
    rng = random.Random(7)
    sched = start_scheduler({"podInitialBackoffSeconds": 0.2, "podMaxBackoffSeconds": 1})
    nodes = {f"rnd-{i}": rng.choice([2, 4, 6]) for i in range(6)}
    racks = {name: f"r{i % 3}" for i, name in enumerate(nodes)}
    for name, cpu in nodes.items():
        make_node(name, cpu=str(cpu), labels={RACK: racks[name]})
    gangs: dict[str, int] = {}
    modes: dict[str, str] = {}
    for g in range(12):
        size = rng.randint(1, 6)
        gangs[f"g{g}"] = size
        modes[f"g{g}"] = ("", "Required", "Preferred")[g % 3]
        topology = {"topology": {"mode": modes[f"g{g}"], "keys": [RACK]}} if modes[f"g{g}"] \
            else {}
        create_podgroup(kube, namespace, f"g{g}", size, **topology)
    members = [(g, i) for g, size in gangs.items() for i in range(size)]
    rng.shuffle(members)
    for g, i in members:
        create_pod(kube, namespace, pod_body(f"{g}-{i}", scheduler=sched.name, group=g))
    for round_no in range(3):
        _wait_progress(kube, namespace, gangs, nodes, racks, modes)
        sched.watcher.check_settled()
        _assert_required_gangs_in_one_rack(kube, namespace, gangs, racks, modes)
        placed = [g for g in gangs if bound_count(kube, namespace, g)]
        assert placed, f"round {round_no}: nothing placed"
        for g in rng.sample(placed, k=max(1, len(placed) // 2)):
            for i in range(gangs[g]):
                delete_pod(kube, namespace, f"{g}-{i}")
            del gangs[g]
        gone = [g for g in placed if g not in gangs]
        wait_until(lambda gone=gone: all(bound_count(kube, namespace, g) == 0 for g in gone),
                   what="deleted gangs gone")
    _wait_progress(kube, namespace, gangs, nodes, racks, modes)
    sched.watcher.check_settled()
    _assert_required_gangs_in_one_rack(kube, namespace, gangs, racks, modes)


def _assert_required_gangs_in_one_rack(kube: KubeClient, namespace: str,
                                       gangs: dict[str, int], racks: dict[str, str],
                                       modes: dict[str, str]) -> None:
    where = placement(kube, namespace)
    for g in gangs:
        if modes[g] != "Required":
            continue
        used = {racks[node] for pod, node in where.items()
                if node and pod.rsplit("-", 1)[0] == g}
        assert len(used) <= 1, f"Required gang {g} split over racks {sorted(used)}"


def _wait_progress(kube: KubeClient, namespace: str, gangs: dict[str, int],
                   nodes: dict[str, int], racks: dict[str, str], modes: dict[str, str]) -> None:
    """Wait until no pending gang would fit the free room on its own (1 CPU members; a
    Required gang only the free room of one rack)."""

    def settled() -> bool:
        where = placement(kube, namespace)
        used = Counter(node for node in where.values() if node)
        free = {name: cpu - used.get(name, 0) for name, cpu in nodes.items()}
        per_rack: Counter[str] = Counter()
        for name, room in free.items():
            per_rack[racks[name]] += room
        for g, size in gangs.items():
            if bound_count(kube, namespace, g):
                continue
            room = max(per_rack.values()) if modes[g] == "Required" else sum(free.values())
            if size <= room:
                return False
        return True

    wait_until(settled, timeout=60, interval=0.5,
               what="progress: a pending gang fits the free room but is not placed")
