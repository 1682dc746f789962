"""NodeVolumeLimits: a node takes no more CSI volumes per driver than its CSINode allows
(``spec.drivers[].allocatable.count``), counting the volumes of the pods already there
once each and the pod's own that are not there yet. A claim still to be provisioned counts
against its class's provisioner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coscheduling.api.volumes import VolumeStore, claim_names
from coscheduling.framework.status import SKIP, SUCCESS, Status
from coscheduling.plugins.volumebinding.claims import ClaimsPlugin

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import Claim
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodeVolumeLimits"
EXCEEDED = "node(s) exceed max volume count"
STATE_KEY = "NodeVolumeLimits/volumes"


def csi_volumes(claims: list[Claim], store: VolumeStore) -> dict[str, str]:
    """Volume id -> CSI driver for the claims that attach a CSI volume."""
    volumes: dict[str, str] = {}
    for claim in claims:
        if claim.volume_name:
            volume = store.volumes.get(claim.volume_name)
            if volume is not None and volume.csi_driver:
                volumes[f"{volume.csi_driver}/{volume.csi_handle}"] = volume.csi_driver
            continue
        storage_class = store.classes.get(claim.storage_class)
        if storage_class is not None and storage_class.provisioner:
            volumes[f"{storage_class.provisioner}/{claim.key}"] = storage_class.provisioner
    return volumes


def _placed_claims(pod: Pod, store: VolumeStore) -> list[Claim]:
    """A placed pod's claims that still exist (one gone attaches nothing new)."""
    found = (store.claims.get(f"{pod.namespace}/{name}") for _, name in claim_names(pod))
    return [claim for claim in found if claim is not None]


class NodeVolumeLimits(ClaimsPlugin):
    name = NAME

    def pre_filter_claims(self, state: CycleState, pod: Pod, claims: list[Claim]) -> Status:
        volumes = csi_volumes(claims, self.store)
        if not volumes:
            return SKIP
        state.write(STATE_KEY, volumes)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        wanted: dict[str, str] | None = state.read(STATE_KEY)
        csinode = self.store.csinodes.get(node.name)
        if not wanted or csinode is None or not csinode.limits:
            return SUCCESS
        attached: dict[str, str] = {}
        for other in node.pods.values():
            if other.placement_volumes and other.key != pod.key:
                attached.update(csi_volumes(_placed_claims(other, self.store), self.store))
        for driver in set(wanted.values()):
            limit = csinode.limits.get(driver)
            if limit is None:
                continue
            ids = {v for v, d in attached.items() if d == driver}
            ids.update(v for v, d in wanted.items() if d == driver)
            if len(ids) > limit:
                return Status.unschedulable(EXCEEDED, plugin=NAME)
        return SUCCESS
