"""Queues against the real API server: weighted shares, borrowing, a missing queue, queue
status and printer columns, and DRF's order between two gangs of one queue."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from coscheduling.localcluster import LocalCluster
from tests.integration.fixtures import kubectl
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    create_priority_class,
    events_for,
    exists,
    list_pods,
    pod_body,
    pod_condition,
    wait_until,
)
from tests.integration.test_preemption import Kubelet

QUEUES = "/apis/batch.scheduler.tencent.com/v1/queues"
StartScheduler = Callable[..., Any]


@pytest.fixture
def make_queue(kube: KubeClient, crd: None) -> Iterator[Callable[..., str]]:
    """Cluster-scoped queues with fresh names, deleted after the test."""
    made: list[str] = []

    def make(weight: int = 1, **spec: Any) -> str:
        name = f"q-{uuid.uuid4().hex[:8]}"
        kube.create(QUEUES, {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "Queue",
                             "metadata": {"name": name}, "spec": {"weight": weight, **spec}})
        made.append(name)
        return name

    yield make
    for name in made:
        with contextlib.suppress(ApiError):
            kube.delete(f"{QUEUES}/{name}")


def _gangs(kube: KubeClient, namespace: str, scheduler: str, queue: str, count: int,
           size: int = 2, grace: int = 0) -> list[str]:
    names = []
    for g in range(count):
        group = f"{queue}-g{g}"
        create_podgroup(kube, namespace, group, size, queue=queue)
        for i in range(size):
            body = pod_body(f"{group}-{i}", scheduler=scheduler, group=group)
            body["spec"]["terminationGracePeriodSeconds"] = grace  # victims terminate slowly
            create_pod(kube, namespace, body)
        names.append(group)
    return names


def _bound(kube: KubeClient, namespace: str, groups: list[str]) -> int:
    return sum(bound_count(kube, namespace, g) for g in groups)


def _status(kube: KubeClient, queue: str) -> dict[str, Any]:
    return dict(kube.get(f"{QUEUES}/{queue}").get("status") or {})


def test_three_weighted_queues_end_with_their_deserved_cpu(
        kube: KubeClient, local_cluster: LocalCluster, namespace: str, make_node: Any,
        make_queue: Callable[..., str], start_scheduler: StartScheduler) -> None:
    for _ in range(3):
        make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="4", memory="64Gi")
    queues = [make_queue(weight) for weight in (1, 2, 3)]
    sched = start_scheduler(start=False)
    # The whole backlog is there before scheduling starts (reclaim is tested on its own).
    groups = {q: _gangs(kube, namespace, sched.name, q, 4) for q in queues}  # 8 cpu each
    sched.start()
    expected = dict(zip(queues, (2, 4, 6), strict=True))
    for queue, cpu in expected.items():
        wait_until(lambda q=queue, c=cpu: _status(kube, q).get("deserved", {}).get("cpu")
                   == str(c) and _status(kube, q).get("allocated", {}).get("cpu") == str(c),
                   what=f"queue {queue} at its deserved {cpu} cpu")
    for queue, cpu in expected.items():
        status = _status(kube, queue)
        assert (status["running"], status["pending"]) == (cpu // 2, 4 - cpu // 2), status
        assert _bound(kube, namespace, groups[queue]) == cpu
    # A waiting gang says why: its queue's share.
    waiting = f"{groups[queues[0]][-1]}-0"
    wait_until(lambda: "deserved" in pod_condition(kube, namespace, waiting,
                                                   "PodScheduled").get("message", ""),
               what="the waiting gang's reason")
    text = explain(kube, namespace, groups[queues[0]][-1])
    assert f'Queue "{queues[0]}": weight 1, deserved cpu 2' in text, text
    assert "Waiting for: its queue's share." in text, text
    metrics = sched.service.scheduler.metrics
    assert [metrics.queue_deserved.value(q, "cpu") for q in queues] == [2.0, 4.0, 6.0]
    assert metrics.queue_gangs.value(queues[2], "running") == 3.0
    # kubectl get queues shows the columns.
    out = kubectl(local_cluster, "get", "queues", queues[2], "-o", "wide").stdout
    header, row = out.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "WEIGHT", "DESERVED", "ALLOCATED", "PENDING",
                                  "RUNNING"], header
    assert row.split()[1] == "3" and '"cpu":"6"' in row, row
    sched.watcher.check_settled()


def test_a_queue_alone_borrows_the_whole_cluster(
        kube: KubeClient, namespace: str, make_node: Any, make_queue: Callable[..., str],
        start_scheduler: StartScheduler) -> None:
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="6", memory="64Gi")
    busy, idle = make_queue(1), make_queue(5)
    sched = start_scheduler()
    groups = _gangs(kube, namespace, sched.name, busy, 4)
    wait_until(lambda: _bound(kube, namespace, groups) == 6, what="6 cpu to the lone queue")
    wait_until(lambda: _status(kube, busy).get("allocated", {}).get("cpu") == "6",
               what="the lone queue's status")
    assert _status(kube, idle).get("running") == 0
    sched.watcher.check_settled()


def test_a_gang_naming_a_missing_queue_waits_until_itexists(
        kube: KubeClient, namespace: str, make_node: Any, make_queue: Callable[..., str],
        start_scheduler: StartScheduler) -> None:
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="4", memory="64Gi")
    sched = start_scheduler()
    create_podgroup(kube, namespace, "g", 2, queue="later")
    for i in range(2):
        create_pod(kube, namespace, pod_body(f"g-{i}", scheduler=sched.name, group="g"))
    wait_until(lambda: 'Queue "later" not found' in pod_condition(
        kube, namespace, "g-0", "PodScheduled").get("message", ""),
        what="the reason naming the missing queue")
    assert bound_count(kube, namespace, "g") == 0
    assert 'Queue "later" not found: the gang waits until it exists' in explain(
        kube, namespace, "g")
    kube.create(QUEUES, {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "Queue",
                         "metadata": {"name": "later"}, "spec": {}})
    try:
        wait_until(lambda: bound_count(kube, namespace, "g") == 2, what="the gang, placed")
        # The default Queue exists: the scheduler created it if it was missing.
        default = kube.get(f"{QUEUES}/default")
        assert default["spec"]["weight"] == 1
    finally:
        kube.delete(f"{QUEUES}/later")


def test_drf_orders_the_gang_holding_little_first(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler
        ) -> None:
    """Gang "big" holds 2 of 4 cpu; its two surplus members (older) and gang "new" wait for
    the last 2 cpu while no scheduler runs. DRF gives them to "new", which holds nothing."""
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="4", memory="64Gi")
    first = start_scheduler()
    create_podgroup(kube, namespace, "big", 2)
    for i in range(2):
        create_pod(kube, namespace, pod_body(f"big-{i}", scheduler=first.name, group="big"))
    wait_until(lambda: bound_count(kube, namespace, "big") == 2, what="the big gang")
    first.close()  # its watcher would judge the next scheduler's gangs as its own
    for i in range(2, 4):
        create_pod(kube, namespace, pod_body(f"big-{i}", scheduler=first.name, group="big"))
    create_podgroup(kube, namespace, "new", 2)
    for i in range(2):
        create_pod(kube, namespace, pod_body(f"new-{i}", scheduler=first.name, group="new"))
    second = start_scheduler({"schedulerName": first.name})
    wait_until(lambda: bound_count(kube, namespace, "new") == 2, what="the new gang, first")
    wait_until(lambda: "Insufficient cpu" in json.dumps(pod_condition(
        kube, namespace, "big-2", "PodScheduled")), what="big's surplus to find no room")
    assert bound_count(kube, namespace, "big") == 2
    second.watcher.check_settled()


def test_a_borrower_gives_back_whole_gangs_when_another_queue_arrives(
        kube: KubeClient, namespace: str, make_node: Any, make_queue: Callable[..., str],
        start_scheduler: StartScheduler) -> None:
    for _ in range(3):
        make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="4", memory="64Gi")
    borrower, owner = make_queue(1), make_queue(1)
    sched = start_scheduler()
    kubelet = Kubelet(kube, namespace)
    lent = _gangs(kube, namespace, sched.name, borrower, 6, grace=30)
    wait_until(lambda: _bound(kube, namespace, lent) == 12, what="the borrower's 12 cpu")
    taking = _gangs(kube, namespace, sched.name, owner, 4)  # asks for 8, deserves 6
    kubelet.until(lambda: _bound(kube, namespace, taking) == 6, what="the owner's 6 cpu")
    kubelet.until(lambda: _bound(kube, namespace, lent) == 6
                  and not any(p["metadata"].get("deletionTimestamp")
                              for p in list_pods(kube, namespace)),
                  what="the borrower down to its share")
    for group in lent:  # whole gangs went, none was left partial
        assert bound_count(kube, namespace, group) in (0, 2), group
    assert len(kubelet.terminated) == 6
    reclaimed = {name.rsplit("-", 1)[0] for name in kubelet.terminated}
    for group in reclaimed:
        wait_until(lambda g=group: any(
            e.get("reason") == "Reclaimed" and f'Queue "{owner}"' in e.get("message", "")
            for e in events_for(kube, namespace, g)), what=f"a Reclaimed event on {group}")
    for queue in (borrower, owner):
        wait_until(lambda q=queue: _status(kube, q).get("allocated", {}).get("cpu") == "6",
                   what=f"queue {queue}'s status at 6 cpu")
    sched.watcher.check_settled()


def test_members_of_higher_priority_within_one_gang_go_first(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler
        ) -> None:
    """Room for two of a gang's three members (minMember 2): the newest member, of higher
    priority, is one of the two placed (seed 000: pods of one job with different
    PriorityClasses)."""
    create_priority_class(kube, "cs-test-queue-low", 10)
    create_priority_class(kube, "cs-test-queue-high", 1000)
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="2", memory="64Gi")
    sched = start_scheduler(start=False)
    create_podgroup(kube, namespace, "job", 2)
    for i, level in enumerate(("low", "low", "high")):
        create_pod(kube, namespace, pod_body(f"job-{i}", scheduler=sched.name, group="job",
                                             priority_class=f"cs-test-queue-{level}"))
    sched.start()
    wait_until(lambda: bound_count(kube, namespace, "job") == 2, what="two members placed")
    placed = {p["metadata"]["name"] for p in list_pods(kube, namespace)
              if p["spec"].get("nodeName")}
    assert "job-2" in placed and len(placed & {"job-0", "job-1"}) == 1, placed
    sched.watcher.check_settled()


def test_seed_000_example_on_the_api_server(
        kube: KubeClient, namespace: str, make_node: Any, make_queue: Callable[..., str],
        start_scheduler: StartScheduler) -> None:
    """Seed 000's worked example: nodes of 6 cpu/15Gi and 3 cpu/12Gi, Queue-1 weight 2 with
    a PodGroup asking cpu 5/10Gi, Queue-2 weight 4 with two asking cpu 4/12Gi and 6/8Gi:
    deserved cpu 3/9Gi and cpu 6/18Gi, in the Queues' status."""
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="6", memory="15Gi")
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="3", memory="12Gi")
    first, second = make_queue(2), make_queue(4)
    sched = start_scheduler(start=False)
    for group, queue, cpu, memory in (("pg-1", first, "5", "10Gi"), ("pg-2", second, "4", "12Gi"),
                                      ("pg-3", second, "6", "8Gi")):
        create_podgroup(kube, namespace, group, 1, queue=queue)
        create_pod(kube, namespace, pod_body(f"{group}-0", scheduler=sched.name, group=group,
                                             cpu=cpu, memory=memory))
    sched.start()
    for queue, deserved in ((first, {"cpu": "3", "memory": "9Gi"}),
                            (second, {"cpu": "6", "memory": "18Gi"})):
        wait_until(lambda q=queue, d=deserved: _status(kube, q).get("deserved") == d,
                   what=f"queue {queue}'s deserved share {deserved}")
    # pg-2 fits its queue's share and is placed; pg-1 (cpu 5 > 3) waits for its queue's.
    wait_until(lambda: bound_count(kube, namespace, "pg-2") == 1, what="pg-2 placed")
    assert bound_count(kube, namespace, "pg-1") == 0
    sched.watcher.check_settled()


