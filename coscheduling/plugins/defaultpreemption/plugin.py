"""DefaultPreemption (PostFilter), as kube-scheduler's: for a pod outside any gang.

A gang preempts as one, from its own admission (see the Coscheduling plugin); this plugin
leaves gang members to it. Being in the profile's PostFilter is also what turns gang
preemption on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import PostFilterPlugin
from coscheduling.framework.status import Code, Status
from coscheduling.preemption import Preemption, describe_victims
from coscheduling.preemption.evaluator import preemptor_of

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle

NAME = "DefaultPreemption"


class DefaultPreemption(PostFilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle
        self.preemption = Preemption(handle)

    def post_filter(self, state: CycleState, pod: Pod,
                    filtered: Mapping[str, Status]) -> Status:
        """Success (with what it did) when victims were evicted and the pod nominated."""
        if pod.group_key:
            return Status(Code.UNSCHEDULABLE)
        refusal = self.preemption.refusal(pod)
        if refusal:
            return Status.unschedulable(f"not preempting: {refusal}")
        self.handle.metrics.preemption_attempts.inc()
        found = self.preemption.for_pod(pod, filtered)
        if found is None:
            return Status.unschedulable(
                "preemption: no node where evicting lower-priority pods makes room")
        node_name, victims = found
        # The nominated room is claimed, so pods that come later do not take it while the
        # victims terminate; the pod's next cycle tries that node first.
        self.handle.cache.claim(pod, node_name)
        self.handle.preemption.evict(victims.pods, preemptor_of(pod), [pod.key])
        self.handle.preemption.nominate(pod, node_name)
        return Status(Code.SUCCESS,
                      (f"preempting {describe_victims(victims)} on node {node_name}",))
