"""Deployments and StatefulSets, only when annotated ``batch.scheduler.tencent.com/
derive-group: "true"``: a gang of its ``replicas`` (``replicas-<kind>-<name>``). Most are
services whose replicas are useful one by one, hence opt-in; a StatefulSet of a
LeaderWorkerSet is walked through to it, never a gang of its own. During a rolling update
the old and the new pods are members alike."""

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


def group_name(workload: Workload) -> str:
    return f"{workload.kind.lower()}-{workload.name}"


def groups(workload: Workload) -> list[DerivedGroup]:
    return [shaped(workload, group_name(workload), count(workload.spec.get("replicas"), 1))]


def member_of(workload: Workload, labels: dict[str, str]) -> Member | None:
    return Member(group_name(workload))


def templates(workload: Workload) -> list[Json]:
    return [mapping(workload.spec.get("template"))]


DEPLOYMENT = WorkloadKind("apps/v1", "Deployment", "deployments", groups, member_of,
                          templates, opt_in=True)
STATEFUL_SET = WorkloadKind("apps/v1", "StatefulSet", "statefulsets", groups, member_of,
                            templates, opt_in=True)
