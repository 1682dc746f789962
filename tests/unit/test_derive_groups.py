"""Groups derived from owners (coscheduling.groups.derive): counts, overrides, the walk."""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.groups.derive import (
    DERIVED,
    OwnerRef,
    Workload,
    derived_membership,
    job,
    jobset,
    lws,
    mpijob,
    ray,
    read_workload,
    resolve,
    workload_key,
)

ANNOTATION = "batch.scheduler.tencent.com/"


def _job(spec: dict[str, Any], status: dict[str, Any] | None = None,
         annotations: dict[str, str] | None = None) -> Workload:
    return read_workload({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": "train", "namespace": "ns", "uid": "u1",
                                       "annotations": annotations or {}},
                          "spec": spec, "status": status or {}})


@pytest.mark.parametrize(("spec", "status", "expected"), [
    ({"parallelism": 4}, {}, 4),
    ({"parallelism": 4, "completions": 2}, {}, 2),  # completions < parallelism
    ({"parallelism": 4, "completions": 8}, {"succeeded": 6}, 2),  # fewer left to run
    ({"parallelism": 4, "completions": 8}, {"succeeded": 8}, 1),
    ({}, {}, 1),  # parallelism defaults to 1
    ({"parallelism": 0}, {}, 1),  # suspended by parallelism 0: never below 1
])
def test_job_min_member(spec: dict[str, Any], status: dict[str, Any], expected: int) -> None:
    [group] = job.groups(_job(spec, status))
    assert (group.name, group.spec["minMember"], group.errors) == ("job-train", expected, ())


@pytest.mark.parametrize(("annotations", "spec", "error"), [
    ({"min-member": "2"}, {"minMember": 2}, ""),
    ({"queue": "team-a", "priority-class": "high"},
     {"minMember": 4, "queue": "team-a", "priorityClassName": "high"}, ""),
    ({"topology": "example.com/rack, topology.kubernetes.io/zone",
      "topology-mode": "Preferred"},
     {"minMember": 4, "topology": {"mode": "Preferred",
                                   "keys": ["example.com/rack", "topology.kubernetes.io/zone"]}},
     ""),
    ({"max-schedule-time": "5m"}, {"minMember": 4, "maxScheduleTime": "5m"}, ""),
    ({"min-member": "many"}, {}, f"metadata.annotations[{ANNOTATION}min-member]: must be an "
                                 "integer >= 1, got 'many' of Job ns/train"),
    ({"min-member": "0"}, {}, f"metadata.annotations[{ANNOTATION}min-member]: must be >= 1"),
    ({"queue": "Team A"}, {}, f"metadata.annotations[{ANNOTATION}queue]: 'Team A' is not"),
    ({"max-schedule-time": "soon"}, {}, f"metadata.annotations[{ANNOTATION}max-schedule-time]"),
    ({"topology-mode": "Preferred"}, {},
     f"metadata.annotations[{ANNOTATION}topology-mode]: needs {ANNOTATION}topology"),
    ({"topology": "k", "topology-mode": "Sometimes"}, {},
     f"metadata.annotations[{ANNOTATION}topology-mode]: must be Required or Preferred"),
])
def test_overrides(annotations: dict[str, str], spec: dict[str, Any], error: str) -> None:
    [group] = job.groups(_job({"parallelism": 4},
                              annotations={ANNOTATION + k: v for k, v in annotations.items()}))
    assert group.spec == spec
    assert (error in "; ".join(group.errors)) if error else group.errors == ()


def test_lws_one_gang_per_replica() -> None:
    workload = read_workload({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "ns"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3}}})
    assert [(g.name, g.spec) for g in lws.groups(workload)] == [
        ("lws-serve-0", {"minMember": 3}), ("lws-serve-1", {"minMember": 3})]
    member = lws.member_of(workload, {lws.GROUP_INDEX_LABEL: "1"})
    assert member is not None and member.group == "lws-serve-1"
    assert lws.member_of(workload, {}) is None


def test_jobset_one_gang_with_a_subgroup_per_replicated_job() -> None:
    def replicated(name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        return {"name": name, "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "completions": parallelism,
                                      "template": {"spec": {}}}}}
    workload = read_workload({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pt", "namespace": "ns"},
        "spec": {"replicatedJobs": [replicated("driver", 1, 1), replicated("workers", 2, 2)]}})
    [group] = jobset.groups(workload)
    assert (group.name, group.spec) == ("jobset-pt", {"minMember": 5, "subGroups": [
        {"name": "driver", "minMember": 1}, {"name": "workers", "minMember": 4}]})
    member = jobset.member_of(workload, {jobset.REPLICATED_JOB_LABEL: "workers"})
    assert member is not None and (member.group, member.role) == ("jobset-pt", "workers")


