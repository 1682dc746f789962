"""Whole-gang scale-up and the scale-down guard against the real API server.

The autoscaler's part is played by :class:`StandInAutoscaler` (tests/integration/
autoscaler.py: the real cluster-autoscaler module is not served to this project), which
answers ProvisioningRequests with new Node objects and removes idle nodes, honouring the
scale-down-disabled annotation. Nodes are API objects without kubelets.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import pytest
import yaml

from coscheduling.api.runtimes import SCALE_UP_WAIT_ANNOTATION
from coscheduling.api.times import parse_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from coscheduling.provisioning.guard import GUARDED_BY, SCALE_DOWN_DISABLED
from coscheduling.provisioning.requests import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    requests_path,
)
from coscheduling.whatif.derive import derive
from coscheduling.whatif.simulate import FITS_AFTER_SCALE_UP, simulate
from tests.integration.autoscaler import (
    GROUP_LABEL,
    NodeGroup,
    StandInAutoscaler,
    install_provisioning_crd,
)
from tests.integration.kube import (
    PG_API,
    create_pod,
    create_podgroup,
    create_priority_class,
    delete_podgroup,
    events_for,
    exists,
    list_pods,
    pod_body,
    start_waiting_gang,
    wait_until,
)

StartScheduler = Callable[..., Any]
GPU = "nvidia.com/gpu"
PG = "/apis/batch.scheduler.tencent.com/v1/namespaces/{ns}/podgroups/{name}"
SCALE_UP = {"pluginConfig": [{"name": "Coscheduling", "args": {
    "freezeSeconds": 2, "scaleUp": {"enabled": True, "guardNodes": True, "retrySeconds": 2}}}]}
GROUPS = [NodeGroup("cpu", {"cpu": "4", "memory": "16Gi"}, max_size=3),
          NodeGroup("gpu", {"cpu": "16", "memory": "64Gi", GPU: "8"}, max_size=2)]
HELD_GPU = NodeGroup("held-gpu", {"cpu": "16", "memory": "64Gi", GPU: "8"}, max_size=2)


@pytest.fixture
def provisioning_api(kube: KubeClient) -> None:
    install_provisioning_crd(kube)


def _group(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(PG.format(ns=namespace, name=name))


def _condition(group: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (group.get("status") or {}).get("conditions") or ()
             if c.get("type") == kind]
    return found[0] if found else {}


class Poller:
    """A thread that calls :meth:`poll` every ``interval`` seconds while the block runs."""

    interval = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and self.poll():
            pass

    def poll(self) -> bool:
        """One look; False ends the polling."""
        raise NotImplementedError


class Timeline(Poller):
    """What the gang's status and its request said, each change once, in order."""

    def __init__(self, kube: KubeClient, namespace: str, group: str) -> None:
        super().__init__()
        self.kube, self.namespace, self.group = kube, namespace, group
        self.seen: list[str] = []
        self._started = time.monotonic()

    def poll(self) -> bool:
        group = _group(self.kube, self.namespace, self.group)
        status = group.get("status") or {}
        request = status.get("provisioningRequest") or {}
        scale = _condition(group, "ScaleUp")
        bound = sum(1 for p in list_pods(self.kube, self.namespace)
                    if p["spec"].get("nodeName")
                    and (p["metadata"].get("labels") or {}).get(
                        "group.batch.scheduler.tencent.com") == self.group)
        line = (f"phase={status.get('phase', '')} request={request.get('name', '-')}:"
                f"{request.get('state', '-')} ScaleUp={scale.get('status', '-')}/"
                f"{scale.get('reason', '-')} bound={bound}")
        if not self.seen or self.seen[-1].split("] ", 1)[1] != line:
            self.seen.append(f"[{time.monotonic() - self._started:5.1f}s] {line}")
        return True


def _in_cache(sched: Any, namespace: str, name: str) -> None:
    """Wait until the scheduler's cache holds the bound pod (made before the gang, so
    that the gang is never tried against a node that looks emptier than it is)."""
    cache = sched.service.scheduler.cache
    wait_until(lambda: any(p.namespace == namespace and p.name == name and p.node_name
                           for p in cache.pods()), what=f"{name} in the scheduler's cache")


