"""Groups derived from owners, with the real controllers: kube-controller-manager's Job
controller makes the pods of a batch/v1 Job that names this scheduler and no group, the real
LeaderWorkerSet controller (built from Go modules) those of a LeaderWorkerSet, and the
scheduler places them as the gangs the workload means (PodGroups derived, owned by it).
Nodes are API objects without kubelets: bound pods stay Pending, which is all a gang needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from coscheduling.kubectl_gang import gangs_of, read_snapshot
from tests.integration.kube import pod_condition, wait_until

StartScheduler = Callable[..., Any]
PODGROUPS = "/apis/batch.scheduler.tencent.com/v1"


def job(name: str, scheduler: str, *, parallelism: int, completions: int | None = None,
        cpu: str = "1", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An indexed Job of ``parallelism`` pods at once, each asking for ``cpu``."""
    container = {"name": "work", "image": "busybox", "command": ["true"],
                 "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {
        "parallelism": parallelism, "completionMode": "Indexed",
        "completions": completions if completions is not None else parallelism,
        "template": {"spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                              "terminationGracePeriodSeconds": 0, "containers": [container]}}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}


def job_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"batch.kubernetes.io/job-name={name}")
    return [p for p in answer.get("items") or () if not p["metadata"].get("deletionTimestamp")]


def bound(pods: list[dict[str, Any]]) -> dict[str, str]:
    """uid -> node of the bound pods."""
    return {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods
            if p["spec"].get("nodeName")}


def podgroup(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(f"{PODGROUPS}/namespaces/{namespace}/podgroups/{name}")
    except ApiError as err:
        if err.not_found:
            return None
        raise


def _unschedulable(kube: KubeClient, namespace: str, pods: list[dict[str, Any]]) -> bool:
    return bool(pods) and all(
        pod_condition(kube, namespace, p["metadata"]["name"], "PodScheduled").get("reason")
        == "Unschedulable" for p in pods)


def test_job_of_four_on_room_for_three_binds_none_then_all_four(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
) -> None:
    sched = start_scheduler()
    make_node("dj-a", cpu="2")
    make_node("dj-b", cpu="1")
    created = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                          job("train", sched.name, parallelism=4))

    group = wait_until(lambda: podgroup(kube, namespace, "job-train"),
                       what="the PodGroup derived from the Job")
    assert group["spec"]["minMember"] == 4
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "train",
                                                            created["metadata"]["uid"])
    pods = wait_until(lambda: len(job_pods(kube, namespace, "train")) == 4
                      and job_pods(kube, namespace, "train"), what="the Job's 4 pods")
    wait_until(lambda: _unschedulable(kube, namespace, pods),
               what="every pod's failed attempt (PodScheduled=False)")
    assert bound(job_pods(kube, namespace, "train")) == {}
    message = pod_condition(kube, namespace, pods[0]["metadata"]["name"], "PodScheduled")
    assert "job-train" in message["message"], message
    why = explain(kube, namespace, "job-train")  # `coscheduling explain`: the members too
    assert all(p["metadata"]["name"] in why for p in pods), why

    make_node("dj-c", cpu="1")
    wait_until(lambda: len(bound(job_pods(kube, namespace, "train"))) == 4,
               what="all 4 pods bound")
    # `kubectl gang list` shows the derived group with its pods placed.
    wait_until(lambda: [(g.placed, g.min_member) for g in gangs_of(read_snapshot(
        kube, namespace, "")) if g.name == "job-train"] == [(4, 4)], what="kubectl gang list: 4/4")

    # No kubelet: the pods' success is written here, as a kubelet would report it.
    for pod in job_pods(kube, namespace, "train"):
        kube.patch(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
                   {"status": {"phase": "Succeeded"}})
    finished = wait_until(lambda: (podgroup(kube, namespace, "job-train") or {}).get(
        "status", {}).get("succeeded") == 4 and podgroup(kube, namespace, "job-train"),
        what="the derived PodGroup counting its 4 succeeded members")
    assert finished["status"]["phase"] == "Finished", finished["status"]

    kube.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/train",
                propagationPolicy="Background")
    wait_until(lambda: podgroup(kube, namespace, "job-train") is None,
               what="the derived PodGroup garbage-collected with its Job")


