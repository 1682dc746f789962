"""Pod semantics against a real kube-apiserver (issue 14): what is not implemented is refused
out loud by field, gated members are not gang members, preferred node affinity steers.

Every pod carries a node selector on a label only this test's nodes have, so nodes other
tests left behind cannot change where pods go.
"""

from __future__ import annotations

from typing import Any

from coscheduling.cluster.client import KubeClient
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    events_for,
    placement,
    pod_condition,
    podgroups_path,
    wait_until,
)
from tests.integration.test_pod_constraints import StartScheduler, _pod, _pool

NOT_PLACED = "not implemented by this scheduler; the pod is not placed"


def _refused(kube: KubeClient, namespace: str, name: str, message: str, *,
             exact: bool = True) -> None:
    """The pod stays unbound with PodScheduled=False and a FailedScheduling event, both
    carrying ``message`` (or, not ``exact``, a message that contains it)."""

    def says(text: str) -> bool:
        return text == message if exact else message in text

    def condition_says() -> bool:
        condition = pod_condition(kube, namespace, name, "PodScheduled")
        return (condition.get("status"), condition.get("reason")) == (
            "False", "Unschedulable") and says(condition.get("message", ""))

    def failed_scheduling() -> list[dict[str, Any]]:
        return [e for e in events_for(kube, namespace, name)
                if e.get("reason") == "FailedScheduling"]

    wait_until(condition_says, what=f"PodScheduled=False on {name} saying {message!r}")
    events = wait_until(failed_scheduling, what=f"a FailedScheduling event on {name}")
    assert all(e["type"] == "Warning" and says(e["message"]) for e in events), events
    assert len({e["message"] for e in events}) == len(events), "a message reported twice"
    assert placement(kube, namespace)[name] == ""


