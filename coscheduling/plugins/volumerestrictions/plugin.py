"""VolumeRestrictions: a ReadWriteOncePod claim serves one pod in the whole cluster.

A pod whose ReadWriteOncePod claim another placed (or assumed) pod already uses fits no
node; it is Unschedulable at Filter, not refused at PreFilter, so that preemption may free
the claim by evicting that pod. (The in-tree disk conflicts are not checked: pods with
in-tree disks are refused by UnsupportedFields.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coscheduling.api.volumes import READ_WRITE_ONCE_POD, claim_names
from coscheduling.framework.status import SKIP, SUCCESS, Status
from coscheduling.plugins.volumebinding.claims import ClaimsPlugin

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import Claim
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "VolumeRestrictions"
CONFLICT = ("node has pod using PersistentVolumeClaim with the same name and "
            "ReadWriteOncePod access mode")
STATE_KEY = "VolumeRestrictions/conflict"


class VolumeRestrictions(ClaimsPlugin):
    name = NAME

    def pre_filter_claims(self, state: CycleState, pod: Pod, claims: list[Claim]) -> Status:
        exclusive = {c.name for c in claims if READ_WRITE_ONCE_POD in c.access_modes}
        if not exclusive:
            return SKIP
        state.write(STATE_KEY, self._used_elsewhere(pod, exclusive))
        return SUCCESS

    def _used_elsewhere(self, pod: Pod, exclusive: set[str]) -> bool:
        """Whether another pod placed or assumed on some node uses one of the claims."""
        for info in self.handle.cache.nodes():
            for other in info.pods.values():
                if (other.namespace == pod.namespace and other.key != pod.key
                        and other.placement_volumes
                        and any(name in exclusive for _, name in claim_names(other))):
                    return True
        return False

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        if state.read(STATE_KEY):
            return Status.unschedulable(CONFLICT, plugin=NAME)
        return SUCCESS
