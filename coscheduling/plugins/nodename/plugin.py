"""NodeName Filter: honour ``spec.nodeName`` on a pod that is still handed to us."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import FilterPlugin
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"

_REJECTED = Status.unresolvable(REASON, plugin=NAME)


class NodeName(FilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def sign(self, pod: Pod) -> Hashable:
        return pod.spec_node_name

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        wanted = pod.spec_node_name
        if not wanted or wanted == node.name:
            return SUCCESS
        return _REJECTED
