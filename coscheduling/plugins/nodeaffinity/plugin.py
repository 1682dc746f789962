"""NodeAffinity: ``spec.nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution``.

Both must hold: every nodeSelector label equal, and at least one required term matching
(a term ANDs its requirements). Preferred affinity is not scored.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.status import SKIP, SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.cache import NodeInfo
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.interfaces import Handle

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"

_REJECTED = Status.unresolvable(REASON, plugin=NAME)


def matches(pod: Pod, labels: Mapping[str, str], node_name: str) -> bool:
    """Whether a node with ``labels`` satisfies the pod's selector and required affinity."""
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    terms = pod.affinity_terms
    if not terms:
        return True
    for term in terms:  # noqa: SIM110 - a loop, not a generator, on the Filter hot path
        if term.matches(labels, node_name):
            return True
    return False


class NodeAffinity(PreFilterPlugin, FilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """Skip Filter for the common pod that constrains nothing."""
        if not pod.node_selector and not pod.affinity_terms:
            return SKIP
        return SUCCESS

    def sign(self, pod: Pod) -> Hashable:
        return tuple(sorted(pod.node_selector.items())), pod.affinity_terms

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        info = node.node
        if info is None:
            return _REJECTED
        if matches(pod, info.labels, node.name):
            return SUCCESS
        return _REJECTED
