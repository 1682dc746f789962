"""MPIJob (kubeflow.org/v2beta1, the MPI operator): the launcher and its workers, one gang
with a subgroup per role. The operator starts the launcher with the workers by default
(``launcherCreationPolicy: AtStartup``); with ``WaitForWorkersReady`` it makes the launcher
only once every worker is ready, so the gang is the workers alone and the launcher a plain
pod (a gang that waited for it would never start). The operator labels every pod with its
role (``training.kubeflow.org/job-role``)."""

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

ROLE_LABEL = "training.kubeflow.org/job-role"
PREFIX = "mpijob-"
ROLES = {"launcher": "Launcher", "worker": "Worker"}  # label value -> mpiReplicaSpecs key


def group_name(job: Workload) -> str:
    return f"{PREFIX}{job.name}"


def _launcher_waits(job: Workload) -> bool:
    return job.spec.get("launcherCreationPolicy") == "WaitForWorkersReady"


def _replicas(job: Workload, key: str) -> Json:
    return mapping(mapping(job.spec.get("mpiReplicaSpecs")).get(key))


def groups(job: Workload) -> list[DerivedGroup]:
    roles = ["worker"] if _launcher_waits(job) else ["launcher", "worker"]
    counts = {role: count(_replicas(job, ROLES[role]).get("replicas"),
                          1 if role == "launcher" else 0) for role in roles}
    subgroups: list[Json] = [{"name": role, "minMember": members}
                             for role, members in counts.items() if members]
    return [shaped(job, group_name(job), sum(counts.values()),
                   {"subGroups": subgroups} if subgroups else None)]


def member_of(job: Workload, labels: dict[str, str]) -> Member | None:
    role = labels.get(ROLE_LABEL, "")
    if role not in ROLES or (role == "launcher" and _launcher_waits(job)):
        return None
    return Member(group_name(job), role)


def templates(job: Workload) -> list[Json]:
    return [mapping(_replicas(job, key).get("template")) for key in ROLES.values()]


KIND = WorkloadKind("kubeflow.org/v2beta1", "MPIJob", "mpijobs", groups, member_of, templates)