def test_parallelism_raised_while_running_starts_the_new_pods_as_one_step(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
) -> None:
    sched = start_scheduler()
    make_node("de-a", cpu="2")
    make_node("de-b", cpu="1")
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    kube.create(path, job("grow", sched.name, parallelism=2, completions=8))
    first = wait_until(lambda: len(bound(job_pods(kube, namespace, "grow"))) == 2
                       and bound(job_pods(kube, namespace, "grow")),
                       what="the first 2 pods bound")

    # Room for one more pod only: the 2 new pods wait together, nobody is evicted.
    kube.patch(f"{path}/grow", {"spec": {"parallelism": 4}})
    wait_until(lambda: (podgroup(kube, namespace, "job-grow") or {}).get(
        "spec", {}).get("minMember") == 4, what="minMember raised to 4")
    def new_pods() -> list[dict[str, Any]]:
        return [p for p in job_pods(kube, namespace, "grow") if p["metadata"]["uid"] not in first]

    wait_until(lambda: len(new_pods()) == 2, what="the Job's 2 new pods")

    def settled() -> bool:  # both tried and refused, or (wrongly) one of them bound
        pods = new_pods()
        return bool(bound(pods)) or _unschedulable(kube, namespace, pods)

    wait_until(settled, what="the new pods' failed attempt (PodScheduled=False)")
    now = bound(job_pods(kube, namespace, "grow"))
    assert now == first, f"only the first 2 pods are bound, where they were: {now}"

    make_node("de-c", cpu="1")
    done = wait_until(lambda: len(bound(job_pods(kube, namespace, "grow"))) == 4
                      and bound(job_pods(kube, namespace, "grow")), what="all 4 pods bound")
    assert {uid: done[uid] for uid in first} == first, "a running pod was moved or evicted"


