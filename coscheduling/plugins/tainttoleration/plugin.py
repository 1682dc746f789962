"""TaintToleration: hard taints (NoSchedule, NoExecute) filter, PreferNoSchedule scores."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import (
    FilterPlugin,
    ScorePlugin,
    scale_to_best,
)
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.selectors import Taint, Toleration
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "TaintToleration"
REASON_PREFIX = "node(s) had untolerated taint "
PREFER_NO_SCHEDULE = "PreferNoSchedule"
_HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    for toleration in tolerations:  # noqa: SIM110 - no generator on the Filter hot path
        if toleration.tolerates(taint):
            return True
    return False


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration covers, or None."""
    for taint in taints:
        if taint.effect in _HARD_EFFECTS and not _tolerated(taint, tolerations):
            return taint
    return None


class TaintToleration(FilterPlugin, ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def sign(self, pod: Pod) -> Hashable:
        return pod.tolerations

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        info = node.node
        if info is None or not info.taints:
            return SUCCESS
        taint = untolerated(info.taints, pod.tolerations)
        if taint is None:
            return SUCCESS
        return Status.unresolvable(REASON_PREFIX + taint.describe(), plugin=NAME)

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        """The number of PreferNoSchedule taints the pod does not tolerate (lower is better)."""
        info = node.node
        if info is None:
            return 0
        count = 0
        for taint in info.taints:
            if taint.effect == PREFER_NO_SCHEDULE and not _tolerated(taint, pod.tolerations):
                count += 1
        return count

    def normalize_scores(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        """Reverse onto 0..100: the fewest soft taints score 100, the most score 0."""
        scale_to_best(scores, reverse=True)
