"""DRF: the order between gangs (kube-batch's drf and priority job order).

Gangs leave the queue by priority (the PodGroup's priorityClassName, else its highest
member's), then by dominant resource share (the largest fraction of any cluster resource
its placed members hold: a gang already holding much waits behind one holding little), then
by age; within a gang, higher-priority members first. It changes only the key the
Coscheduling QueueSort computes, so members of a gang still leave the queue together; it is
enabled at preFilter (where it does nothing) so a profile can turn it on and off.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from coscheduling.api.quantity import PODS, add_into
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import (
    ClusterEventsPlugin,
    GangOrderPlugin,
    PreFilterPlugin,
)
from coscheduling.framework.status import SUCCESS, Status
from coscheduling.preemption.evaluator import gang_priority

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState

NAME = "DRF"


def dominant_share(held: Mapping[str, int], capacity: Mapping[str, int]) -> Fraction:
    """The largest fraction of any resource of ``capacity`` that ``held`` takes."""
    return max((Fraction(amount, capacity[r]) for r, amount in held.items()
                if amount > 0 and capacity.get(r, 0) > 0), default=Fraction(0))


class DRF(PreFilterPlugin, ClusterEventsPlugin, GangOrderPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle
        self.shares: dict[str, Fraction] = {}  # gang -> dominant share, refreshed on rekey
        # gang -> priority, so a key costs O(1) and not a look at every member (refreshed
        # with the shares; a gang first seen between refreshes is looked at once).
        self.priorities: dict[str, int] = {}

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        return SUCCESS

    def gang_key(self, group: PodGroup, pod: Pod, partial: int) -> tuple[Any, ...]:
        """The QueueSort key of a member of ``group`` (``partial`` as Coscheduling has it)."""
        priority = self.priorities.get(group.key)
        if priority is None:
            priority = gang_priority(self.handle, group, self.handle.cache.group_pods(group.key))
        elif self.handle.priorities.priority_class(group.priority_class_name) is None:
            priority = max(priority, pod.priority)  # a member that raises its gang's
        self.priorities[group.key] = priority
        return (-priority, partial, self.shares.get(group.key, Fraction(0)),
                group.created, group.key, -pod.priority, pod.created, pod.key)

    def queue_order_changed(self) -> bool:
        """Recompute every gang's dominant share; True when one moved (re-key the queue)."""
        cache = self.handle.cache
        capacity: dict[str, int] = {}
        for info in cache.nodes():
            if info.node is not None:
                add_into(capacity, info.node.allocatable)
        capacity.pop(PODS, None)
        shares: dict[str, Fraction] = {}
        priorities: dict[str, int] = {}
        for group_key in cache.group_keys():
            held: dict[str, int] = {}
            members = cache.group_pods(group_key)
            group = self.handle.groups.podgroup(group_key)
            if group is not None:
                priorities[group_key] = gang_priority(self.handle, group, members)
            for pod in members:
                if pod.node_name or cache.assumed_node(pod.key):
                    add_into(held, pod.requests)
            share = dominant_share(held, capacity)
            if share:
                shares[group_key] = share
        changed = shares != self.shares or priorities != self.priorities
        self.shares, self.priorities = shares, priorities
        return changed