def leaderworkerset(name: str, scheduler: str, *, replicas: int, size: int,
                    cpu: str = "1") -> dict[str, Any]:
    """A LeaderWorkerSet of ``replicas`` groups of ``size`` pods, each asking for ``cpu``."""
    template = {"spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "serve", "image": "busybox",
                                         "command": ["sleep", "3600"],
                                         "resources": {"requests": {"cpu": cpu}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": template}}}


def lws_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"leaderworkerset.sigs.k8s.io/name={name}")
    return list(answer.get("items") or ())


def _by_group(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """group index -> the nodes of its bound pods ("" for a pod not bound)."""
    groups: dict[str, list[str]] = {}
    for pod in pods:
        index = pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index", "?")
        groups.setdefault(index, []).append(pod["spec"].get("nodeName") or "")
    return groups


def test_leaderworkerset_replicas_are_gangs_of_their_own(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    start_lws_controller: Callable[[], Any],
) -> None:
    sched = start_scheduler()
    start_lws_controller()
    make_node("dl-a", cpu="2")
    make_node("dl-b", cpu="2")  # room for 4 pods: one replica of 3, not two
    kube.create(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets",
                leaderworkerset("serve", sched.name, replicas=2, size=3))

    for index in (0, 1):
        group = wait_until(lambda i=index: podgroup(kube, namespace, f"lws-serve-{i}"),
                           what=f"the PodGroup derived for replica {index}")
        assert group["spec"]["minMember"] == 3
        assert group["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    wait_until(lambda: len(lws_pods(kube, namespace, "serve")) == 6, what="the 6 pods")

    def one_whole_one_waiting() -> dict[str, list[str]] | None:
        groups = _by_group(lws_pods(kube, namespace, "serve"))
        placed = sorted(sum(1 for node in nodes if node) for nodes in groups.values())
        return groups if placed == [0, 3] else None

    groups = wait_until(one_whole_one_waiting, what="one replica bound whole")
    waiting = next(i for i, nodes in groups.items() if not any(nodes))
    waiting_pods = [p for p in lws_pods(kube, namespace, "serve")
                    if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
                    == waiting]
    wait_until(lambda: _unschedulable(kube, namespace, waiting_pods),
               what="the other replica's failed attempt (PodScheduled=False)")
    assert one_whole_one_waiting() is not None, "the waiting replica stays whole"

    make_node("dl-c", cpu="2")
    wait_until(lambda: sorted(sum(1 for n in nodes if n) for nodes in _by_group(
        lws_pods(kube, namespace, "serve")).values()) == [3, 3], what="both replicas bound")


def jobset(name: str, scheduler: str, roles: dict[str, int], cpu: str = "1") -> dict[str, Any]:
    """A JobSet of one replicated job per role, each one Job of ``roles[role]`` pods."""
    def replicated(role: str, pods: int) -> dict[str, Any]:
        template = job(role, scheduler, parallelism=pods, cpu=cpu)["spec"]
        return {"name": role, "replicas": 1, "template": {"spec": {**template,
                                                                    "backoffLimit": 0}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [replicated(r, n) for r, n in roles.items()]}}


def jobset_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"jobset.sigs.k8s.io/jobset-name={name}")
    return list(answer.get("items") or ())


def test_jobset_of_a_driver_and_four_workers_is_one_gang(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    start_jobset_controller: Callable[[], Any],
) -> None:
    sched = start_scheduler()
    start_jobset_controller()
    make_node("ds-a", cpu="2")
    make_node("ds-b", cpu="2")  # room for 4 of the 5 pods
    kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
                jobset("pt", sched.name, {"driver": 1, "workers": 4}))

    group = wait_until(lambda: podgroup(kube, namespace, "jobset-pt"),
                       what="the PodGroup derived from the JobSet")
    assert group["spec"]["minMember"] == 5
    assert group["spec"]["subGroups"] == [{"name": "driver", "minMember": 1},
                                          {"name": "workers", "minMember": 4}]
    assert group["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    pods = wait_until(lambda: len(jobset_pods(kube, namespace, "pt")) == 5
                      and jobset_pods(kube, namespace, "pt"), what="the JobSet's 5 pods")
    wait_until(lambda: _unschedulable(kube, namespace, pods),
               what="every pod's failed attempt (PodScheduled=False)")
    assert bound(jobset_pods(kube, namespace, "pt")) == {}

    make_node("ds-c", cpu="1")
    wait_until(lambda: len(bound(jobset_pods(kube, namespace, "pt"))) == 5,
               what="all 5 pods bound")


def mpijob(name: str, scheduler: str, *, workers: int, cpu: str = "1") -> dict[str, Any]:
    """An MPIJob v2beta1 of one launcher and ``workers`` workers, each asking for ``cpu``."""
    def replicas(count: int, command: list[str]) -> dict[str, Any]:
        return {"replicas": count, "template": {"spec": {
            "schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "mpi", "image": "busybox", "command": command,
                            "resources": {"requests": {"cpu": cpu}}}]}}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                     "mpiReplicaSpecs": {"Launcher": replicas(1, ["mpirun", "true"]),
                                         "Worker": replicas(workers, ["sleep", "3600"])}}}


def mpi_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"training.kubeflow.org/job-name={name}")
    return list(answer.get("items") or ())


def ray_cluster(name: str, scheduler: str, *, workers: int, cpu: str = "1") -> dict[str, Any]:
    """A RayCluster of a head and a worker group of ``workers`` (all of them its minimum),
    without KubeRay's gang label: the gang is derived."""
    def template(container: str) -> dict[str, Any]:
        return {"spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": container, "image": "rayproject/ray:2.46.0",
                                         "resources": {"requests": {"cpu": cpu}}}]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template("head")},
                     "workerGroupSpecs": [{
                         "groupName": "workers", "replicas": workers, "minReplicas": workers,
                         "maxReplicas": workers, "rayStartParams": {},
                         "template": template("worker")}]}}


