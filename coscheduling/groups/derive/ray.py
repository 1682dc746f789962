"""RayCluster and RayJob (ray.io/v1, KubeRay) run without the operator's batch-scheduler
flag: the head and every worker group's ``minReplicas`` are one gang, a subgroup per group
(the head's is ``headgroup``), named ``raycluster-<name>`` (``rayjob-<name>`` for the cluster
a RayJob makes, from its ``rayClusterSpec``). Workers beyond the minimums join as the
autoscaler adds them, each placed on its own. KubeRay labels every pod of a cluster with its
group (``ray.io/group``); a RayJob's submitter pod has none and stays a plain pod."""

from __future__ import annotations

from coscheduling.groups.derive.model import (
    DerivedGroup,
    Member,
    WorkloadKind,
    count,
    mapping,
    shaped,
)
from coscheduling.groups.derive.workload import Json, Workload

GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"  # the value of ray.io/group on the head pod


def _cluster_spec(workload: Workload) -> Json:
    if workload.kind == "RayJob":
        return mapping(workload.spec.get("rayClusterSpec"))
    return workload.spec


def group_name(workload: Workload) -> str:
    return f"{workload.kind.lower()}-{workload.name}"


def _workers(workload: Workload) -> list[Json]:
    groups = _cluster_spec(workload).get("workerGroupSpecs")
    return [mapping(group) for group in groups] if isinstance(groups, list) else []


def groups(workload: Workload) -> list[DerivedGroup]:
    subgroups: list[Json] = [{"name": HEAD_GROUP, "minMember": 1}]
    for worker in _workers(workload):
        minimum = count(worker.get("minReplicas"), 0)
        if minimum and not worker.get("suspend"):
            subgroups.append({"name": str(worker.get("groupName") or ""), "minMember": minimum})
    total = sum(int(s["minMember"]) for s in subgroups)
    return [shaped(workload, group_name(workload), total, {"subGroups": subgroups})]


def member_of(workload: Workload, labels: dict[str, str]) -> Member | None:
    group = labels.get(GROUP_LABEL)
    return Member(group_name(workload), group) if group else None


def templates(workload: Workload) -> list[Json]:
    spec = _cluster_spec(workload)
    found = [mapping(mapping(spec.get("headGroupSpec")).get("template"))]
    return found + [mapping(worker.get("template")) for worker in _workers(workload)]


RAY_CLUSTER = WorkloadKind("ray.io/v1", "RayCluster", "rayclusters", groups, member_of,
                           templates)
RAY_JOB = WorkloadKind("ray.io/v1", "RayJob", "rayjobs", groups, member_of, templates)
