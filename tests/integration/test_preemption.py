"""Priority preemption against the real API server. No kubelet runs, so the test finishes
the victims' graceful deletions itself (force-deleting a pod once it is terminating), as a
kubelet would, in the open: see ``Kubelet``."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    create_priority_class,
    events_for,
    list_pods,
    placement,
    pod_body,
    podgroups_path,
    wait_until,
)
from tests.integration.test_observability import _scrape, _value

StartScheduler = Callable[..., Any]
LOW, HIGH, POLITE = "cs-test-low", "cs-test-high", "cs-test-high-never"


class Kubelet:
    """Finishes graceful deletions of bound pods, as the kubelets of their nodes would, and
    remembers what each victim carried when it was terminating."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.terminated: dict[str, dict[str, Any]] = {}

    def finish(self) -> None:
        for pod in list_pods(self.kube, self.namespace):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and meta["name"] not in self.terminated:
                self.terminated[meta["name"]] = pod
                try:
                    self.kube.request(
                        "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{meta['name']}",
                        body={"gracePeriodSeconds": 0})
                except ApiError as err:
                    if not err.not_found:
                        raise

    def until(self, condition: Callable[[], bool], what: str) -> None:
        def step() -> bool:
            self.finish()
            return condition()
        wait_until(step, what=what)


def _classes(kube: KubeClient) -> None:
    create_priority_class(kube, LOW, 100)
    create_priority_class(kube, HIGH, 100_000)
    try:  # the pods' preemptionPolicy comes from their PriorityClass
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": POLITE}, "value": 100_000, "preemptionPolicy": "Never"})
    except ApiError as err:
        if not err.conflict:
            raise


def _gang(kube: KubeClient, namespace: str, scheduler: str, group: str, size: int,
          min_member: int, priority_class: str, cpu: str = "1") -> None:
    create_podgroup(kube, namespace, group, min_member)
    for i in range(size):
        body = pod_body(f"{group}-{i}", scheduler=scheduler, cpu=cpu, group=group,
                        priority_class=priority_class)
        body["spec"]["terminationGracePeriodSeconds"] = 30  # victims terminate gracefully
        create_pod(kube, namespace, body)


def _node(make_node: Any, namespace: str, cpu: str) -> str:
    name = f"pre-{uuid.uuid4().hex[:6]}"
    make_node(name, cpu=cpu, memory="64Gi")
    return name


def _gone(kube: KubeClient, namespace: str, prefix: str) -> list[str]:
    return [p["metadata"]["name"] for p in list_pods(kube, namespace)
            if p["metadata"]["name"].startswith(prefix)]


def _node_full_of_a_low_gang(kube: KubeClient, namespace: str, make_node: Any,
                             start_scheduler: StartScheduler, cpu: int,
                             min_member: int) -> tuple[Any, Kubelet]:
    """One node of ``cpu`` cpu filled by gang "low" (one 1-cpu member per cpu)."""
    _classes(kube)
    _node(make_node, namespace, str(cpu))
    sched = start_scheduler()
    kubelet = Kubelet(kube, namespace)
    _gang(kube, namespace, sched.name, "low", cpu, min_member, LOW)
    wait_until(lambda: bound_count(kube, namespace, "low") == cpu, what="the low gang")
    return sched, kubelet


