"""Kubernetes' own gang objects (KEP-4671): ``scheduling.k8s.io/v1beta1`` PodGroups, which
pods name in ``spec.schedulingGroup.podGroupName`` (v1.36+; the v1.35 ``spec.workloadRef``
is gone). A Workload is only a template for PodGroups; the scheduler reads the PodGroups.

``spec.schedulingPolicy.gang.minCount`` is minMember; ``basic`` is a group without a gang
(each pod may go alone). The single topology key of ``spec.schedulingConstraints`` is a
required topology domain, as our ``spec.topology``. Status is the condition
``PodGroupInitiallyScheduled``, which never goes back to False once True.
"""

from __future__ import annotations

from typing import Any

from coscheduling.api import podgroups as pg
from coscheduling.api.membership import NATIVE
from coscheduling.api.podgroups import (
    TOPOLOGY_REQUIRED,
    PodGroup,
    new_record,
    parse_min_member,
    parse_topology,
    read_priority_and_queue,
)
from coscheduling.groups.source import GroupApi, StatusInput

GROUP, VERSION = "scheduling.k8s.io", "v1beta1"
SCHEDULED = "PodGroupInitiallyScheduled"
_PLACED = (pg.PHASE_SCHEDULED, pg.PHASE_RUNNING, pg.PHASE_FINISHED)
# Fields this scheduler cannot honour: a pod is never placed while one is ignored.
_NOT_IMPLEMENTED = {
    "resourceClaims": "dynamic resource allocation is",
    "parentCompositePodGroupName": "composite PodGroups are",
}


def parse(obj: dict[str, Any]) -> PodGroup:
    group, spec, errors = new_record(obj, NATIVE, f"{GROUP}/{VERSION}")
    conditions = (obj.get("status") or {}).get("conditions") or ()
    if any(isinstance(c, dict) and c.get("type") == SCHEDULED and c.get("status") == "True"
           for c in conditions):
        group.phase = pg.PHASE_SCHEDULED
    policy = spec.get("schedulingPolicy")
    if not isinstance(policy, dict) or len(policy) != 1 or not (
            "gang" in policy or "basic" in policy):
        errors.append(f"spec.schedulingPolicy: must set exactly one of gang or basic, "
                      f"got {policy!r}")
    elif "gang" in policy:
        gang = policy["gang"] if isinstance(policy["gang"], dict) else {}
        group.min_member = parse_min_member(gang.get("minCount"),
                                            "spec.schedulingPolicy.gang.minCount", errors)
    constraints = spec.get("schedulingConstraints") or {}
    topology = constraints.get("topology") if isinstance(constraints, dict) else None
    if topology:
        keys = [t.get("key") if isinstance(t, dict) else t for t in topology]
        try:
            group.topology = parse_topology({"mode": TOPOLOGY_REQUIRED, "keys": keys})
        except ValueError as err:
            errors.append(f"spec.schedulingConstraints.topology{err}")
    read_priority_and_queue(group, {"priorityClassName": spec.get("priorityClassName")},
                            errors)
    for name, what in _NOT_IMPLEMENTED.items():
        if spec.get(name):
            errors.append(f"spec.{name}: {what} not implemented by this scheduler")
    group.errors = tuple(errors)
    return group


def shape(status: StatusInput) -> dict[str, Any]:
    placed = status.group.phase == pg.PHASE_SCHEDULED or status.status.get("phase") in _PLACED
    if placed:
        condition = {"type": SCHEDULED, "status": "True", "reason": "Scheduled",
                     "message": "minCount members were placed together"}
    else:
        reasons = [c.get("message", "") for c in status.status.get("conditions") or ()
                   if c.get("type") == "Unschedulable"]
        condition = {"type": SCHEDULED, "status": "False", "reason": "Unschedulable",
                     "message": "; ".join(reasons) or "waiting for members"}
    return {"conditions": [condition]}


API = GroupApi(title=f"PodGroup ({GROUP}/{VERSION})", group=GROUP, version=VERSION,
               tag=NATIVE, parse=parse, shape=shape)
