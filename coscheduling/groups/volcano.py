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
    MAX_SUBGROUPS,
    PodGroup,
    SubGroup,
    SubGroups,
    new_record,
    parse_amounts,
    parse_min_member,
    read_priority_and_queue,
    valid_label_key,
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
    if spec.get("minTaskMember") and spec.get("subGroupPolicy"):
        errors.append("spec.subGroupPolicy: not implemented together with minTaskMember "
                      "(set one of them)")
    elif spec.get("minTaskMember"):
        group.subgroups = _task_minimums(spec["minTaskMember"], errors)
    elif spec.get("subGroupPolicy"):
        group.subgroups = _subgroup_policy(spec["subGroupPolicy"], errors)
    if spec.get("networkTopology"):
        errors.append("spec.networkTopology: not implemented by this scheduler (batch."
                      "scheduler.tencent.com PodGroups have spec.topology)")
    group.errors = tuple(errors)
    return group


def _task_minimums(raw: object, errors: list[str]) -> SubGroups | None:
    """``spec.minTaskMember`` (task name -> minimum): each task is a role that must reach
    its minimum; members name their task in the annotation ``volcano.sh/task-spec``."""
    if not isinstance(raw, dict) or len(raw) > MAX_SUBGROUPS:
        errors.append(f"spec.minTaskMember: must map task names to counts, got {raw!r}")
        return None
    listed = tuple(SubGroup(str(task), _count(count, f"spec.minTaskMember[{task}]", errors))
                   for task, count in sorted(raw.items()))
    return SubGroups(listed, len(listed))


def _subgroup_policy(raw: object, errors: list[str]) -> SubGroups | None:
    """``spec.subGroupPolicy``: one policy whose subgroups are the members sharing the
    values of ``matchLabelKeys``, each ``subGroupSize`` placed whole, ``minSubGroups`` of
    them needed (0: the gang's minMember alone decides how many)."""
    path = "spec.subGroupPolicy"
    if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], dict):
        errors.append(f"{path}: exactly one policy is implemented by this scheduler, "
                      f"got {raw!r}")
        return None
    policy = raw[0]
    for name in ("labelSelector", "networkTopology"):
        if policy.get(name):
            errors.append(f"{path}[0].{name}: not implemented by this scheduler")
    keys = policy.get("matchLabelKeys")
    if not isinstance(keys, list) or not keys or not all(
            isinstance(k, str) and valid_label_key(k) for k in keys):
        errors.append(f"{path}[0].matchLabelKeys: must list the member label keys that "
                      f"form a subgroup, got {keys!r}")
        return None
    size = parse_min_member(policy.get("subGroupSize"), f"{path}[0].subGroupSize", errors)
    minimum = _count(policy.get("minSubGroups", 0), f"{path}[0].minSubGroups", errors)
    template = SubGroup(str(policy.get("name") or "subgroup"), size)
    return SubGroups((), minimum, tuple(keys), template)


def _count(raw: object, path: str, errors: list[str]) -> int:
    """A count that may be 0 (Volcano's defaults are)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        errors.append(f"{path}: must be an integer >= 0, got {raw!r}")
        return 0
    return raw


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
