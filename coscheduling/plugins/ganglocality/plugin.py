"""GangLocality: a gang member scores a node by the share of its gang already there.

Members of a gang talk to each other (parameter servers and workers, MPI ranks, NCCL
rings), so packing them is worth more than the usual spreading. Without this plugin a gang
is only pulled together on ties (see ``Placer``); with it, by ``weight`` beyond ties.
Opt-in (not in the default profile): its node tables are per gang, not shared between
gangs of the same shape.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import MAX_NODE_SCORE, ScorePlugin

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "GangLocality"


class GangLocality(ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle

    def _size(self, pod: Pod) -> int:
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        return group.min_member if group is not None else 0

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        """100 * (members of the gang on this node) / minMember, at most 100; 0 for pods
        outside a gang."""
        size = self._size(pod)
        if size <= 0:
            return 0
        members = node.group_members(pod.group_key, excluding=pod.key)
        return min(MAX_NODE_SCORE, members * MAX_NODE_SCORE // size)

    def sign(self, pod: Pod) -> Hashable:
        """The score reads the node's own pods and claims, the gang and its size."""
        return (pod.group_key, self._size(pod)) if pod.group_key else ()