class Vanishing(Poller):
    """When an object was first seen gone (epoch seconds, 0 while it exists)."""

    interval = 0.1

    def __init__(self, kube: KubeClient, path: str) -> None:
        super().__init__()
        self.kube, self.path, self.at = kube, path, 0.0

    def poll(self) -> bool:
        if not exists(self.kube, self.path):
            self.at = time.time()
            return False
        return True


def test_gang_gets_the_nodes_it_needs_in_one_request_and_binds_whole(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    """8 one-GPU members, room for 5: one request for the 8, one GPU node added, all bound."""
    sched = start_scheduler(SCALE_UP)
    make_node("gpu-0", cpu="16", memory="64Gi", extended={GPU: "8"},
              labels={GROUP_LABEL: "gpu"})
    create_pod(kube, namespace, pod_body("filler", scheduler=sched.name, cpu="1",
                                         extra={GPU: "3"}, node_name="gpu-0"))
    _in_cache(sched, namespace, "filler")
    with StandInAutoscaler(kube, GROUPS) as autoscaler, \
            Timeline(kube, namespace, "train") as timeline:
        create_podgroup(kube, namespace, "train", 8)
        for i in range(8):
            create_pod(kube, namespace, pod_body(f"train-{i}", scheduler=sched.name,
                                                 cpu="1", group="train", extra={GPU: "1"}))

        def members() -> list[dict[str, Any]]:
            return [p for p in list_pods(kube, namespace)
                    if p["metadata"]["name"].startswith("train-")]

        try:
            wait_until(lambda: all(p["spec"].get("nodeName") for p in members()), timeout=60,
                       what="all 8 members bound")
            wait_until(lambda: (_group(kube, namespace, "train").get("status") or {})
                       .get("provisioningRequest", {}).get("state") == "Provisioned",
                       what="the request's state in the PodGroup status")
        finally:
            print("\n".join(["", "timeline of PodGroup train:", *timeline.seen]))
            print("decisions:", autoscaler.decisions)
    requests = kube.get(requests_path(namespace)).get("items") or []
    assert [r["metadata"]["name"] for r in requests] == ["train-gang-1"]
    assert [s["count"] for s in requests[0]["spec"]["podSets"]] == [8]
    assert requests[0]["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    assert list(autoscaler.decisions) == [f"{namespace}/train-gang-1"]
    assert autoscaler.decisions[f"{namespace}/train-gang-1"].nodes == ["gpu-1"]
    placed = {p["spec"]["nodeName"] for p in members()}
    assert placed == {"gpu-0", "gpu-1"}
    for pod in members():
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations.get(CONSUME_ANNOTATION) == "train-gang-1"
        assert annotations.get(CLASS_ANNOTATION) == \
            "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    group = _group(kube, namespace, "train")
    assert _condition(group, "ScaleUp")["reason"] == "Provisioned"

    def reasons() -> list[str]:
        return [e["reason"] for e in sorted(events_for(kube, namespace, "train"),
                                            key=lambda e: e["metadata"]["creationTimestamp"])]

    wait_until(lambda: {"ScaleUpRequested", "ScaleUpProvisioned"} <= set(reasons()),
               what="the gang's scale-up events")
    for event in sorted(events_for(kube, namespace, "train"),
                        key=lambda e: e["metadata"]["creationTimestamp"]):
        print(f"event {event['metadata']['creationTimestamp']} {event['reason']}: "
              f"{event['message']}")
    for condition in requests[0]["status"]["conditions"]:
        print(f"request condition {condition['lastTransitionTime']} {condition['type']}="
              f"{condition['status']}: {condition.get('message', '')}")
    told = explain(kube, namespace, "train")
    print(told)
    assert "Scale-up: ProvisioningRequest train-gang-1 for 8 member(s), attempt 1" in told
    assert ": Provisioned since " in told
    delete_podgroup(kube, namespace, "train")
    wait_until(lambda: not exists(kube, requests_path(namespace, "train-gang-1")),
               what="the request deleted with its PodGroup")


class SmallPods(Poller):
    """A stream of small pods (one GPU each), one every ``interval`` seconds."""

    interval = 0.3

    def __init__(self, kube: KubeClient, namespace: str, scheduler: str, first: int) -> None:
        super().__init__()
        self.kube, self.namespace, self.scheduler = kube, namespace, scheduler
        self.made = first

    def poll(self) -> bool:
        create_pod(self.kube, self.namespace, small_pod(self.made, self.scheduler))
        self.made += 1
        return True


def small_pod(index: int, scheduler: str) -> dict[str, Any]:
    return pod_body(f"small-{index}", scheduler=scheduler, cpu="100m", extra={GPU: "1"})


def test_provisioned_room_is_held_for_the_gang_against_a_stream_of_small_pods(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    """The request is Provisioned before its node joins; small pods older than the gang
    (same priority: they go first in the queue) and more arriving while the node joins
    would fit on it, but it is held for the gang, which is bound whole there. (A node group
    of its own: a node name another test used may still carry that test's pods.)"""
    sched = start_scheduler(SCALE_UP)
    make_node("held-gpu-0", cpu="16", memory="64Gi", extended={GPU: "8"},
              labels={GROUP_LABEL: "held-gpu"})
    create_pod(kube, namespace, pod_body("filler", scheduler=sched.name, cpu="1",
                                         extra={GPU: "8"}, node_name="held-gpu-0"))
    _in_cache(sched, namespace, "filler")
    for i in range(4):  # waiting for room before the gang exists
        create_pod(kube, namespace, small_pod(i, sched.name))
    join = threading.Event()
    with StandInAutoscaler(kube, [HELD_GPU], join=join) as autoscaler:
        create_podgroup(kube, namespace, "held", 2)
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"held-{i}", scheduler=sched.name,
                                                 cpu="1", group="held", extra={GPU: "4"}))
        wait_until(lambda: (_group(kube, namespace, "held").get("status") or {})
                   .get("provisioningRequest", {}).get("state") == "Provisioned",
                   what="the scheduler saw the request Provisioned (its node not joined)")
        assert not exists(kube, "/api/v1/nodes/held-gpu-1")
        with SmallPods(kube, namespace, sched.name, first=4) as stream:
            join.set()  # the node boots and joins while small pods keep coming
            wait_until(lambda: exists(kube, "/api/v1/nodes/held-gpu-1"), what="held-gpu-1 joined")
            wait_until(lambda: stream.made >= 10, what="six more small pods made")

            def bound() -> dict[str, str]:
                return {p["metadata"]["name"]: p["spec"].get("nodeName", "")
                        for p in list_pods(kube, namespace)}

            try:
                wait_until(lambda: bound().get("held-0") and bound().get("held-1"),
                           what="the gang bound")
            finally:
                print("bound:", {name: node for name, node in bound().items() if node})
                for event in events_for(kube, namespace, "held"):
                    print("event", event["reason"], event["message"])
    assert autoscaler.decisions[f"{namespace}/held-gang-1"].nodes == ["held-gpu-1"]
    placed = bound()
    assert (placed["held-0"], placed["held-1"]) == ("held-gpu-1", "held-gpu-1")
    assert not [name for name, node in placed.items() if name.startswith("small-") and node]
    held = [e for e in events_for(kube, namespace, "held") if e["reason"] == "ScaleUpHeld"]
    assert held and "held-gpu-1" in held[0]["message"]


def test_gang_no_node_shape_can_hold_asks_for_nothing_and_says_why(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler(SCALE_UP)
    make_node("big-0", cpu="16", memory="64Gi", extended={GPU: "8"})
    with StandInAutoscaler(kube, GROUPS) as autoscaler:
        create_podgroup(kube, namespace, "huge", 2)
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"huge-{i}", scheduler=sched.name,
                                                 cpu="1", group="huge", extra={GPU: "16"}))
        condition = wait_until(lambda: _condition(_group(kube, namespace, "huge"), "ScaleUp"),
                               what="the ScaleUp condition of the gang")
        scans = autoscaler.scans
        wait_until(lambda: autoscaler.scans >= scans + 3, what="three more autoscaler scans")
    assert condition["status"] == "False" and condition["reason"] == "NoNodeShapeFits"
    assert "could hold member huge-" in condition["message"]
    assert "nvidia.com/gpu 16" in condition["message"]
    assert (kube.get(requests_path(namespace)).get("items") or []) == []
    assert autoscaler.decisions == {} and autoscaler.created == {}


