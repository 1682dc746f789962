"""End to end with KubeRay (issue 26): the real ray-operator v1.5.0, built from Go modules,
with its batch-scheduler integration on the scheduler-plugins path pointed at this
scheduler. A RayCluster of a head and a worker group of 3 is placed all or nothing: with
room for 3 of its 4 pods none is bound; with room added, all 4 are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.localcluster.kuberay import GANG_LABEL, SCHEDULER_NAME
from tests.integration.kube import pod_condition, wait_until

StartScheduler = Callable[..., Any]
CLUSTER = "raygang"
MEMBERS = 4  # the head and 3 workers
X_K8S = "/apis/scheduling.x-k8s.io/v1alpha1"
RAY_CLUSTER_LABEL = "ray.io/cluster"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _container(name: str) -> dict[str, Any]:
    amounts = {"cpu": "1", "memory": "256Mi"}
    return {"name": name, "image": "rayproject/ray:2.46.0",
            "resources": {"requests": amounts, "limits": amounts}}


def _ray_cluster(workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": CLUSTER, "labels": {GANG_LABEL: "true"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [_container("ray-head")], "terminationGracePeriodSeconds": 0}}},
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": workers, "minReplicas": workers,
                "maxReplicas": workers, "rayStartParams": {},
                "template": {"spec": {"containers": [_container("ray-worker")],
                                      "terminationGracePeriodSeconds": 0}}}],
        },
    }


def _pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"{RAY_CLUSTER_LABEL}={CLUSTER}")
    return list(answer.get("items") or [])


def _bound(kube: KubeClient, namespace: str) -> int:
    return sum(1 for p in _pods(kube, namespace) if p["spec"].get("nodeName"))


def _group(kube: KubeClient, namespace: str) -> dict[str, Any]:
    try:
        return kube.get(f"{X_K8S}/namespaces/{namespace}/podgroups/{CLUSTER}")
    except ApiError as error:
        if error.not_found:
            return {}
        raise


def test_a_ray_cluster_is_placed_all_or_nothing(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        start_ray_operator: Callable[[], Any]) -> None:
    sched = start_scheduler({"schedulerNames": [f"primary-{namespace}", SCHEDULER_NAME]})
    make_node("ray-a", cpu="2")
    make_node("ray-b", cpu="1")  # room for 3 of the 4 one-cpu pods
    start_ray_operator()
    kube.create(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters", _ray_cluster(3))

    group = wait_until(lambda: _group(kube, namespace), what="the operator's x-k8s PodGroup")
    assert group["spec"]["minMember"] == MEMBERS
    pods = wait_until(lambda: (found := _pods(kube, namespace)) and len(found) == MEMBERS
                      and found, what="the head and 3 worker pods")
    for pod in pods:
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
        assert pod["metadata"]["labels"][POD_GROUP_LABEL] == CLUSTER
    for pod in pods:
        name = pod["metadata"]["name"]
        wait_until(lambda name=name: pod_condition(kube, namespace, name, "PodScheduled")
                   .get("reason") == "Unschedulable", what=f"{name} judged and kept pending")
    assert _bound(kube, namespace) == 0

    make_node("ray-c", cpu="1")
    wait_until(lambda: _bound(kube, namespace) == MEMBERS, what="all 4 pods bound")
    sched.watcher.check_settled()
