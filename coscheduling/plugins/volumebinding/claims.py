"""What the four volume plugins share: they read the volume store through the handle, sign
no pod that has placement volumes, skip pods without claims, and refuse a pod whose claims
cannot be used (missing, being deleted, not owned, unreadable) with the claim named."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.volumes import has_claims, pod_claims
from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.status import SKIP, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import Claim
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle


class ClaimsPlugin(PreFilterPlugin, FilterPlugin):
    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        if handle is None:
            raise ValueError(f"{self.name} needs the scheduler handle (it reads the volume "
                             "store)")
        self.handle = handle
        self.store = handle.volumes

    def sign(self, pod: Pod) -> Hashable | None:
        """Claims make the answer depend on volumes, not only on the node: no signature
        (pods with in-tree disks are refused anyway)."""
        return None if pod.placement_volumes else ()

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        if not pod.placement_volumes or not has_claims(pod):
            return SKIP
        claims, why = pod_claims(pod, self.store)
        if why:
            return Status.unresolvable(why, plugin=self.name)
        return self.pre_filter_claims(state, pod, claims)

    @abstractmethod
    def pre_filter_claims(self, state: CycleState, pod: Pod, claims: list[Claim]) -> Status:
        """PreFilter of a pod whose claims all exist and may be used."""