def test_failed_request_leaves_the_gang_waiting_with_the_reason_and_is_asked_again(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    """The GPU group may grow by one node; the gang needs two: the autoscaler says Failed,
    the gang binds nothing, the request is deleted and asked again after the backoff."""
    sched = start_scheduler(SCALE_UP)
    make_node("gpu-f0", cpu="16", memory="64Gi", extended={GPU: "8"},
              labels={GROUP_LABEL: "gpu"})
    create_pod(kube, namespace, pod_body("filler", scheduler=sched.name, cpu="1",
                                         extra={GPU: "1"}, node_name="gpu-f0"))
    _in_cache(sched, namespace, "filler")
    with StandInAutoscaler(kube, GROUPS):
        create_podgroup(kube, namespace, "wide", 2)
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"wide-{i}", scheduler=sched.name,
                                                 cpu="1", group="wide", extra={GPU: "8"}))

        def failed_with_retry() -> dict[str, Any]:
            status = _group(kube, namespace, "wide").get("status") or {}
            request = status.get("provisioningRequest") or {}
            return status if request.get("state") == "Failed" and "retryAt" in request else {}

        failed = wait_until(failed_with_retry, what="the request Failed, with its retry time")
        again = wait_until(lambda: (_group(kube, namespace, "wide").get("status") or {})
                           .get("provisioningRequest", {}).get("attempt", 0) >= 2
                           and _group(kube, namespace, "wide")["status"]["provisioningRequest"],
                           what="the request asked again")
        wait_until(lambda: not exists(kube, requests_path(namespace, "wide-gang-1")),
                   what="the failed request deleted")
    request = failed["provisioningRequest"]
    assert (request["name"], request["state"]) == ("wide-gang-1", "Failed")
    assert "gpu is at its maximum size 2" in request["message"]
    assert request["retryAt"] > request["since"]
    assert again["requestedAt"] >= request["retryAt"]  # not before its backoff ran out
    condition = _condition({"status": failed}, "ScaleUp")
    assert condition["status"] == "False" and "asked again at" in condition["message"]
    assert not any(p["spec"].get("nodeName") for p in list_pods(kube, namespace)
                   if p["metadata"]["name"].startswith("wide-"))
    reasons = {e["reason"] for e in events_for(kube, namespace, "wide")}
    assert {"ScaleUpRequested", "ScaleUpFailed"} <= reasons


