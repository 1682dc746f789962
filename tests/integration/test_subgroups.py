"""Gangs of gangs and gangs that change size (issue 26), on the real API server: per-role
minimums (ours and Volcano's minTaskMember), minGroups of subgroups placed whole, a
subgroup per rack, and minMember lowered while a gang waits or raised while it runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from coscheduling.api.membership import GROUP_NAME_ANNOTATION, TASK_SPEC_ANNOTATION
from coscheduling.api.podgroups import SUBGROUP_LABEL
from coscheduling.cluster.client import KubeClient
from tests.integration.kube import (
    PG_API,
    bound_count,
    create_pod,
    create_podgroup,
    list_pods,
    placement,
    pod_body,
    pod_condition,
    wait_until,
)

StartScheduler = Callable[..., Any]
ROLES = [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 4}]
REPLICAS = [{"name": f"r{i}", "minMember": 2} for i in range(3)]
RACK = "example.com/rack"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"


def _member(name: str, scheduler: str, sub: str, group: str = "job") -> dict[str, Any]:
    return pod_body(name, scheduler=scheduler, group=group, labels={SUBGROUP_LABEL: sub})


def _unschedulable(kube: KubeClient, namespace: str, pod: str, *words: str) -> bool:
    """The pod was judged and kept pending, with every one of ``words`` in the reason."""
    condition = pod_condition(kube, namespace, pod, "PodScheduled")
    message = condition.get("message", "")
    return condition.get("reason") == "Unschedulable" and all(w in message for w in words)


def _group_path(namespace: str, name: str) -> str:
    return f"/apis/{PG_API}/namespaces/{namespace}/podgroups/{name}"


def _ps_and_three_workers(kube: KubeClient, namespace: str, make_pod: Callable[[str, str],
                          dict[str, Any]]) -> None:
    create_pod(kube, namespace, make_pod("ps-0", "ps"))
    for i in range(3):
        create_pod(kube, namespace, make_pod(f"worker-{i}", "worker"))


def test_roles_ps_1_worker_4_wait_for_the_fourth_worker_then_bind_together(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("sg-roles-a", cpu="3")
    make_node("sg-roles-b", cpu="2")  # room for 5 one-cpu pods
    create_podgroup(kube, namespace, "job", 5, subGroups=ROLES)
    _ps_and_three_workers(kube, namespace,
                          lambda name, role: _member(name, sched.name, role))
    wait_until(lambda: _unschedulable(kube, namespace, "ps-0", "worker 3/4"),
               what="the gang kept pending, naming the short role")
    status = wait_until(lambda: kube.get(_group_path(namespace, "job")).get("status"),
                        what="the PodGroup's status")
    assert bound_count(kube, namespace, "job") == 0
    wait_until(lambda: {"name": "worker", "minMember": 4, "members": 3, "scheduled": 0,
                        "running": 0} in (kube.get(_group_path(namespace, "job"))
                                          .get("status") or {}).get("subGroups", ()),
               what=f"per-role counts in the status (had {status})")

    create_pod(kube, namespace, _member("worker-3", sched.name, "worker"))
    wait_until(lambda: bound_count(kube, namespace, "job") == 5, what="all 5 bound")
    sched.watcher.check_settled()


def test_volcano_min_task_member_behaves_the_same(
        kube: KubeClient, namespace: str, make_node: Any, compat_crds: None,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("sg-vc-a", cpu="3")
    make_node("sg-vc-b", cpu="2")
    kube.create(f"{VOLCANO}/namespaces/{namespace}/podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": namespace},
        "spec": {"minMember": 5, "minTaskMember": {"ps": 1, "worker": 4}}})

    def volcano_member(name: str, task: str) -> dict[str, Any]:
        body = pod_body(name, scheduler=sched.name)
        body["metadata"]["annotations"] = {GROUP_NAME_ANNOTATION: "job",
                                           TASK_SPEC_ANNOTATION: task}
        return body

    _ps_and_three_workers(kube, namespace, volcano_member)
    wait_until(lambda: _unschedulable(kube, namespace, "ps-0", "worker 3/4"),
               what="the Volcano gang kept pending, naming the short task")
    assert not any(placement(kube, namespace).values())

    create_pod(kube, namespace, volcano_member("worker-3", "worker"))
    wait_until(lambda: sum(1 for n in placement(kube, namespace).values() if n) == 5,
               what="all 5 bound")
    sched.watcher.check_settled()


def test_min_groups_2_of_3_subgroups_run_whole_never_half_a_subgroup(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("sg-mg-a", cpu="3")
    make_node("sg-mg-b", cpu="2")  # room for 5 pods: two subgroups of 2, and one more pod
    create_podgroup(kube, namespace, "job", 4, minGroups=2, subGroups=REPLICAS)
    for replica in range(3):
        for i in range(2):
            create_pod(kube, namespace, _member(f"r{replica}-{i}", sched.name, f"r{replica}"))
    wait_until(lambda: bound_count(kube, namespace, "job") == 4, what="two subgroups bound")
    pending = wait_until(lambda: _judged_pending(kube, namespace, 2),
                         what="the third subgroup's 2 members judged and kept pending")
    per_subgroup = _bound_per_subgroup(kube, namespace)
    assert sorted(per_subgroup.values()) == [2, 2], per_subgroup
    assert len(pending) == 2 and pending[0][:2] == pending[1][:2]
    assert bound_count(kube, namespace, "job") == 4  # the spare cpu took no half subgroup

    make_node("sg-mg-c", cpu="1")
    wait_until(lambda: bound_count(kube, namespace, "job") == 6, what="the third subgroup")
    sched.watcher.check_settled()


def test_each_subgroup_lands_in_one_rack(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    for rack in ("r1", "r2", "r3"):
        for i in range(2):
            make_node(f"sg-rack-{rack}-{i}", cpu="2", labels={RACK: rack})
    rack_topology = {"mode": "Required", "keys": [RACK]}
    subs = [{"name": f"s{i}", "minMember": 3, "topology": rack_topology} for i in range(3)]
    create_podgroup(kube, namespace, "job", 9, subGroups=subs)
    for sub in range(3):
        for i in range(3):
            create_pod(kube, namespace, _member(f"s{sub}-{i}", sched.name, f"s{sub}"))
    wait_until(lambda: bound_count(kube, namespace, "job") == 9, what="all 9 bound")
    where = placement(kube, namespace)
    racks = {sub: {where[f"s{sub}-{i}"].split("-")[2] for i in range(3)} for sub in range(3)}
    assert all(len(r) == 1 for r in racks.values()), racks
    sched.watcher.check_settled()


def test_min_member_lowered_while_waiting_runs_at_once(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler({"pluginConfig": [{"name": "Coscheduling",
                                               "args": {"freezeSeconds": 3600}}]})
    make_node("sg-low-a", cpu="3")
    create_podgroup(kube, namespace, "job", 4)
    for i in range(4):
        create_pod(kube, namespace, pod_body(f"job-{i}", scheduler=sched.name, group="job"))
    wait_until(lambda: any(c.get("type") == "Frozen" and c.get("status") == "True" for c in
                           (kube.get(_group_path(namespace, "job")).get("status") or {})
                           .get("conditions") or ()),
               what="the gang frozen (for an hour) after its failed attempt")
    assert bound_count(kube, namespace, "job") == 0
    kube.patch(_group_path(namespace, "job"), {"spec": {"minMember": 2}})
    wait_until(lambda: bound_count(kube, namespace, "job") == 3, what="3 of 4 bound")
    sched.watcher.check_settled()


def test_min_member_raised_while_running_evicts_nothing(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("sg-high-a", cpu="2")
    create_podgroup(kube, namespace, "job", 2)
    for i in range(2):
        create_pod(kube, namespace, pod_body(f"job-{i}", scheduler=sched.name, group="job"))
    wait_until(lambda: bound_count(kube, namespace, "job") == 2, what="the gang bound")
    kube.patch(_group_path(namespace, "job"), {"spec": {"minMember": 4}})
    create_pod(kube, namespace, pod_body("job-2", scheduler=sched.name, group="job"))
    wait_until(lambda: _unschedulable(kube, namespace, "job-2", "3 of minMember 4"),
               what="the new member judged against the raised minimum")
    running = [p for p in list_pods(kube, namespace) if p["spec"].get("nodeName")]
    assert sorted(p["metadata"]["name"] for p in running) == ["job-0", "job-1"]
    assert not any(p["metadata"].get("deletionTimestamp") for p in running)


def _judged_pending(kube: KubeClient, namespace: str, count: int) -> list[str] | None:
    pending = sorted(p for p, node in placement(kube, namespace).items()
                     if not node and _unschedulable(kube, namespace, p))
    return pending if len(pending) == count else None


def _bound_per_subgroup(kube: KubeClient, namespace: str) -> Counter[str]:
    return Counter(p["metadata"]["labels"][SUBGROUP_LABEL] for p in list_pods(kube, namespace)
                   if p["spec"].get("nodeName"))
