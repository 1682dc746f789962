"""From a pod to the workload its group is derived from: up the controller owner
references, through the objects the informers keep (never an API read per pod), to the
topmost owner that is a workload of a known kind (a Deployment or StatefulSet only when it
opted in, through its ReplicaSet for a Deployment). A Job owned by a JobSet is the JobSet's;
a Job owned by a CronJob (or anything unknown) is its own gang; a LeaderWorkerSet's worker
pod goes through its worker StatefulSet and the group's leader pod to the leader's
StatefulSet and the LeaderWorkerSet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coscheduling.groups.derive import job, jobset, lws, mpijob, ray, replicas
from coscheduling.groups.derive.model import Member, WorkloadKind
from coscheduling.groups.derive.workload import OwnerRef, Workload, workload_key

KINDS: tuple[WorkloadKind, ...] = (job.KIND, jobset.KIND, lws.KIND, mpijob.KIND,
                                    ray.RAY_CLUSTER, ray.RAY_JOB, replicas.DEPLOYMENT,
                                    replicas.STATEFUL_SET)
# Objects between a pod and its workload, walked through but never a gang themselves.
PASS_THROUGH = {"ReplicaSet": "apps", "Pod": ""}
MAX_DEPTH = 8
"""Owner chains are short (an LWS worker pod's is the longest, 4); a cycle stops here."""

Lookup = Callable[[str, str, str], Workload | None]
"""(kind, namespace, name) -> the cached object, or None when the cache has none."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where a pod's walk ended: its workload and group, nothing (a plain pod), or an owner
    the caches do not have yet (``waiting_for``: its workload key)."""

    workload: Workload | None = None
    kind: WorkloadKind | None = None
    member: Member | None = None
    waiting_for: str = ""


PLAIN = Resolution()


def kind_of(ref: OwnerRef) -> WorkloadKind | None:
    """The workload kind an owner reference names (its API group checked when it has one)."""
    for kind in KINDS:
        if kind.kind == ref.kind and (not ref.api_version or ref.group == kind.group):
            return kind
    return None


def _walked_through(ref: OwnerRef) -> bool:
    group = PASS_THROUGH.get(ref.kind)
    return group is not None and (not ref.api_version or ref.group == group)


def resolve(namespace: str, owner: OwnerRef | None, labels: dict[str, str],
            lookup: Lookup) -> Resolution:
    """The workload and group of a pod controlled by ``owner``, labelled ``labels``."""
    top: tuple[Workload, WorkloadKind] | None = None
    ref = owner
    for _ in range(MAX_DEPTH):
        if ref is None:
            break
        kind = kind_of(ref)
        if kind is None and not _walked_through(ref):
            break
        found = lookup(ref.kind, namespace, ref.name)
        if found is None or (ref.uid and found.uid and found.uid != ref.uid):
            return Resolution(waiting_for=workload_key(ref.kind, namespace, ref.name))
        if kind is not None and kind.gang(found):
            top = (found, kind)
        ref = found.owner
    if top is None:
        return PLAIN
    workload, kind = top
    member = kind.member_of(workload, labels)
    return Resolution(workload, kind, member) if member is not None else PLAIN
