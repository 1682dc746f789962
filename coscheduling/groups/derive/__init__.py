"""Groups derived from owners: gangs for the workloads users already run, without a
hand-written PodGroup.

A pod that asks for this scheduler and names no group (no marker of any producer, see
:mod:`coscheduling.api.membership`) is walked up its controller owners (:mod:`.walk`, through
cached objects) to its workload, and joins the group that workload's controller means:

  job      batch/v1 Job: the pods it runs at once (parallelism, fewer completions left)
  jobset   JobSet: the whole set, one subgroup per replicated job
  lws      LeaderWorkerSet: each group of ``size`` pods (leader + workers) its own gang
  mpijob   MPIJob v2: the launcher and its workers, a subgroup per role
  ray      RayCluster, RayJob (no batch-scheduler flag): the head and the workers' minimums

Each derived group is a real PodGroup of ours named after the workload (``job-<name>``,
``jobset-<name>``, ``lws-<name>-<index>``, ``mpijob-<name>``, ``raycluster-<name>``), owned by it
(garbage-collected with it) and kept in step with it by the scheduler's leader: users see
it with ``kubectl get`` and ``kubectl gang list``, its status says why it waits, and every
replica of the scheduler reads the same group. Annotations on the workload override what
its controller does not say (:mod:`.overrides`).
"""

from __future__ import annotations

from coscheduling import GROUP_API
from coscheduling.api.membership import Membership
from coscheduling.api.podgroups import gang_key
from coscheduling.groups.derive.model import DerivedGroup, Member, WorkloadKind
from coscheduling.groups.derive.overrides import derivation_disabled, read_overrides
from coscheduling.groups.derive.walk import KINDS, PLAIN, Lookup, Resolution, kind_of, resolve
from coscheduling.groups.derive.workload import (
    OwnerRef,
    Workload,
    controller_of,
    read_workload,
    reader,
    workload_key,
)

DERIVED_FROM_LABEL = f"{GROUP_API}/derived-from"
"""On a derived PodGroup: the kind of workload it was derived from (``job``, ``jobset``...)."""
DERIVED = "derived"
"""The membership tag of a pod whose owner is not cached yet: it names no group object, so
the pod waits (and is looked at again when the owner arrives)."""


def derived_membership(namespace: str, resolution: Resolution) -> Membership:
    """The membership a walk gives a pod (an empty one for a plain pod)."""
    if resolution.waiting_for:
        return Membership(key=gang_key(namespace, resolution.waiting_for, DERIVED),
                          tag=DERIVED, name=resolution.waiting_for,
                          marker=f"owner {resolution.waiting_for} (not seen yet)")
    workload, member = resolution.workload, resolution.member
    if workload is None or member is None or derivation_disabled(workload.annotations):
        return Membership()
    error = "; ".join(read_overrides(workload.annotations).errors)
    marker = f"derived from {workload.describe()}"
    if error:
        return Membership(marker=marker, error=f"{error} of {workload.describe()}")
    return Membership(key=gang_key(namespace, member.group), name=member.group, marker=marker,
                      role=member.role,
                      owner=f"{workload.kind}/{workload.name}/{workload.uid}")


__all__ = [
    "DERIVED",
    "DERIVED_FROM_LABEL",
    "KINDS",
    "PLAIN",
    "DerivedGroup",
    "Lookup",
    "Member",
    "OwnerRef",
    "Resolution",
    "Workload",
    "WorkloadKind",
    "controller_of",
    "derived_membership",
    "kind_of",
    "read_workload",
    "reader",
    "resolve",
    "workload_key",
]