def ray_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"ray.io/cluster={name}")
    return list(answer.get("items") or ())


def ray_job(name: str, scheduler: str, *, workers: int, cpu: str = "1") -> dict[str, Any]:
    """A RayJob whose cluster is :func:`ray_cluster`'s: KubeRay makes the RayCluster (owned by
    the RayJob) and its pods; the submitter waits for a ready head, which no kubelet gives."""
    cluster = ray_cluster(name, scheduler, workers=workers, cpu=cpu)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
            "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": cluster["spec"]}}


def ray_job_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of the RayCluster(s) the RayJob ``name`` owns."""
    clusters = kube.get(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters")["items"]
    owned = [c["metadata"]["name"] for c in clusters
             if any(o.get("kind") == "RayJob" and o.get("name") == name
                    for o in c["metadata"].get("ownerReferences") or ())]
    return [p for cluster in owned for p in ray_pods(kube, namespace, cluster)]


@dataclass(frozen=True)
class OperatorGang:
    """A workload an operator turns into pods of several roles, each test's way of making it."""

    operator: str  # the fixture that starts the operator (it takes no argument but one)
    operator_args: tuple[Any, ...]
    plural: str  # where the workload is created
    manifest: Callable[..., dict[str, Any]]
    group: str
    subgroups: list[dict[str, Any]]
    pods: Callable[[KubeClient, str, str], list[dict[str, Any]]]


OPERATOR_GANGS = {
    # An MPIJob v2: the launcher and 2 workers, as the MPI operator starts them.
    "mpijob": OperatorGang("start_mpi_operator", (), "/apis/kubeflow.org/v2beta1/namespaces/"
                           "{ns}/mpijobs", mpijob, "mpijob-x",
                           [{"name": "launcher", "minMember": 1},
                            {"name": "worker", "minMember": 2}], mpi_pods),
    # A RayCluster without KubeRay's batch-scheduler flag: head + the workers' minimum.
    "raycluster": OperatorGang("start_ray_operator", (None,), "/apis/ray.io/v1/namespaces/"
                               "{ns}/rayclusters", ray_cluster, "raycluster-x",
                               [{"name": "headgroup", "minMember": 1},
                                {"name": "workers", "minMember": 2}], ray_pods),
    # A RayJob the same way: its cluster's head + workers are the RayJob's gang.
    "rayjob": OperatorGang("start_ray_operator", (None,), "/apis/ray.io/v1/namespaces/"
                           "{ns}/rayjobs", ray_job, "rayjob-x",
                           [{"name": "headgroup", "minMember": 1},
                            {"name": "workers", "minMember": 2}], ray_job_pods),
}


@pytest.mark.parametrize("kind", sorted(OPERATOR_GANGS))
def test_an_operators_workload_is_one_gang(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    request: pytest.FixtureRequest, kind: str,
) -> None:
    """Room for 2 of its 3 pods binds none of them; a node added, all 3."""
    case = OPERATOR_GANGS[kind]
    sched = start_scheduler()
    request.getfixturevalue(case.operator)(*case.operator_args)
    make_node(f"d{kind}-a", cpu="2")
    kube.create(case.plural.format(ns=namespace), case.manifest("x", sched.name, workers=2))

    group = wait_until(lambda: podgroup(kube, namespace, case.group),
                       what=f"the PodGroup derived from the {kind}")
    assert group["spec"]["subGroups"] == case.subgroups
    pods = wait_until(lambda: len(case.pods(kube, namespace, "x")) == 3
                      and case.pods(kube, namespace, "x"), what="its 3 pods")
    wait_until(lambda: _unschedulable(kube, namespace, pods),
               what="every pod's failed attempt (PodScheduled=False)")
    assert bound(case.pods(kube, namespace, "x")) == {}

    make_node(f"d{kind}-b", cpu="1")
    wait_until(lambda: len(bound(case.pods(kube, namespace, "x"))) == 3,
               what="all 3 pods bound")


