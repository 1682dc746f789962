"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): every group of it (a leader and its
``size - 1`` workers) is a gang of its own, and its replicas are independent: one replica
can run whole while another waits whole. Its controller labels every pod of a group with
the group's index (``leaderworkerset.sigs.k8s.io/group-index``)."""

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

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
PREFIX = "lws-"


def group_name(lws: Workload, index: int | str) -> str:
    return f"{PREFIX}{lws.name}-{index}"


def _template(lws: Workload) -> Json:
    return mapping(lws.spec.get("leaderWorkerTemplate"))


def groups(lws: Workload) -> list[DerivedGroup]:
    size = count(_template(lws).get("size"), 1)
    replicas = count(lws.spec.get("replicas"), 1)
    return [shaped(lws, group_name(lws, index), size) for index in range(replicas)]


def member_of(lws: Workload, labels: dict[str, str]) -> Member | None:
    """The group of the pod's index (None: a pod without one is no group's)."""
    index = labels.get(GROUP_INDEX_LABEL, "")
    return Member(group_name(lws, int(index))) if index.isdigit() else None


def templates(lws: Workload) -> list[Json]:
    template = _template(lws)
    return [mapping(template.get(name)) for name in ("leaderTemplate", "workerTemplate")
            if template.get(name)]


KIND = WorkloadKind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets",
                    groups, member_of, templates)
