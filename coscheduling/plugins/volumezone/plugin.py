"""VolumeZone: a pod whose bound volumes carry zone or region labels runs only on nodes of
those zones and regions (a node without any such label is taken to be in all of them, as
in a single-zone cluster)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.volumes import has_claims, pod_claims
from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.status import SKIP, SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.cache import NodeInfo
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.interfaces import Handle

NAME = "VolumeZone"
CONFLICT = "node(s) had no available volume zone"
STATE_KEY = "VolumeZone/constraints"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_LABELS = (ZONE, REGION, BETA_ZONE, BETA_REGION)
# A volume labelled with a beta key still matches a node that has only the GA key.
GA_OF = {BETA_ZONE: ZONE, BETA_REGION: REGION}
# A volume may span several zones: "a__b" (the core API's multi-zone label form).
ZONE_SEPARATOR = "__"


def volume_constraints(labels: Mapping[str, str]) -> list[tuple[str, frozenset[str]]]:
    """(label key, allowed values) for each topology label of a volume."""
    return [(key, frozenset(v.strip() for v in labels[key].split(ZONE_SEPARATOR)))
            for key in TOPOLOGY_LABELS if key in labels]


class VolumeZone(PreFilterPlugin, FilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        if handle is None:
            raise ValueError(f"{NAME} needs the scheduler handle (it reads the volume store)")
        self.store = handle.volumes

    def sign(self, pod: Pod) -> Hashable | None:
        return None if pod.placement_volumes else ()  # in-tree disks are refused anyway

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        if not pod.placement_volumes or not has_claims(pod):
            return SKIP
        claims, why = pod_claims(pod, self.store)
        if why:
            return Status.unresolvable(why, plugin=NAME)
        constraints: list[tuple[str, frozenset[str]]] = []
        for claim in claims:
            if not claim.volume_name:
                continue  # unbound: VolumeBinding decides where it may be bound
            volume = self.store.volumes.get(claim.volume_name)
            if volume is None:
                return Status.unresolvable(
                    f'persistentvolume "{claim.volume_name}" not found', plugin=NAME)
            constraints += volume_constraints(volume.labels)
        if not constraints:
            return SKIP
        state.write(STATE_KEY, constraints)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        constraints = state.read(STATE_KEY)
        labels = node.node.labels if node.node is not None else {}
        if not constraints or not any(key in labels for key in TOPOLOGY_LABELS):
            return SUCCESS
        for key, values in constraints:
            value = labels.get(key, labels.get(GA_OF.get(key, ""), None))
            if value is None or value not in values:
                return Status.unresolvable(CONFLICT, plugin=NAME)
        return SUCCESS