def _object(api_version: str, kind: str, name: str, owner: OwnerRef | None = None,
            uid: str = "") -> Workload:
    return Workload(api_version, kind, "ns", name, uid or f"uid-{name}", owner=owner)


def _ref(target: Workload) -> OwnerRef:
    return OwnerRef(target.api_version, target.kind, target.name, target.uid)


LWS = _object("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "serve")
LEADER_STS = _object("apps/v1", "StatefulSet", "serve", _ref(LWS))
LEADER = _object("v1", "Pod", "serve-1", _ref(LEADER_STS))
WORKER_STS = _object("apps/v1", "StatefulSet", "serve-1", _ref(LEADER))
JOBSET = _object("jobset.x-k8s.io/v1alpha2", "JobSet", "pt")
JOBSET_JOB = _object("batch/v1", "Job", "pt-workers-0", _ref(JOBSET))
CRON = _object("batch/v1", "CronJob", "nightly")
CRON_JOB = _object("batch/v1", "Job", "nightly-1", _ref(CRON))
PLAIN_STS = _object("apps/v1", "StatefulSet", "db")
OPTED_IN = {ANNOTATION + "derive-group": "true"}
GANG_STS = Workload("apps/v1", "StatefulSet", "ns", "db2", "uid-db2", annotations=OPTED_IN)
PLAIN_RS = _object("apps/v1", "ReplicaSet", "web-1")
DEPLOYMENT = Workload("apps/v1", "Deployment", "ns", "web", "uid-web", annotations=OPTED_IN)
DEPLOYMENT_RS = _object("apps/v1", "ReplicaSet", "web-2", _ref(DEPLOYMENT))
# Kubeflow Trainer v2: a TrainJob (a kind never derived, not cached) owns its JobSet.
TRAINJOB_REF = OwnerRef("trainer.kubeflow.org/v1alpha1", "TrainJob", "llm", "uid-llm")
TRAIN_JOBSET = _object("jobset.x-k8s.io/v1alpha2", "JobSet", "llm", TRAINJOB_REF)
TRAIN_JOB = _object("batch/v1", "Job", "llm-node-0", _ref(TRAIN_JOBSET))
CACHE = {workload_key(w.kind, w.namespace, w.name): w
         for w in (LWS, LEADER_STS, LEADER, WORKER_STS, JOBSET, JOBSET_JOB, CRON, CRON_JOB,
                   PLAIN_STS, GANG_STS, PLAIN_RS, DEPLOYMENT, DEPLOYMENT_RS, TRAIN_JOBSET,
                   TRAIN_JOB)}


@pytest.mark.parametrize(("owner", "labels", "key", "role"), [
    (_ref(WORKER_STS), {lws.GROUP_INDEX_LABEL: "1"}, "ns/lws-serve-1", ""),  # a worker
    (_ref(LEADER_STS), {lws.GROUP_INDEX_LABEL: "1"}, "ns/lws-serve-1", ""),  # its leader
    (_ref(JOBSET_JOB), {jobset.REPLICATED_JOB_LABEL: "workers"}, "ns/jobset-pt", "workers"),
    (_ref(CRON_JOB), {}, "ns/job-nightly-1", ""),  # each run of a CronJob is its own gang
    # a TrainJob's node pods: the JobSet it runs as is the gang (the walk stops below it)
    (_ref(TRAIN_JOB), {jobset.REPLICATED_JOB_LABEL: "node"}, "ns/jobset-llm", "node"),
    (_ref(PLAIN_STS), {}, "", ""),  # a StatefulSet that did not opt in: a plain pod
    (_ref(GANG_STS), {}, "ns/statefulset-db2", ""),  # one that did
    (_ref(PLAIN_RS), {}, "", ""),  # a ReplicaSet of no Deployment
    (_ref(DEPLOYMENT_RS), {}, "ns/deployment-web", ""),  # an opted-in Deployment's
    (OwnerRef("apps/v1", "DaemonSet", "agent", "u"), {}, "", ""),  # a kind never derived
    (OwnerRef("batch.volcano.sh/v1alpha1", "Job", "vj", "u"), {}, "", ""),  # not batch/v1
    (None, {}, "", ""),
    (OwnerRef("batch/v1", "Job", "not-seen", "u"), {},
     f"ns/Job/ns/not-seen@{DERIVED}", ""),  # waits for its owner
    (OwnerRef("batch/v1", "Job", "pt-workers-0", "another-uid"), {},
     f"ns/Job/ns/pt-workers-0@{DERIVED}", ""),  # a Job of that name, but not this one yet
])
def test_walk(owner: OwnerRef | None, labels: dict[str, str], key: str, role: str) -> None:
    resolution = resolve("ns", owner, labels,
                         lambda kind, ns, name: CACHE.get(workload_key(kind, ns, name)))
    found = derived_membership("ns", resolution)
    assert (found.key, found.role) == (key, role)


def test_a_malformed_override_refuses_the_pods_naming_the_annotation() -> None:
    workload = _job({"parallelism": 2}, annotations={ANNOTATION + "min-member": "x"})
    found = derived_membership("ns", resolve(
        "ns", _ref(workload), {}, lambda kind, ns, name: workload))
    assert found.key == ""
    assert found.error.startswith(f"metadata.annotations[{ANNOTATION}min-member]")


@pytest.mark.parametrize(("policy", "subgroups", "launcher_joins"), [
    ("AtStartup", [{"name": "launcher", "minMember": 1}, {"name": "worker", "minMember": 2}],
     True),
    # The operator makes the launcher once the workers are ready: a gang that waited for it
    # would never start, so it is a plain pod.
    ("WaitForWorkersReady", [{"name": "worker", "minMember": 2}], False),
])
def test_mpijob_launcher_and_workers(policy: str, subgroups: list[dict[str, Any]],
                                     launcher_joins: bool) -> None:
    workload = read_workload({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ns"},
        "spec": {"launcherCreationPolicy": policy, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}}})
    [group] = mpijob.groups(workload)
    assert group.spec == {"minMember": sum(s["minMember"] for s in subgroups),
                          "subGroups": subgroups}
    launcher = mpijob.member_of(workload, {mpijob.ROLE_LABEL: "launcher"})
    assert (launcher is not None) == launcher_joins
    worker = mpijob.member_of(workload, {mpijob.ROLE_LABEL: "worker"})
    assert worker is not None and (worker.group, worker.role) == ("mpijob-pi", "worker")