@pytest.fixture
def default_queue_wait(kube: KubeClient, crd: None) -> Iterator[Callable[[float], None]]:
    """Sets spec.scaleUpWaitSeconds on the ``default`` Queue (the scheduler made it at its
    start), and takes it off again after the test. The default queue, so that the victim
    (a pod without a group) and the gang share it: no reclaim between queues comes in."""
    path = f"/apis/{PG_API}/queues/default"

    def set_wait(seconds: float) -> None:
        wait_until(lambda: exists(kube, path), what="the default Queue")
        kube.patch(path, {"spec": {"scaleUpWaitSeconds": seconds}})

    yield set_wait
    with contextlib.suppress(ApiError):
        kube.patch(path, {"spec": {"scaleUpWaitSeconds": None}})


@pytest.mark.parametrize(("annotation", "queue_wait"), [
    ("4", None),  # the PodGroup's own wait
    (None, 4.0),  # its Queue's (the plugin's default is 0)
    ("4", 3600.0),  # the PodGroup's comes before its Queue's
], ids=["podgroup", "queue", "podgroup-over-queue"])
def test_gang_that_could_preempt_waits_its_delay_for_a_scale_up_first(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler, default_queue_wait: Callable[[float], None],
        annotation: str | None, queue_wait: float | None) -> None:
    """No autoscaler answers (a slow cloud): the gang asks, waits its 4 s (its PodGroup's,
    else its Queue's) without evicting anything, then preempts as before and is bound."""
    create_priority_class(kube, "scale-up-low", 100)
    create_priority_class(kube, "scale-up-high", 100_000)
    sched = start_scheduler(SCALE_UP)
    node = f"cpu-{namespace}"  # a name of its own: each row's pods linger a while after it
    make_node(node, cpu="4", labels={GROUP_LABEL: "cpu"})
    create_pod(kube, namespace, pod_body("victim", scheduler=sched.name, cpu="4",
                                         priority_class="scale-up-low", node_name=node))
    _in_cache(sched, namespace, "victim")
    if queue_wait is not None:
        default_queue_wait(queue_wait)
        queues = sched.service.scheduler.framework.instances["Proportion"].queues
        wait_until(lambda: getattr(queues.get("default"), "scale_up_wait_seconds", None)
                   == queue_wait, what="the scheduler's record of the default Queue's wait")
    annotations = {SCALE_UP_WAIT_ANNOTATION: annotation} if annotation is not None else {}

    def asked() -> dict[str, Any]:
        status = _group(kube, namespace, "urgent").get("status") or {}
        return dict(status.get("provisioningRequest") or {})

    with Vanishing(kube, f"/api/v1/namespaces/{namespace}/pods/victim") as gone:
        kube.create(f"/apis/{PG_API}/namespaces/{namespace}/podgroups", {
            "apiVersion": PG_API, "kind": "PodGroup",
            "metadata": {"name": "urgent", "annotations": annotations},
            "spec": {"minMember": 2}})
        for i in range(2):
            create_pod(kube, namespace, pod_body(
                f"urgent-{i}", scheduler=sched.name, cpu="1", group="urgent",
                priority_class="scale-up-high"))
        request = wait_until(asked, what="the gang's scale-up request")
        wait_until(lambda: gone.at, what="the victim evicted")
    wait_until(lambda: sum(1 for p in list_pods(kube, namespace)
                           if p["metadata"]["name"].startswith("urgent-")
                           and p["spec"].get("nodeName")) == 2,
               what="the gang bound after preempting")
    # Both stamps have whole seconds: the eviction came no earlier than the wait allows.
    assert gone.at >= parse_rfc3339(request["requestedAt"]) + 4 - 1
    assert not exists(kube, f"/api/v1/namespaces/{namespace}/pods/victim")
    # Placed without it: the request is withdrawn, so no node is added for nobody.
    wait_until(lambda: asked().get("state") == "Withdrawn", what="the request withdrawn")
    wait_until(lambda: not exists(kube, requests_path(namespace, request["name"])),
               what="the withdrawn request deleted")


