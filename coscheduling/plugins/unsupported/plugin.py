"""UnsupportedFields: a pod whose spec asks for placement this scheduler does not implement
is refused at PreFilter, never placed as if the field were not there.

The pod becomes Unschedulable (unresolvable: only a new pod can change these fields) with
a message that names the field, which the scheduler writes to the pod's PodScheduled
condition and a FailedScheduling event. Refused:

* ``spec.volumes[i]`` with an in-tree disk (``gcePersistentDisk``, ``rbd``, ...): their
  conflicts and attach limits are not implemented (claims, ``persistentVolumeClaim`` and
  generic ``ephemeral``, are VolumeBinding's and the other volume plugins');
* ``spec.workloadRef``: the v1.35 alpha Workload API's pod field (v1.36 replaced it with
  ``spec.schedulingGroup``, which coscheduling.groups reads);
* a spec this scheduler could not read (``Pod.parse_error``): its constraints are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.volumes import CLAIM_SOURCES
from coscheduling.framework.interfaces import PreFilterPlugin
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle

NAME = "UnsupportedFields"
NOT_PLACED = "the pod is not placed"

_FIELD_WHY = {
    "spec.workloadRef": "the v1.35 alpha Workload API is",
}


def refusal(pod: Pod) -> str:
    """Why ``pod`` cannot be placed by this scheduler, or "" if nothing stands in the way."""
    if pod.parse_error:
        return f"{pod.parse_error}; the pod spec cannot be read, so {NOT_PLACED}"
    for index, source, _ in pod.placement_volumes:
        if source not in CLAIM_SOURCES:
            return (f"spec.volumes[{index}].{source}: the {source} volume type (conflicts, "
                    f"attach limits) is not implemented by this scheduler; {NOT_PLACED}")
    for path in pod.placement_fields:
        what = _FIELD_WHY.get(path, "this field is")
        extra = ("; name a scheduling.k8s.io PodGroup in spec.schedulingGroup.podGroupName"
                 if "Workload" in what else "")
        return f"{path}: {what} not implemented by this scheduler{extra}; {NOT_PLACED}"
    return ""


class UnsupportedFields(PreFilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        if not (pod.parse_error or pod.placement_volumes or pod.placement_fields):
            return SUCCESS
        why = refusal(pod)
        return Status.unresolvable(why, plugin=NAME) if why else SUCCESS
