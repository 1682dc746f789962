"""End to end with an operator nobody here wrote (issue 16): the real Kubeflow
training-operator v1.8.1 creates the gang objects for a PyTorchJob of 1 master + 3 workers,
and this scheduler places the job all or nothing, through both of the operator's paths:
scheduler-plugins (x-k8s PodGroup + pod label) and Volcano (Volcano PodGroup that must be
Inqueue before the operator creates any pod)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import ApiError, KubeClient
from tests.integration.kube import pod_condition, wait_until
from tests.integration.operators import (
    StartOperator,
    bound,
    create_pytorchjob,
    job_pods,
    pytorchjob,
)

StartScheduler = Callable[..., Any]
JOB = "train"
MEMBERS = 4  # 1 master + 3 workers
X_K8S = "/apis/scheduling.x-k8s.io/v1alpha1"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"


def _room_for_three(make_node: Any, prefix: str) -> None:
    make_node(f"{prefix}-a", cpu="2")
    make_node(f"{prefix}-b", cpu="1")


def test_scheduler_plugins_path_places_the_pytorchjob_all_or_nothing(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    start_training_operator: StartOperator,
) -> None:
    sched = start_scheduler()
    _room_for_three(make_node, "to-sp")
    start_training_operator(sched.name)
    create_pytorchjob(kube, namespace, pytorchjob(JOB, workers=3, cpu="1"))

    group = wait_until(lambda: _get(kube, f"{X_K8S}/namespaces/{namespace}/podgroups/{JOB}"),
                       what="the operator's scheduling.x-k8s.io PodGroup")
    assert group["spec"]["minMember"] == MEMBERS
    pods = wait_until(lambda: _all_members(kube, namespace), what="the job's 4 pods")
    for pod in pods:
        assert pod["spec"]["schedulerName"] == sched.name
        assert pod["metadata"]["labels"][POD_GROUP_LABEL] == JOB
    first = pods[0]["metadata"]["name"]
    wait_until(lambda: pod_condition(kube, namespace, first, "PodScheduled").get("reason")
               == "Unschedulable", what="the gang's failed attempt (PodScheduled=False)")
    assert bound(job_pods(kube, namespace, JOB)) == []

    make_node("to-sp-c", cpu="1")
    wait_until(lambda: len(bound(job_pods(kube, namespace, JOB))) == MEMBERS,
               what="all 4 pods bound")
    sched.watcher.check_settled()


def test_volcano_path_admits_the_group_then_places_the_pytorchjob(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    start_training_operator: StartOperator,
) -> None:
    sched = start_scheduler({"schedulerNames": [f"primary-{namespace}", "volcano"]})
    _room_for_three(make_node, "to-vc")
    start_training_operator("volcano")
    create_pytorchjob(kube, namespace, pytorchjob(JOB, workers=3, cpu="1"))
    path = f"{VOLCANO}/namespaces/{namespace}/podgroups/{JOB}"

    group = wait_until(lambda: _unschedulable(_get(kube, path)),
                       what="the Volcano PodGroup kept Pending with a reason")
    assert group["spec"]["minMember"] == MEMBERS
    assert group["spec"]["minResources"]["cpu"] == str(MEMBERS)
    # The operator waits for admission: no pod exists, so none can be bound.
    assert job_pods(kube, namespace, JOB) == []

    make_node("to-vc-c", cpu="1")
    pods = wait_until(lambda: _all_members(kube, namespace), what="the job's 4 pods")
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"][GROUP_NAME_ANNOTATION] == JOB
    wait_until(lambda: len(bound(job_pods(kube, namespace, JOB))) == MEMBERS,
               what="all 4 pods bound")
    wait_until(lambda: (_get(kube, path).get("status") or {}).get("phase") == "Running",
               what="the Volcano PodGroup Running")
    sched.watcher.check_settled()


def _get(kube: KubeClient, path: str) -> dict[str, Any]:
    try:
        return kube.get(path)
    except ApiError as error:
        if error.not_found:
            return {}
        raise


def _all_members(kube: KubeClient, namespace: str) -> list[dict[str, Any]] | None:
    pods = job_pods(kube, namespace, JOB)
    return sorted(pods, key=lambda p: p["metadata"]["name"]) if len(pods) == MEMBERS else None


def _unschedulable(group: dict[str, Any]) -> dict[str, Any] | None:
    """The group, once this scheduler has judged it and kept it Pending, saying why."""
    status = group.get("status") or {}
    reasons = [c.get("reason") for c in status.get("conditions") or ()
               if c.get("type") == "Unschedulable" and c.get("status") == "True"]
    return group if status.get("phase") == "Pending" and reasons else None