def _annotated(kube: KubeClient, node: str) -> dict[str, str]:
    return dict(kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {})


def test_node_under_a_waiting_member_is_never_scaled_down_while_an_idle_one_is(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler(SCALE_UP, start=False)
    sched.start(loops=False)
    taint = {"key": "dedicated", "value": "other", "effect": "NoSchedule"}
    make_node("cpu-idle", cpu="4", labels={GROUP_LABEL: "cpu"}, taints=[taint])
    make_node("cpu-gang", cpu="4", labels={GROUP_LABEL: "cpu"})
    waiting = start_waiting_gang(kube, namespace, sched, "hold", size=3)
    assert len(waiting) == 2
    scheduler = sched.service.scheduler
    scheduler.housekeeping()  # marks the node the waiting members are on
    wait_until(lambda: _annotated(kube, "cpu-gang").get(SCALE_DOWN_DISABLED) == "true",
               what="the scale-down-disabled annotation on cpu-gang")
    with StandInAutoscaler(kube, GROUPS) as autoscaler:
        wait_until(lambda: "cpu-idle" in autoscaler.removed, what="the idle node removed")
        scans = autoscaler.scans
        wait_until(lambda: autoscaler.scans >= scans + 3, what="three more autoscaler scans")
        assert exists(kube, "/api/v1/nodes/cpu-gang") and autoscaler.removed == ["cpu-idle"]
        assert _annotated(kube, "cpu-gang").get(GUARDED_BY) == "true"
        delete_podgroup(kube, namespace, "hold")  # the waiting members are rejected
        wait_until(lambda: not list(scheduler.waiting_pods), what="the waiting members gone")

        def cleared() -> bool:
            scheduler.housekeeping()  # the loop's once a second (no loop runs here)
            return SCALE_DOWN_DISABLED not in _annotated(kube, "cpu-gang")

        wait_until(cleared, what="the annotation cleared")
        wait_until(lambda: "cpu-gang" in autoscaler.removed,
                   what="the node scaled down once no gang holds it")


def test_idle_node_held_by_a_reservation_is_never_scaled_down(
        kube: KubeClient, namespace: str, make_node: Any, provisioning_api: None,
        start_scheduler: StartScheduler) -> None:
    """A gang first in line holds an empty node while it waits for room on another: to the
    autoscaler the empty node is idle; the guard keeps it until the gang is bound there."""
    # reserveFromMembers 2: this gang of 2 reserves at once, not after reserveAfterSeconds.
    sched = start_scheduler({"pluginConfig": [{"name": "Coscheduling", "args": {
        "freezeSeconds": 2, "reserveFromMembers": 2, "scaleUp": {"guardNodes": True}}}]})
    make_node("cpu-busy", cpu="4", labels={GROUP_LABEL: "cpu"})
    make_node("cpu-free", cpu="4", labels={GROUP_LABEL: "cpu"})
    create_pod(kube, namespace, pod_body("filler", scheduler=sched.name, cpu="4",
                                         node_name="cpu-busy"))
    _in_cache(sched, namespace, "filler")
    create_podgroup(kube, namespace, "big", 2)
    for i in range(2):
        create_pod(kube, namespace, pod_body(f"big-{i}", scheduler=sched.name, cpu="4",
                                             group="big"))
    reserved = wait_until(lambda: _condition(_group(kube, namespace, "big"), "Reserved"),
                          what="the gang's reservation")
    assert "cpu-free" in reserved["message"]
    wait_until(lambda: _annotated(kube, "cpu-free").get(SCALE_DOWN_DISABLED) == "true",
               what="the scale-down-disabled annotation on the reserved node")
    with StandInAutoscaler(kube, GROUPS) as autoscaler:
        scans = autoscaler.scans
        wait_until(lambda: autoscaler.scans >= scans + 4, what="four more autoscaler scans")
        assert exists(kube, "/api/v1/nodes/cpu-free") and autoscaler.removed == []
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/filler",
                     body={"gracePeriodSeconds": 0})
        wait_until(lambda: {p["spec"].get("nodeName") for p in list_pods(kube, namespace)}
                   == {"cpu-busy", "cpu-free"}, what="the gang bound on both nodes")
        wait_until(lambda: SCALE_DOWN_DISABLED not in _annotated(kube, "cpu-free"),
                   what="the annotation cleared once the gang is bound")


