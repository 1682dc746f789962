"""scheduler-plugins PodGroups (scheduling.x-k8s.io/v1alpha1), as the Kubeflow training
operator, the MPI operator, KubeRay and the Spark operator create them: pods labelled
``scheduling.x-k8s.io/pod-group``. The operator owns the spec; only status is written."""

from __future__ import annotations

from typing import Any

from coscheduling.api.membership import SCHEDULER_PLUGINS
from coscheduling.api.podgroups import PodGroup, new_record, parse_amounts, parse_min_member
from coscheduling.groups.source import GroupApi, StatusInput, pick

GROUP, VERSION = "scheduling.x-k8s.io", "v1alpha1"
# The fields of its status schema; its phases are named as ours are.
STATUS_FIELDS = ("phase", "occupiedBy", "running", "succeeded", "failed", "scheduleStartTime")


def parse(obj: dict[str, Any]) -> PodGroup:
    group, spec, errors = new_record(obj, SCHEDULER_PLUGINS, f"{GROUP}/{VERSION}")
    group.min_member = parse_min_member(spec.get("minMember"), "spec.minMember", errors)
    group.min_resources = parse_amounts(spec.get("minResources"), "spec.minResources", errors)
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None:  # 0 (what the MPI operator writes by default): the default
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
            errors.append(f"spec.scheduleTimeoutSeconds: must be an integer >= 0, "
                          f"got {timeout!r}")
        elif timeout:
            group.max_schedule_time = float(timeout)
    group.errors = tuple(errors)
    return group


def shape(status: StatusInput) -> dict[str, Any]:
    return pick(status.status, *STATUS_FIELDS)


API = GroupApi(title=f"scheduler-plugins PodGroup ({GROUP}/{VERSION})", group=GROUP,
               version=VERSION, tag=SCHEDULER_PLUGINS, parse=parse, shape=shape)
