"""VolumeZone: a pod whose bound volumes carry zone or region labels runs only on nodes of
those zones and regions (a node without any such label is taken to be in all of them, as
in a single-zone cluster)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from coscheduling.framework.status import SKIP, SUCCESS, Status
from coscheduling.plugins.volumebinding.claims import ClaimsPlugin

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import Claim
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.nodeinfo import NodeInfo

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


class VolumeZone(ClaimsPlugin):
    name = NAME

    def pre_filter_claims(self, state: CycleState, pod: Pod, claims: list[Claim]) -> Status:
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