def test_pod_whose_resource_claim_is_missing_is_refused_naming_it(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    make_node(f"dra-{pool}", labels={"test-pool": pool})
    create_pod(kube, namespace, _pod("dra", sched.name, pool, resourceClaims=[
        {"name": "gpu", "resourceClaimName": "gpu-claim"}]))
    create_pod(kube, namespace, _pod("plain", sched.name, pool))
    wait_until(lambda: placement(kube, namespace).get("plain"), what="the plain pod bound")
    _refused(kube, namespace, "dra", 'resourceclaim "gpu-claim" not found')


def test_pod_with_a_missing_claim_stays_pending_and_its_event_names_the_claim(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    make_node(f"pvc-{pool}", labels={"test-pool": pool})
    volumes = [{"name": "scratch", "emptyDir": {}},
               {"name": "data", "persistentVolumeClaim": {"claimName": "missing-data"}}]
    create_pod(kube, namespace, _pod("claims", sched.name, pool, volumes=volumes))
    # Whichever plugin stops it (volume binding, or the refusal while there is none), the
    # claim is named.
    _refused(kube, namespace, "claims", "missing-data", exact=False)


def test_gated_member_is_not_counted_and_the_gang_runs_once_ungated(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    make_node(f"gate-{pool}", labels={"test-pool": pool})
    create_podgroup(kube, namespace, "gated", 3)
    for i in range(2):
        create_pod(kube, namespace, _pod(f"gated-{i}", sched.name, pool, group="gated"))
    create_pod(kube, namespace, _pod("gated-2", sched.name, pool, group="gated",
                                     schedulingGates=[{"name": "example.com/quota"}]))
    group_path = f"{podgroups_path(namespace)}/gated"
    waiting = ("waiting for member pods: 2 of minMember 3 exist (1 more held by "
               "spec.schedulingGates, not counted)")

    def status_waits() -> bool:
        status = kube.get(group_path).get("status") or {}
        return status.get("phase") == "PreScheduling" and any(
            c.get("message") == waiting for c in status.get("conditions") or ())

    wait_until(status_waits, what="PodGroup status PreScheduling, the gated pod not counted")
    def held_by_gates(name: str) -> bool:
        condition = pod_condition(kube, namespace, name, "PodScheduled")
        return condition.get("reason") == "SchedulingGated" and \
            "waiting for member pods: 2 of minMember 3 exist" in condition.get("message", "")

    # The ungated members wait for the gates, not for room: no failure is reported (their
    # PodScheduled says SchedulingGated, as the gated pod's does), so no autoscaler adds a
    # node for them.
    for name in ("gated-0", "gated-1"):
        wait_until(lambda name=name: held_by_gates(name),
                   what=f"{name} to say it waits for its gated member")
    assert bound_count(kube, namespace, "gated") == 0
    # The gated pod itself is not tried: the API server reports it SchedulingGated.
    assert pod_condition(kube, namespace, "gated-2", "PodScheduled").get(
        "reason") == "SchedulingGated"
    # Waiting for members is not a failed attempt: the gang is not frozen.
    conditions = (kube.get(group_path).get("status") or {}).get("conditions") or ()
    assert [(c["type"], c["reason"]) for c in conditions] == [
        ("Unschedulable", "SchedulingGated")], conditions
    # Reported once, not once per retry. (A member tried before the gated pod existed may
    # also have said, as a failure, that its gang lacked a member: that was true then.)
    for name in ("gated-0", "gated-1"):
        waiting = [e["message"] for e in events_for(kube, namespace, name)
                   if e.get("reason") == "Waiting"]
        assert len(waiting) == len(set(waiting)) >= 1, waiting

    kube.patch(f"/api/v1/namespaces/{namespace}/pods/gated-2",
               {"spec": {"schedulingGates": None}})
    wait_until(lambda: bound_count(kube, namespace, "gated") == 3,
               what="all 3 members bound once the gate is removed")
    wait_until(lambda: (kube.get(group_path).get("status") or {}).get("phase") in (
        "Scheduled", "Running"), what="the PodGroup Scheduled")
    sched.watcher.check_settled()


def test_preferred_node_affinity_steers_a_pod(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    for i in range(3):
        make_node(f"pref-{pool}-{i}", labels={"test-pool": pool,
                                              "disk": "ssd" if i == 1 else "hdd"})
    prefer = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}
    for i in range(3):
        create_pod(kube, namespace, _pod(f"pref-{i}", sched.name, pool, affinity=prefer))
    wait_until(lambda: all(placement(kube, namespace).get(f"pref-{i}") for i in range(3)),
               what="3 pods bound")
    assert set(placement(kube, namespace).values()) == {f"pref-{pool}-1"}


def test_image_locality_steers_a_pod_to_the_node_holding_its_image(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    names = [f"img-{pool}-{i}" for i in range(3)]
    for name in names:
        make_node(name, labels={"test-pool": pool})
    image = f"registry.example/train-{pool}:1"
    kube.patch(f"/api/v1/nodes/{names[2]}/status", {"status": {"images": [
        {"names": [image], "sizeBytes": 900 * 1024 * 1024}]}})
    cache = sched.service.scheduler.cache

    def seen() -> bool:
        info = cache.node(names[2])
        return info is not None and info.node is not None and image in info.node.images

    wait_until(seen, what="the scheduler to see the node's image")
    # Three pods: without the image's pull, least-allocated scoring would spread them.
    for i in range(3):
        body = _pod(f"trainer-{i}", sched.name, pool)
        body["spec"]["containers"][0]["image"] = image
        create_pod(kube, namespace, body)
    wait_until(lambda: all(placement(kube, namespace).get(f"trainer-{i}") for i in range(3)),
               what="3 pods bound")
    assert set(placement(kube, namespace).values()) == {names[2]}


def test_pod_level_requests_count_on_a_real_api_server(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = _pool()
    make_node(f"plr-{pool}", cpu="2", labels={"test-pool": pool})
    create_pod(kube, namespace, _pod("big", sched.name, pool,
                                     resources={"requests": {"cpu": "3"}}))
    create_pod(kube, namespace, _pod("small", sched.name, pool,
                                     resources={"requests": {"cpu": "1500m"}}))
    wait_until(lambda: placement(kube, namespace).get("small"), what="the small pod bound")
    wait_until(lambda: "Insufficient cpu" in pod_condition(
        kube, namespace, "big", "PodScheduled").get("message", ""),
        what="the big pod refused for cpu: its pod-level request, not its container's 100m")
    assert placement(kube, namespace)["big"] == ""