def deployment(name: str, scheduler: str, *, replicas: int, opted_in: bool,
               cpu: str = "1") -> dict[str, Any]:
    annotations = {"batch.scheduler.tencent.com/derive-group": "true"} if opted_in else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "serve", "image": "busybox",
                                         "resources": {"requests": {"cpu": cpu}}}]}}}}


def app_pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"app={name}")
    return list(answer.get("items") or ())


def test_deployment_is_a_gang_only_when_annotated(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
) -> None:
    sched = start_scheduler()
    make_node("dd-a", cpu="2")  # room for 2 pods
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    kube.create(path, deployment("plain", sched.name, replicas=1, opted_in=False))
    wait_until(lambda: len(bound(app_pods(kube, namespace, "plain"))) == 1,
               what="the plain Deployment's pod bound on its own")
    assert podgroup(kube, namespace, "deployment-plain") is None

    kube.create(path, deployment("web", sched.name, replicas=3, opted_in=True))
    group = wait_until(lambda: podgroup(kube, namespace, "deployment-web"),
                       what="the PodGroup derived from the annotated Deployment")
    assert group["spec"]["minMember"] == 3
    pods = wait_until(lambda: len(app_pods(kube, namespace, "web")) == 3
                      and app_pods(kube, namespace, "web"), what="its 3 pods")
    wait_until(lambda: _unschedulable(kube, namespace, pods),
               what="every pod's failed attempt (PodScheduled=False)")
    assert bound(app_pods(kube, namespace, "web")) == {}

    make_node("dd-b", cpu="2")
    wait_until(lambda: len(bound(app_pods(kube, namespace, "web"))) == 3,
               what="all 3 pods bound")


def test_a_malformed_override_refuses_the_jobs_pods_naming_the_annotation(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
) -> None:
    sched = start_scheduler()
    make_node("do-a", cpu="4")
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job(
        "bad", sched.name, parallelism=2,
        annotations={"batch.scheduler.tencent.com/min-member": "many"}))
    pods = wait_until(lambda: len(job_pods(kube, namespace, "bad")) == 2
                      and job_pods(kube, namespace, "bad"), what="the Job's 2 pods")
    expected = ("metadata.annotations[batch.scheduler.tencent.com/min-member]: must be an "
                "integer >= 1, got 'many' of Job")
    wait_until(lambda: all(expected in pod_condition(kube, namespace, p["metadata"]["name"],
                                                     "PodScheduled").get("message", "")
                           for p in pods), what="both pods refused, naming the annotation")
    assert bound(job_pods(kube, namespace, "bad")) == {}
    assert podgroup(kube, namespace, "job-bad") is None


def test_jobset_with_a_subgroup_per_replica(
    kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
    start_jobset_controller: Callable[[], Any],
) -> None:
    sched = start_scheduler()
    start_jobset_controller()
    make_node("dp-a", cpu="3")  # room for 3 of the 4 pods
    manifest = jobset("slices", sched.name, {"slice": 2})
    manifest["spec"]["replicatedJobs"][0]["replicas"] = 2  # 2 Jobs of 2 pods
    manifest["metadata"]["annotations"] = {"batch.scheduler.tencent.com/subgroup-per": "replica"}
    kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", manifest)

    group = wait_until(lambda: podgroup(kube, namespace, "jobset-slices"),
                       what="the PodGroup derived from the JobSet")
    assert group["spec"]["subGroups"] == [{"name": "slice-0", "minMember": 2},
                                          {"name": "slice-1", "minMember": 2}]
    pods = wait_until(lambda: len(jobset_pods(kube, namespace, "slices")) == 4
                      and jobset_pods(kube, namespace, "slices"), what="the 4 pods")
    wait_until(lambda: _unschedulable(kube, namespace, pods),
               what="every pod's failed attempt (PodScheduled=False)")
    assert bound(jobset_pods(kube, namespace, "slices")) == {}

    make_node("dp-b", cpu="1")
    wait_until(lambda: len(bound(jobset_pods(kube, namespace, "slices"))) == 4,
               what="all 4 pods bound: each replica's subgroup complete")
