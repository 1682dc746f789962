"""NodeAffinity: ``spec.nodeSelector`` and required node affinity filter, preferred scores.

Filter: every nodeSelector label equal, and at least one required term matching (a term
ANDs its requirements). Score: the sum of the weights of the preferred terms a node matches,
rescaled so the best node scores 100 (kube-scheduler's default normalization).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import (
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
    scale_to_best,
)
from coscheduling.framework.status import SKIP, SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

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


def preferred_weight(pod: Pod, labels: Mapping[str, str], node_name: str) -> int:
    """The sum of the weights of the pod's preferred terms that the node matches."""
    total = 0
    for weight, term in pod.preferred_terms:
        if term.matches(labels, node_name):
            total += weight
    return total


class NodeAffinity(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """Skip Filter for the common pod that constrains nothing, Score for the pod that
        prefers nothing (its scores would all be 0)."""
        if not pod.preferred_terms:
            state.skip_score.add(NAME)
        if not pod.node_selector and not pod.affinity_terms:
            return SKIP
        return SUCCESS

    def sign(self, pod: Pod) -> Hashable:
        if not pod.node_selector and not pod.affinity_terms and not pod.preferred_terms:
            return ()  # the common pod, without building tuples
        return tuple(sorted(pod.node_selector.items())), pod.affinity_terms, pod.preferred_terms

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        info = node.node
        if info is None:
            return _REJECTED
        if matches(pod, info.labels, node.name):
            return SUCCESS
        return _REJECTED

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        info = node.node
        if info is None or not pod.preferred_terms:
            return 0
        return preferred_weight(pod, info.labels, node.name)

    def normalize_scores(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        scale_to_best(scores)
