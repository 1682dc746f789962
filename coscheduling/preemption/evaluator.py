"""Preemption as the plugins ask for it: for one pod on one node, or for a whole gang.

The victim search itself is in :mod:`.search`; this module knows the scheduler: which pods
may be evicted (:mod:`.units`), what a gang's priority is, which evictions break a
PodDisruptionBudget, and whether a preemptor is already waiting for its victims to go.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from coscheduling.framework.status import Code, Status
from coscheduling.preemption import pdb
from coscheduling.preemption.search import Victims, best, choose
from coscheduling.preemption.units import Unit, eviction_units

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle

NEVER = "Never"

class Preemption:
    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    # -- who may preempt whom -------------------------------------------------------------
    def gang_priority(self, group: PodGroup, members: Sequence[Pod]) -> int:
        return gang_priority(self.handle, group, members)

    def units(self, priority: int, own_group: str = "") -> list[Unit]:
        """What a preemptor of ``priority`` may evict: none, found without a look at every
        pod, when no pod is of lower priority and no PodGroup names a PriorityClass (that
        could put a gang below its members' priority)."""
        lowest = self.handle.cache.lowest_priority()
        if (lowest is None or lowest >= priority) and not any(
                g.priority_class_name for g in self.handle.groups.podgroups().values()):
            return []
        # Pods this scheduler evicted already are going anyway: evicting them again frees
        # nothing, and their room is promised to the preemptor they were evicted for.
        leaving, cache = self.handle.preemption.evicted, self.handle.cache
        return eviction_units((p for p in cache.pods() if not leaving(p)), priority, own_group,
                              self.handle.groups.podgroup, self.gang_priority,
                              lambda p: cache.is_assumed(p.key))

    def violations(self, pods: Sequence[Pod]) -> set[str]:
        return pdb.violations(self.handle.priorities.budgets(), pods)

    def refusal(self, pod: Pod) -> str:
        """Why ``pod`` may not preempt now ("" if it may): its policy says Never, or it
        already evicted pods on its nominated node that have not gone yet."""
        if pod.preemption_policy == NEVER:
            return "preemptionPolicy is Never"
        left = self.handle.preemption.victims_left(preemptor_of(pod))
        if left:
            return (f"waiting for the {left} pod(s) it preempted to terminate (nominated "
                    f"node {self.handle.cache.claimed_node(pod.key) or 'released'})")
        return ""

    # -- searching ------------------------------------------------------------------------
    def for_pod(self, pod: Pod,
                filtered: Mapping[str, Status]) -> tuple[str, Victims] | None:
        """The node to preempt on and its victims, among the nodes where ``pod`` failed
        only for reasons evictions can change."""
        cache = self.handle.cache
        by_node: dict[str, list[Unit]] = {}
        for unit in self.units(pod.priority):
            for node_name in {p.node_name for p in unit.pods}:
                by_node.setdefault(node_name, []).append(unit)
        candidates = []
        for node_name, status in filtered.items():
            info = cache.node(node_name)
            units = by_node.get(node_name)
            if status.code != Code.UNSCHEDULABLE or info is None or not units:
                continue
            found = choose(cache, units, _fits_on(self.handle, pod, node_name),
                           self.violations)
            if found is not None:
                candidates.append((node_name, found))
        return best(candidates)

    def for_gang(self, group: PodGroup, members: Sequence[Pod],
                 place: Callable[[], str]) -> Victims | None:
        """Victims that let every missing member of the gang in, as ``place`` (the gang's
        own admission, which claims on success) would place them; None if none do. Victims
        its queue reclaims are announced (events, a metric) here."""
        found, reclaim = self.search_gang(group, members, place)
        if found is not None and reclaim:
            self.handle.gangs.reclaimed(group, found)
        return found

    def search_gang(self, group: PodGroup, members: Sequence[Pod],
                    place: Callable[[], str]) -> tuple[Victims | None, bool]:
        """The search of :meth:`for_gang` alone, acting on nothing (a what-if asks it too):
        (victims or None, whether they are reclaimed by the gang's queue rather than
        preempted for priority)."""
        cache = self.handle.cache

        def fits() -> bool:
            with cache.transaction():  # the trial's claims are discarded
                return not place()

        everyone = [*members, *(p for p in cache.group_pods(group.key) if p.node_name)]
        units = self.units(self.gang_priority(group, everyone), group.key)
        found = choose(cache, units, fits, self.violations) if units else None
        if found is not None:
            return found, False
        units = self.handle.gangs.reclaimable(group, members)
        found = choose(cache, units, fits, self.violations) if units else None
        return found, found is not None


def preemptor_of(pod: Pod) -> str:
    """How a plain pod is named as a preemptor (in the ledger, and to its victims)."""
    return f"pod {pod.key}"


def gang_preemptor(group_key: str) -> str:
    """How a gang is named as a preemptor (in the ledger, and to its victims)."""
    return f"gang {group_key}"


def gang_priority(handle: Handle, group: PodGroup, members: Sequence[Pod]) -> int:
    """The PodGroup's PriorityClass if it names one that exists, else its highest member's
    priority."""
    if group.priority_class_name:
        value = handle.priorities.priority_class(group.priority_class_name)
        if value is not None:
            return value
    return max((m.priority for m in members), default=0)


def _fits_on(handle: Handle, pod: Pod, node_name: str) -> Callable[[], bool]:
    def fits() -> bool:
        info = handle.cache.node(node_name)
        return info is not None and handle.runner.filter_node(pod, info).ok
    return fits


def describe_victims(victims: Victims) -> str:
    """``3 pods (ns/a, ns/b, ns/c)``, for messages and events."""
    names = ", ".join(sorted(p.key for p in victims.pods)[:10])
    more = "" if len(victims.pods) <= 10 else f", and {len(victims.pods) - 10} more"
    return f"{len(victims.pods)} pod(s) ({names}{more})"