def test_scheduling_starts_before_the_default_queue_is_created(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler
        ) -> None:
    """The default Queue is created beside scheduling, not before it: while its creation
    is held, a pod is bound all the same, and the Queue appears once the hold ends."""
    make_node(f"qn-{uuid.uuid4().hex[:6]}", cpu="2", memory="64Gi")
    with contextlib.suppress(ApiError):
        kube.delete(f"{QUEUES}/default")
    wait_until(lambda: not exists(kube, f"{QUEUES}/default"), what="no default Queue")
    sched = start_scheduler(start=False)
    held, release = threading.Event(), threading.Event()
    client = sched.service.client
    create = client.create

    def held_create(path: str, body: Any, **kwargs: Any) -> Any:
        if path == QUEUES:
            held.set()
            release.wait(60)
        return create(path, body, **kwargs)

    client.create = held_create  # type: ignore[method-assign]
    starting = threading.Thread(target=sched.start, daemon=True)
    starting.start()
    try:
        create_pod(kube, namespace, pod_body("early", scheduler=sched.name))
        wait_until(lambda: kube.get(f"/api/v1/namespaces/{namespace}/pods/early")["spec"]
                   .get("nodeName"), what="a bind while the default Queue's creation waits")
        assert held.is_set() and not exists(kube, f"{QUEUES}/default")
    finally:
        release.set()
        starting.join(60)
    wait_until(lambda: exists(kube, f"{QUEUES}/default"), what="the default Queue")
