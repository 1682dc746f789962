"""What-if: manifests read into the gang their operator would make (no cluster needed)."""

from __future__ import annotations

import json

import pytest
import yaml

from coscheduling import GROUP_LABEL
from coscheduling.api.membership import GROUP_NAME_ANNOTATION, X_K8S_LABEL
from coscheduling.api.pods import parse_pod
from coscheduling.groups import volcano
from coscheduling.whatif.derive import ManifestError, derive

TEMPLATE = {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}}


def dump(*objects: object) -> bytes:
    return yaml.safe_dump_all(objects).encode()


def test_job_is_one_gang_of_its_parallel_pods() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 3, "completions": 10, "template": TEMPLATE}}
    derived = derive(dump(job), "team")
    assert [p["metadata"]["name"] for p in derived.pods] == ["j-0", "j-1", "j-2"]
    assert derived.group is not None and derived.group["spec"] == {"minMember": 3}
    assert all(p["metadata"]["namespace"] == "team" for p in derived.pods)
    assert {parse_pod(p).group_key for p in derived.pods} == {"team/j-whatif"}


def test_pytorchjob_makes_a_scheduler_plugins_podgroup() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": TEMPLATE},
                                            "Worker": {"replicas": 3, "template": TEMPLATE}}}}
    derived = derive(json.dumps(job).encode())
    assert derived.group is not None
    assert derived.group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert derived.group["spec"]["minMember"] == 4
    assert all(p["metadata"]["labels"][X_K8S_LABEL] == "train" for p in derived.pods)
    assert {parse_pod(p).group_key for p in derived.pods} == {"ml/train@x-k8s"}


def test_volcano_job_task_minimums_become_subgroups() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
           "spec": {"minAvailable": 3, "queue": "q1",
                    "tasks": [{"name": "ps", "replicas": 1, "minAvailable": 1,
                               "template": TEMPLATE},
                              {"name": "worker", "replicas": 4, "minAvailable": 2,
                               "template": TEMPLATE}]}}
    derived = derive(dump(job))
    assert derived.group is not None
    record = volcano.API.parse(derived.group)
    assert record.min_member == 3 and record.queue == "q1" and not record.errors
    assert record.subgroups is not None
    assert [(s.name, s.min_member) for s in record.subgroups.listed] == [("ps", 1),
                                                                          ("worker", 2)]
    assert derived.pods[1]["metadata"]["annotations"][GROUP_NAME_ANNOTATION] == "v"


def test_ray_cluster_counts_head_and_workers() -> None:
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"headGroupSpec": {"template": TEMPLATE},
                    "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2,
                                          "template": TEMPLATE}]}}
    derived = derive(dump(ray))
    assert derived.group is not None and derived.group["spec"]["minMember"] == 3
    assert [p["metadata"]["name"] for p in derived.pods] == [
        "r-head", "r-gpu-worker-0", "r-gpu-worker-1"]


def test_podgroup_with_pods_uses_the_manifests_group() -> None:
    group = {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "PodGroup",
             "metadata": {"name": "g"}, "spec": {"minMember": 2}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"p{i}", "labels": {GROUP_LABEL: "g"}},
             "spec": TEMPLATE["spec"]} for i in range(3)]
    derived = derive(dump(group, *pods))
    assert derived.group is not None and derived.group["metadata"]["name"] == "g"
    assert len(derived.pods) == 3


def test_pods_naming_an_absent_group_look_it_up_in_the_cluster() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "labels": {GROUP_LABEL: "elsewhere"}},
           "spec": TEMPLATE["spec"]}
    derived = derive(dump(pod), "ns")
    assert derived.group is None and derived.group_key == "ns/elsewhere"