def test_whatif_says_fits_after_scale_up_naming_the_node_shape_and_count(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler
) -> None:
    """The gang of 8 one-GPU members on a cluster with room for 5: FITS_AFTER_SCALE_UP,
    1 more node like shape-0; the same gang with 16-GPU members: not, and why."""
    sched = start_scheduler(SCALE_UP)
    make_node("shape-0", cpu="16", memory="64Gi", extended={GPU: "8"})
    create_pod(kube, namespace, pod_body("filler", scheduler=sched.name, cpu="1",
                                         extra={GPU: "3"}, node_name="shape-0"))
    scheduler = sched.service.scheduler
    _in_cache(sched, namespace, "filler")

    def manifest(gpus: int) -> bytes:
        return yaml.safe_dump_all([
            {"apiVersion": PG_API, "kind": "PodGroup",
             "metadata": {"name": "train", "namespace": namespace}, "spec": {"minMember": 8}},
            *(pod_body(f"train-{i}", scheduler=sched.name, cpu="1", group="train",
                       extra={GPU: str(gpus)}) | {"metadata": {
                           "name": f"train-{i}", "namespace": namespace,
                           "labels": {"group.batch.scheduler.tencent.com": "train"}}}
              for i in range(8))]).encode()

    answer = simulate(scheduler, derive(manifest(1), namespace))
    assert answer.verdict == FITS_AFTER_SCALE_UP
    assert answer.shortfall is not None
    assert answer.shortfall.nodes_needed.startswith("needs 1 more node(s) like shape-0")
    assert any("one ProvisioningRequest" in note for note in answer.notes)
    refused = simulate(scheduler, derive(manifest(16), namespace))
    assert refused.verdict == "NEVER"
    assert any("could hold member" in note for note in refused.notes)