def test_a_high_gang_evicts_a_whole_low_gang_and_is_bound(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched, kubelet = _node_full_of_a_low_gang(kube, namespace, make_node, start_scheduler,
                                              cpu=4, min_member=4)
    node = placement(kube, namespace)["low-0"]
    _gang(kube, namespace, sched.name, "high", 2, 2, HIGH)
    _while_the_victims_terminate(kube, namespace, sched, node)
    kubelet.until(lambda: bound_count(kube, namespace, "high") == 2, what="the high gang")
    assert sorted(kubelet.terminated) == [f"low-{i}" for i in range(4)]  # all of it
    for victim in kubelet.terminated.values():
        target = next(c for c in victim["status"]["conditions"]
                      if c["type"] == "DisruptionTarget")
        assert target["status"] == "True" and target["reason"] == "PreemptionByScheduler"
    wait_until(lambda: any(e.get("reason") == "Preempted" and
                           f"gang {namespace}/high" in e.get("message", "")
                           for e in events_for(kube, namespace, "low-0")),
               what="a Preempted event naming the preemptor gang")
    sched.watcher.check_settled()


def _while_the_victims_terminate(kube: KubeClient, namespace: str, sched: Any,
                                 node: str) -> None:
    """What tells people that gang "high" is preempting, checked while its victims are
    still terminating (they stay so until the test's Kubelet finishes them): the members'
    nominated node, the PodGroup's and the pods' conditions, explain, and the metrics."""
    wait_until(lambda: sum(1 for p in list_pods(kube, namespace)
                           if p["metadata"]["name"].startswith("low-")
                           and p["metadata"].get("deletionTimestamp")) == 4,
               what="all four victims terminating")
    wait_until(lambda: all((kube.get(f"/api/v1/namespaces/{namespace}/pods/high-{i}")
                            .get("status") or {}).get("nominatedNodeName") == node
                           for i in range(2)),
               what="both preemptor members nominated to the victims' node")
    wait_until(lambda: "hold the room they free" in _condition(kube, namespace, "high",
                                                               "Unschedulable"),
               what="the PodGroup's condition saying it is preempting")
    assert "preempting 4 pod(s)" in _condition(kube, namespace, "high", "Unschedulable")
    wait_until(lambda: any("preempt" in _why(kube, namespace, f"high-{i}") for i in range(2)),
               what="a member's PodScheduled condition saying it waits for its victims")
    text = explain(kube, namespace, "high")
    assert text.count(f"nominated to {node}") == 2, text
    metrics = _scrape(sched)
    assert _value(metrics, "scheduler_preemption_attempts_total") >= 1
    assert _value(metrics, "coscheduling_gang_preemptions_total") == 1
    assert _value(metrics, "scheduler_preemption_victims_count") == 1
    assert _value(metrics, "scheduler_preemption_victims_sum") == 4


def test_a_high_gang_takes_exactly_two_surplus_members(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched, kubelet = _node_full_of_a_low_gang(kube, namespace, make_node, start_scheduler,
                                              cpu=6, min_member=2)
    _gang(kube, namespace, sched.name, "high", 2, 2, HIGH)
    kubelet.until(lambda: bound_count(kube, namespace, "high") == 2, what="the high gang")
    assert len(kubelet.terminated) == 2
    assert bound_count(kube, namespace, "low") == 4
    sched.watcher.check_settled()


def test_no_eviction_when_it_would_not_help_or_the_policy_is_never(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched, kubelet = _node_full_of_a_low_gang(kube, namespace, make_node, start_scheduler,
                                              cpu=4, min_member=4)
    _gang(kube, namespace, sched.name, "huge", 5, 5, HIGH)  # 5 cpu > the node's 4
    _gang(kube, namespace, sched.name, "polite", 2, 2, POLITE)
    wait_until(lambda: all("cannot be placed" in _why(kube, namespace, f"{g}-0")
                           for g in ("huge", "polite")),
               what="both high gangs judged unschedulable")
    kubelet.finish()
    assert kubelet.terminated == {}
    assert bound_count(kube, namespace, "low") == 4
    assert bound_count(kube, namespace, "huge") == bound_count(kube, namespace, "polite") == 0


def _condition(kube: KubeClient, namespace: str, group: str, kind: str) -> str:
    status = kube.get(f"{podgroups_path(namespace)}/{group}").get("status") or {}
    return next((str(c.get("message", "")) for c in status.get("conditions") or ()
                 if c.get("type") == kind), "")


def _why(kube: KubeClient, namespace: str, name: str) -> str:
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return str(condition.get("message", ""))
    return ""


def test_a_plain_high_pod_evicts_exactly_one_and_a_budget_is_respected(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    _classes(kube)
    first, second = _node(make_node, namespace, "1"), _node(make_node, namespace, "1")
    sched = start_scheduler()
    kubelet = Kubelet(kube, namespace)
    for name, app, node in (("guarded", "db", first), ("free", "web", second)):
        body = pod_body(name, scheduler=sched.name, cpu="1", priority_class=LOW,
                        labels={"app": app}, node_name=node)
        body["spec"]["terminationGracePeriodSeconds"] = 30
        create_pod(kube, namespace, body)
    kube.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    # Without kubelets no pod is Ready, so the disruption controller allows no disruption.
    wait_until(lambda: sched.service.scheduler.listers.pdbs.get(f"{namespace}/db") is not None,
               what="the budget in the scheduler's cache")
    create_pod(kube, namespace, pod_body("high", scheduler=sched.name, cpu="1",
                                         priority_class=HIGH))
    wait_until(lambda: (kube.get(f"/api/v1/namespaces/{namespace}/pods/high").get("status")
                        or {}).get("nominatedNodeName") == second,
               what="the high pod nominated to the unguarded pod's node")
    kubelet.until(lambda: placement(kube, namespace).get("high") == second,
                  what="the high pod bound where the unguarded pod was")
    assert list(kubelet.terminated) == ["free"]
    assert _gone(kube, namespace, "guarded") == ["guarded"]


def test_a_recreated_member_gets_its_held_slot_and_a_plain_pod_keeps_waiting(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    _classes(kube)
    node = _node(make_node, namespace, "4")
    sched = start_scheduler()
    _gang(kube, namespace, sched.name, "g", 4, 4, LOW)
    wait_until(lambda: bound_count(kube, namespace, "g") == 4, what="the gang")
    create_pod(kube, namespace, pod_body("plain", scheduler=sched.name, cpu="1"))
    wait_until(lambda: "Insufficient cpu" in _why(kube, namespace, "plain"),
               what="the plain pod waiting for room")
    # A member dies (its kubelet would finish the deletion: grace 0 here) and its
    # controller recreates it 3 s later.
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/g-1",
                 body={"gracePeriodSeconds": 0})
    wait_until(lambda: "room of" in _condition(kube, namespace, "g", "ReplacementHeld"),
               what="the PodGroup saying whose room is held")
    time.sleep(3)  # the scenario's delay, not a bound on the scheduler
    body = pod_body("g-1-again", scheduler=sched.name, cpu="1", group="g",
                    priority_class=LOW)
    create_pod(kube, namespace, body)
    wait_until(lambda: placement(kube, namespace).get("g-1-again") == node,
               what="the replacement member on its held node")
    assert not placement(kube, namespace).get("plain")
    wait_until(lambda: "Insufficient cpu" in _why(kube, namespace, "plain"),
               what="the plain pod still waiting")
    sched.watcher.check_settled()


def test_randomized_priority_waves_never_break_a_gang_nor_evict_for_nothing(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """Waves of random gangs, each wave of a higher priority than the last, on a small
    cluster. The invariant watcher checks every pod event (no node over-committed, no pod
    bound twice, no gang bound below minMember); at the end every gang is bound whole or
    not at all, and every pod evicted made room for a preemptor that was placed (or was
    itself evicted by a later, higher wave)."""
    rng = random.Random(11)
    classes = [("cs-test-wave-0", 1000), ("cs-test-wave-1", 2000), ("cs-test-wave-2", 3000)]
    for name, value in classes:
        create_priority_class(kube, name, value)
    for _ in range(3):
        _node(make_node, namespace, "4")
    sched = start_scheduler({"podInitialBackoffSeconds": 0.2, "podMaxBackoffSeconds": 1})
    kubelet = Kubelet(kube, namespace)
    gangs: dict[str, int] = {}
    for wave, (priority_class, _) in enumerate(classes):
        for g in range(rng.randint(2, 4)):
            name, size = f"w{wave}g{g}", rng.randint(1, 4)
            gangs[name] = rng.randint(1, size)
            _gang(kube, namespace, sched.name, name, size, gangs[name], priority_class)
        kubelet.until(lambda: _decided(kube, namespace, gangs),
                      what=f"wave {wave}: every gang placed or judged, no victim left")
    sched.watcher.check_settled()
    assert kubelet.terminated, "the waves preempted nothing: the scenario tests nothing"
    evicted_groups = {name.rsplit("-", 1)[0] for name in kubelet.terminated}
    for name, victim in kubelet.terminated.items():
        message = next(c["message"] for c in victim["status"]["conditions"]
                       if c["type"] == "DisruptionTarget")
        preemptor = message.rsplit(" ", 1)[-1].split("/", 1)[1]  # "... gang ns/w2g0"
        assert (bound_count(kube, namespace, preemptor) >= gangs[preemptor]
                or preemptor in evicted_groups), f"{name} evicted for {preemptor}, not placed"


def _decided(kube: KubeClient, namespace: str, gangs: dict[str, int]) -> bool:
    pods = list_pods(kube, namespace)
    if any(p["metadata"].get("deletionTimestamp") for p in pods):
        return False
    for group, minimum in gangs.items():
        members = [p for p in pods if p["metadata"]["name"].startswith(f"{group}-")]
        bound = sum(1 for p in members if p["spec"].get("nodeName"))
        judged = all(p["spec"].get("nodeName") or any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in (p.get("status") or {}).get("conditions") or ()) for p in members)
        if bound < minimum and not judged:
            return False
    return True
