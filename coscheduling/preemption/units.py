"""Who may be evicted for a preemptor, in units that never break a gang.

A plain pod is a unit of its own. A gang's bound members form a *core* of minMember members
and *surplus* members beyond it: the surplus may go one by one, but evicting any of the core
evicts the whole gang (a gang left below its minMember is useless and still holds room).
A gang of subgroups keeps its oldest ``minGroups`` whole subgroups in the core; a subgroup
beyond them is surplus that goes whole, never in part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coscheduling.api.pods import unreadable_error

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
    # The surplus in the batches that stay or go together (None: one pod a batch).
    batches: list[list[Pod]] | None = None

    @property
    def pods(self) -> list[Pod]:
        return self.core + self.surplus

    def surplus_batches(self) -> list[list[Pod]]:
        return self.batches if self.batches is not None else [[p] for p in self.surplus]


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
    gangs from preempting each other in a loop. A pod the scheduler cannot read is never a
    victim, nor is its gang: its priority and the room it frees are unknown.
    """
    plain: list[Unit] = []
    gangs: dict[str, list[Pod]] = {}
    unsettled: set[str] = set()
    for pod in pods:
        if not pod.node_name and pod.group_key and in_flight(pod):
            unsettled.add(pod.group_key)
        if not pod.node_name or pod.deleting or pod.terminal:
            continue
        if unreadable_error(pod):
            if pod.group_key:
                unsettled.add(pod.group_key)
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
        if group.subgroups is not None:
            core, batches = split_subgroups(group, members)
            surplus = [p for batch in batches for p in batch]
            units.append(Unit(core, value, group_key, surplus, batches))
            continue
        keep = min(group.min_member, len(members))
        units.append(Unit(members[:keep], value, group_key, members[keep:]))
    return units


def split_subgroups(group: PodGroup, members: list[Pod]) -> tuple[list[Pod], list[list[Pod]]]:
    """(core, surplus batches) of a gang of subgroups, ``members`` oldest first: the core is
    the oldest ``minGroups`` whole subgroups' minimums, topped up to minMember with members
    in no subgroup, then those subgroups' extra members, then further whole subgroups; a
    subgroup left out goes as one batch, every other extra member alone."""
    subs = group.subgroups
    assert subs is not None
    parts: dict[str, list[Pod]] = {}
    for pod in members:
        parts.setdefault(subs.name_of(pod.labels, pod.membership.role), []).append(pod)
    loose = parts.pop("", [])

    def least(name: str) -> int:
        found = subs.get(name)
        return found.min_member if found is not None else 0

    whole = [n for n in parts if len(parts[n]) >= least(n)]  # in order of their oldest
    core = [p for n in whole[:subs.min_groups] for p in parts[n][:least(n)]]
    extra = loose + [p for n in whole[:subs.min_groups] for p in parts[n][least(n):]]
    batches = [parts[n] for n in whole[subs.min_groups:]]
    while len(core) < group.min_member and (extra or batches):
        core += [extra.pop(0)] if extra else batches.pop(0)
    broken = [p for n in parts if n not in whole for p in parts[n]]
    return core, [[p] for p in extra + broken] + batches
