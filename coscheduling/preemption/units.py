"""Who may be evicted for a preemptor, in units that never break a gang.

A plain pod is a unit of its own. A gang's bound members form a *core* of minMember members
and *surplus* members beyond it: the surplus may go one by one, but evicting any of the core
evicts the whole gang (a gang left below its minMember is useless and still holds room).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod


@dataclass
class Unit:
    """Pods that stay or go together (``core``), and a gang's surplus members."""

    core: list[Pod]
    priority: int
    group_key: str = ""
    surplus: list[Pod] = field(default_factory=list)

    @property
    def pods(self) -> list[Pod]:
        return self.core + self.surplus


def eviction_units(pods: Iterable[Pod], priority: int, own_group: str,
                   group_of: Callable[[str], PodGroup | None],
                   gang_priority: Callable[[PodGroup, list[Pod]], int],
                   in_flight: Callable[[Pod], bool]) -> list[Unit]:
    """The units a preemptor of ``priority`` may evict, from the cluster's ``pods``.

    Only bound, running pods of strictly lower priority are victims (a gang's priority is
    its own, see ``gang_priority``); pods in flight (``in_flight``: assumed, waiting at
    Permit, being bound) and the preemptor's own gang never are, nor is a gang with a
    member in flight: its bound members are not all it holds, and evicting them would
    leave the rest bound below minMember. Strictly lower on both sides is what keeps two
    gangs from preempting each other in a loop.
    """
    plain: list[Unit] = []
    gangs: dict[str, list[Pod]] = {}
    unsettled: set[str] = set()
    for pod in pods:
        if not pod.node_name and pod.group_key and in_flight(pod):
            unsettled.add(pod.group_key)
        if not pod.node_name or pod.deleting or pod.terminal:
            continue
        group = group_of(pod.group_key) if pod.group_key else None
        if group is None:
            if pod.priority < priority:
                plain.append(Unit([pod], pod.priority))
        elif pod.group_key != own_group:
            gangs.setdefault(pod.group_key, []).append(pod)
    units = plain
    for group_key, members in gangs.items():
        if group_key in unsettled:
            continue
        group = group_of(group_key)
        assert group is not None
        value = gang_priority(group, members)
        if value >= priority:
            continue
        # Oldest members form the core; the newest are the surplus to give up first.
        members.sort(key=lambda p: (p.created, p.key))
        keep = min(group.min_member, len(members))
        units.append(Unit(members[:keep], value, group_key, members[keep:]))
    return units
