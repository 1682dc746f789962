"""NodeUnschedulable Filter: ``spec.unschedulable`` (kubectl cordon) keeps new pods off."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.selectors import Taint
from coscheduling.framework.interfaces import FilterPlugin
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
"""The taint a cordoned node implies; tolerating it lets a pod (a DaemonSet's) through."""

_REJECTED = Status.unresolvable(REASON, plugin=NAME)


class NodeUnschedulable(FilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def sign(self, pod: Pod) -> Hashable:
        return pod.tolerations

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        info = node.node
        if info is None or not info.unschedulable:
            return SUCCESS
        for toleration in pod.tolerations:
            if toleration.tolerates(UNSCHEDULABLE_TAINT):
                return SUCCESS
        return _REJECTED