@pytest.mark.parametrize(("manifest", "field"), [
    (b"{not yaml", "manifest"),
    (dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": -1, "template": TEMPLATE}}), "spec.parallelism"),
    (dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"containers": []}}}}), "spec.template.spec.containers"),
    (dump({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "t"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "3", "template": TEMPLATE}}}}),
     "spec.pytorchReplicaSpecs.Worker.replicas"),
    (dump({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
     "manifest.kind"),
    (dump({"apiVersion": "v1", "kind": "Pod", "metadata": {}}), "manifest[0].metadata.name"),
    # sizes summed across the manifest, refused before a pod is made
    (dump({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "t"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": TEMPLATE},
               "Worker": {"replicas": 10_000, "template": TEMPLATE}}}}),
     "spec.pytorchReplicaSpecs[].replicas"),
    (dump({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
           "spec": {"tasks": [{"name": "a", "replicas": 6000, "template": TEMPLATE},
                              {"name": "b", "replicas": 6000, "template": TEMPLATE}]}}),
     "spec.tasks[].replicas"),
    (dump({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"headGroupSpec": {"template": TEMPLATE},
                    "workerGroupSpecs": [{"replicas": 10_000, "template": TEMPLATE}]}}),
     "spec.workerGroupSpecs[].replicas"),
    (dump(*({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
             "spec": TEMPLATE["spec"]} for i in range(10_001))), "manifest"),
])
def test_bad_manifests_name_the_field(manifest: bytes, field: str) -> None:
    with pytest.raises(ManifestError) as caught:
        derive(manifest)
    assert caught.value.path == field, str(caught.value)


def test_jobset_is_the_group_the_scheduler_derives() -> None:
    def replicated(name: str, pods: int) -> dict[str, object]:
        return {"name": name, "replicas": 1,
                "template": {"spec": {"parallelism": pods, "completions": pods,
                                      "template": TEMPLATE}}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "pt"},
              "spec": {"replicatedJobs": [replicated("driver", 1), replicated("workers", 4)]}}
    derived = derive(dump(jobset), "team")
    assert derived.group is not None and derived.group["metadata"]["name"] == "jobset-pt"
    assert derived.group["spec"] == {"minMember": 5, "subGroups": [
        {"name": "driver", "minMember": 1}, {"name": "workers", "minMember": 4}]}
    roles = [parse_pod(p).membership.role for p in derived.pods]
    assert roles == ["driver"] + ["workers"] * 4
    assert {parse_pod(p).group_key for p in derived.pods} == {"team/jobset-pt"}


def test_leaderworkerset_places_one_replica_of_its_size() -> None:
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "serve", "annotations": {
               "batch.scheduler.tencent.com/queue": "inference"}},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3,
                                                            "workerTemplate": TEMPLATE}}}
    derived = derive(dump(lws), "team")
    assert [p["metadata"]["name"] for p in derived.pods] == ["serve-0", "serve-0-1", "serve-0-2"]
    assert derived.group is not None and derived.group["spec"] == {"minMember": 3,
                                                                   "queue": "inference"}
    assert derived.notes == ["each of the 2 replicas is a gang of its own; this places one"]


def test_a_malformed_override_is_refused_naming_the_annotation() -> None:
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "serve", "annotations": {
               "batch.scheduler.tencent.com/min-member": "all"}},
           "spec": {"leaderWorkerTemplate": {"size": 3, "workerTemplate": TEMPLATE}}}
    with pytest.raises(ManifestError) as caught:
        derive(dump(lws), "team")
    assert caught.value.path == "metadata.annotations[batch.scheduler.tencent.com/min-member]"


def test_mpijob_is_its_launcher_and_workers() -> None:
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
              "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": TEMPLATE},
                                           "Worker": {"replicas": 2, "template": TEMPLATE}}}}
    derived = derive(dump(mpijob), "team")
    assert [p["metadata"]["name"] for p in derived.pods] == [
        "pi-launcher-0", "pi-worker-0", "pi-worker-1"]
    assert derived.group is not None and derived.group["spec"] == {"minMember": 3, "subGroups": [
        {"name": "launcher", "minMember": 1}, {"name": "worker", "minMember": 2}]}
    assert {parse_pod(p).group_key for p in derived.pods} == {"team/mpijob-pi"}


def test_a_jobs_overrides_shape_its_gang_as_the_scheduler_derives_it() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
               "name": "j", "annotations": {"batch.scheduler.tencent.com/min-member": "2",
                                            "batch.scheduler.tencent.com/queue": "team-a"}},
           "spec": {"parallelism": 4, "template": TEMPLATE}}
    derived = derive(dump(job), "team")
    assert len(derived.pods) == 4
    assert derived.group is not None and derived.group["spec"] == {"minMember": 2,
                                                                   "queue": "team-a"}
    assert derived.notes == ["no group named: 4 pods as one gang of minMember 2"]
