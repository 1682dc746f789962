"""JobSet (jobset.x-k8s.io/v1alpha2): the whole JobSet is one gang, with one subgroup per
replicated job (its ``replicas`` Jobs of the pods each runs at once), so a driver and its
workers start together or not at all. Kubeflow Trainer v2 runs a TrainJob as a JobSet.
Its controller labels every pod with its replicated job's name."""

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
from coscheduling.groups.derive.workload import Json, Workload

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
PREFIX = "jobset-"


def group_name(jobset: Workload) -> str:
    return f"{PREFIX}{jobset.name}"


def _replicated_jobs(jobset: Workload) -> list[Json]:
    jobs = jobset.spec.get("replicatedJobs")
    return [mapping(job) for job in jobs] if isinstance(jobs, list) else []


def _job_spec(replicated: Json) -> Json:
    return mapping(mapping(replicated.get("template")).get("spec"))


def groups(jobset: Workload) -> list[DerivedGroup]:
    subgroups: list[Json] = []
    total = 0
    for replicated in _replicated_jobs(jobset):
        members = count(replicated.get("replicas"), 1) * pods_at_once(_job_spec(replicated))
        if members:
            subgroups.append({"name": str(replicated.get("name") or ""), "minMember": members})
            total += members
    return [shaped(jobset, group_name(jobset), total,
                   {"subGroups": subgroups} if subgroups else None)]


def member_of(jobset: Workload, labels: dict[str, str]) -> Member | None:
    return Member(group_name(jobset), labels.get(REPLICATED_JOB_LABEL, ""))


def templates(jobset: Workload) -> list[Json]:
    return [mapping(_job_spec(replicated).get("template"))
            for replicated in _replicated_jobs(jobset)]


KIND = WorkloadKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", groups, member_of,
                    templates)
