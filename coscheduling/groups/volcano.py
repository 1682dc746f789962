"""Volcano PodGroups (scheduling.volcano.sh/v1beta1), as the Kubeflow training operator
creates them with ``--gang-scheduler-name=volcano``: pods annotated
``scheduling.k8s.io/group-name``.

Volcano admits a group before its pods exist: phase Pending -> Inqueue once the group's
minResources fit, and the training operator creates no pod until then. So this status moves
a group to Inqueue as soon as its minResources fit the free room of the cluster (room that
other admitted groups without placed members have not already been promised), and keeps it
Pending, with an Unschedulable condition saying what is short, while they do not.
"""

from __future__ import annotations

from typing import Any

from coscheduling.api import podgroups as pg
from coscheduling.api.membership import GROUP_NAME
from coscheduling.api.podgroups import (
    PodGroup,
    new_record,
    parse_amounts,
    parse_min_member,
    read_priority_and_queue,
)
from coscheduling.groups.source import GroupApi, StatusInput, pick

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"

PENDING, INQUEUE, RUNNING, COMPLETED, UNKNOWN = (
    "Pending", "Inqueue", "Running", "Completed", "Unknown")
ADMITTED = (INQUEUE, RUNNING)
_COUNTS = ("running", "succeeded", "failed")


def parse(obj: dict[str, Any]) -> PodGroup:
    group, spec, errors = new_record(obj, GROUP_NAME, f"{GROUP}/{VERSION}")
    read_admission_fields(group, spec, errors)
    if spec.get("minTaskMember"):
        errors.append("spec.minTaskMember: per-task minimums are not implemented by this "
                      "scheduler; it would place the gang ignoring them (use minMember)")
    if spec.get("subGroupPolicy"):
        errors.append("spec.subGroupPolicy: sub-groups are not implemented by this scheduler")
    if spec.get("networkTopology"):
        errors.append("spec.networkTopology: not implemented by this scheduler (batch."
                      "scheduler.tencent.com PodGroups have spec.topology)")
    group.errors = tuple(errors)
    return group


def read_admission_fields(group: PodGroup, spec: dict[str, Any], errors: list[str]) -> None:
    """The fields Volcano's and kube-batch's PodGroups share."""
    # Their minMember may be 0 (no gang): every pod may then go alone, as with 1.
    group.min_member = parse_min_member(spec.get("minMember", 1), "spec.minMember", errors,
                                        minimum=0)
    group.min_resources = parse_amounts(spec.get("minResources"), "spec.minResources", errors)
    read_priority_and_queue(group, spec, errors)


def admission_phase(status: StatusInput) -> str:
    """Our phase in the admission vocabulary of Volcano and kube-batch."""
    ours = status.status.get("phase")
    if status.group.errors:
        return PENDING
    if ours == pg.PHASE_FINISHED:
        return COMPLETED
    if ours in (pg.PHASE_SCHEDULED, pg.PHASE_RUNNING):
        return RUNNING
    if ours == pg.PHASE_FAILED:
        return UNKNOWN
    if status.group.phase in ADMITTED or status.fits:
        return INQUEUE
    return PENDING


def shape(status: StatusInput) -> dict[str, Any]:
    phase = admission_phase(status)
    conditions = [dict(c) for c in status.status.get("conditions") or ()
                  if c.get("type") in ("Scheduled", "Unschedulable")]
    if phase == PENDING and not status.group.errors:
        conditions = [c for c in conditions if c.get("type") != "Unschedulable"]
        conditions.append({"type": "Unschedulable", "status": "True",
                           "reason": "NotEnoughResources",
                           "message": f"minResources do not fit yet: {status.why_not}"})
    return {"phase": phase, "conditions": conditions, **pick(status.status, *_COUNTS)}


API = GroupApi(title=f"Volcano PodGroup ({GROUP}/{VERSION})", group=GROUP, version=VERSION,
               tag=GROUP_NAME, parse=parse, shape=shape, rank=0, reports_admission=True,
               status_on_object_fallback=True, scheduler_name="volcano")