@pytest.mark.parametrize(("kind", "spec", "name"), [
    ("RayCluster", {"workerGroupSpecs": [
        {"groupName": "cpu", "minReplicas": 2, "replicas": 4},
        {"groupName": "gpu", "minReplicas": 0, "replicas": 1},  # no minimum: not in the gang
        {"groupName": "off", "minReplicas": 3, "suspend": True}]}, "raycluster-r"),
    ("RayJob", {"rayClusterSpec": {"workerGroupSpecs": [
        {"groupName": "cpu", "minReplicas": 2}]}}, "rayjob-r"),
])
def test_ray_head_and_the_worker_groups_minimums(kind: str, spec: dict[str, Any],
                                                 name: str) -> None:
    workload = read_workload({"apiVersion": "ray.io/v1", "kind": kind,
                              "metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
    [group] = ray.groups(workload)
    assert (group.name, group.spec) == (name, {"minMember": 3, "subGroups": [
        {"name": "headgroup", "minMember": 1}, {"name": "cpu", "minMember": 2}]})
    head = ray.member_of(workload, {ray.GROUP_LABEL: "headgroup"})
    assert head is not None and (head.group, head.role) == (name, "headgroup")
    assert ray.member_of(workload, {}) is None  # a RayJob's submitter pod


def test_jobset_subgroup_per_replica_when_annotated() -> None:
    workload = read_workload({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "pt", "namespace": "ns",
                     "annotations": {ANNOTATION + "subgroup-per": "replica"}},
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {
            "spec": {"parallelism": 4, "completions": 4}}}]}})
    [group] = jobset.groups(workload)
    assert group.spec == {"minMember": 8, "subGroups": [
        {"name": "slice-0", "minMember": 4}, {"name": "slice-1", "minMember": 4}]}
    member = jobset.member_of(workload, {jobset.REPLICATED_JOB_LABEL: "slice",
                                         jobset.JOB_INDEX_LABEL: "1"})
    assert member is not None and member.role == "slice-1"
    bad = read_workload({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                         "metadata": {"name": "pt", "namespace": "ns", "annotations": {
                             ANNOTATION + "subgroup-per": "pod"}}, "spec": {}})
    assert jobset.groups(bad)[0].errors == (
        f"metadata.annotations[{ANNOTATION}subgroup-per]: must be one of replicated-job, "
        "replica, got 'pod' of JobSet ns/pt",)
