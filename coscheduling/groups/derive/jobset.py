"""JobSet (jobset.x-k8s.io/v1alpha2): the whole JobSet is one gang, with one subgroup per
replicated job (its ``replicas`` Jobs of the pods each runs at once), so a driver and its
workers start together or not at all; with the annotation ``batch.scheduler.tencent.com/
subgroup-per: replica``, one subgroup per Job instead (``<replicated job>-<index>``, each
placed whole). Kubeflow Trainer v2 runs a TrainJob as a JobSet. Its controller labels every
pod with its replicated job's name and its Job's index."""

from __future__ import annotations

from coscheduling.groups.derive.job import pods_at_once
from coscheduling.groups.derive.model import (
    DerivedGroup,
    Member,
    WorkloadKind,
    count,
    mapping,
    shaped,
)
from coscheduling.groups.derive.overrides import subgroup_per_replica
from coscheduling.groups.derive.workload import Json, Workload

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"  # which replica (Job) of it
PREFIX = "jobset-"


def group_name(jobset: Workload) -> str:
    return f"{PREFIX}{jobset.name}"


def _replicated_jobs(jobset: Workload) -> list[Json]:
    jobs = jobset.spec.get("replicatedJobs")
    return [mapping(job) for job in jobs] if isinstance(jobs, list) else []


def _job_spec(replicated: Json) -> Json:
    return mapping(mapping(replicated.get("template")).get("spec"))


def groups(jobset: Workload) -> list[DerivedGroup]:
    per_replica = subgroup_per_replica(jobset.annotations)
    subgroups: list[Json] = []
    for replicated in _replicated_jobs(jobset):
        name, pods = str(replicated.get("name") or ""), pods_at_once(_job_spec(replicated))
        replicas = count(replicated.get("replicas"), 1)
        if per_replica:
            subgroups += [{"name": f"{name}-{index}", "minMember": pods}
                          for index in range(replicas) if pods]
        elif replicas * pods:
            subgroups.append({"name": name, "minMember": replicas * pods})
    total = sum(int(s["minMember"]) for s in subgroups)
    return [shaped(jobset, group_name(jobset), total,
                   {"subGroups": subgroups} if subgroups else None)]


def member_of(jobset: Workload, labels: dict[str, str]) -> Member | None:
    role = labels.get(REPLICATED_JOB_LABEL, "")
    if role and subgroup_per_replica(jobset.annotations):
        role = f"{role}-{labels.get(JOB_INDEX_LABEL, '')}"
    return Member(group_name(jobset), role)


def templates(jobset: Workload) -> list[Json]:
    return [mapping(_job_spec(replicated).get("template"))
            for replicated in _replicated_jobs(jobset)]


KIND = WorkloadKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", groups, member_of,
                    templates)
