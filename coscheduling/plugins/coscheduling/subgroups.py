"""Gangs of gangs: a PodGroup split into subgroups (roles such as ps and worker, or the
replicas of a job of replicas), each placed whole or not at all.

The gang starts once ``min_groups`` subgroups can each reach their own minMember and the
gang its minMember in all; a subgroup beyond those is placed later, again whole (never half
a subgroup). The manager asks this module which members to place now, whether what is
placed, waiting and claimed is enough, which waiting members may be released, and (for a
subgroup with ``topology``) places each subgroup in a domain of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coscheduling.framework.gangplan import Chunks, GangStep, InDomain
from coscheduling.plugins.coscheduling.topology import Domain, TopologyDomains

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup, SubGroups
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache

UNASSIGNED = ""
"""A member in no subgroup: it counts toward the gang's minMember only."""

Part = Callable[[list["Pod"]], "GangStep"]
"""How a chunk of members is placed (the plan's leaf for them)."""


def part_of(group: PodGroup, pod: Pod) -> str:
    """The name of the subgroup ``pod`` belongs to in ``group`` ("" for none)."""
    subs = group.subgroups
    return subs.name_of(pod.labels, pod.membership.role) if subs is not None else UNASSIGNED


def minimum(subs: SubGroups, name: str) -> int:
    found = subs.get(name)
    return found.min_member if found is not None else 0


@dataclass
class Tally:
    """Members of a gang per subgroup: those that count (placed, waiting, claimed: or only
    placed and waiting, for Permit) and the pending ones, in the order given."""

    group: PodGroup
    counted: dict[str, int] = field(default_factory=dict)
    pending: dict[str, list[Pod]] = field(default_factory=dict)

    @property
    def subs(self) -> SubGroups:
        assert self.group.subgroups is not None
        return self.group.subgroups

    def add(self, pod: Pod, counts: bool) -> None:
        name = part_of(self.group, pod)
        if counts:
            self.counted[name] = self.counted.get(name, 0) + 1
        else:
            self.pending.setdefault(name, []).append(pod)

    def names(self) -> list[str]:
        """Every subgroup: the listed ones, and those the members name."""
        found = {s.name for s in self.subs.listed} | set(self.counted) | set(self.pending)
        return sorted(found - {UNASSIGNED})

    def complete(self, name: str) -> bool:
        return self.counted.get(name, 0) >= minimum(self.subs, name)

    def can_complete(self, name: str) -> bool:
        return self.counted.get(name, 0) + len(self.pending.get(name, ())) \
            >= minimum(self.subs, name)

    def total(self) -> int:
        """Members that count toward minMember: those of complete subgroups and those in
        none (a half-placed subgroup is no use to the gang)."""
        return sum(n for name, n in self.counted.items()
                   if name == UNASSIGNED or self.complete(name))

    def satisfied(self) -> bool:
        done = sum(1 for name in self.names() if self.complete(name))
        return done >= self.subs.min_groups and self.total() >= self.group.min_member

    def shortfall(self) -> str:
        """Which subgroups are short, with numbers ("" when none is)."""
        short = [f"{name} {self.counted.get(name, 0) + len(self.pending.get(name, ()))}"
                 f"/{minimum(self.subs, name)}"
                 for name in self.names() if not self.can_complete(name)]
        if not short:
            return ""
        done = sum(1 for name in self.names() if self.can_complete(name))
        return (f"subgroups short of their minMember: {', '.join(short)} "
                f"({done} of minGroups {self.subs.min_groups} can be complete)")


def tally(group: PodGroup, members: Iterable[tuple[Pod, bool]]) -> Tally:
    """A Tally of ``(member, whether it counts)`` pairs."""
    found = Tally(group)
    for pod, counts in members:
        found.add(pod, counts)
    return found


def select(found: Tally, pod: Pod, waiting_prefix: str) -> list[Pod] | str:
    """The members to place now, ``pod`` first when it is one of them; or why the gang (or
    ``pod``'s subgroup) waits for more members, starting with ``waiting_prefix``.

    ``found`` counts what is placed, waiting and claimed, and holds the pending members in
    queue order (``pod`` first). Subgroups closest to complete are filled first."""
    subs, chosen = found.subs, []
    own = part_of(found.group, pod)

    def fill(name: str) -> None:
        take = max(0, minimum(subs, name) - found.counted.get(name, 0))
        moved, found.pending[name] = (found.pending.get(name, [])[:take],
                                      found.pending.get(name, [])[take:])
        chosen.extend(moved)
        found.counted[name] = found.counted.get(name, 0) + len(moved)

    order = sorted((n for n in found.names() if not found.complete(n)),
                   key=lambda n: (n != own, -found.counted.get(n, 0), n))
    for name in order:
        done = sum(1 for n in found.names() if found.complete(n))
        if done < subs.min_groups and found.can_complete(name):
            fill(name)
    if sum(1 for n in found.names() if found.complete(n)) < subs.min_groups:
        return f"{waiting_prefix}: {found.shortfall()}"
    if own and not found.complete(own):
        if not found.can_complete(own):
            return (f"{waiting_prefix}: subgroup {own} has {found.counted.get(own, 0)} + "
                    f"{len(found.pending.get(own, ()))} of its minMember "
                    f"{minimum(subs, own)} (a subgroup is placed whole)")
        fill(own)
    short = _fill_total(found, chosen, fill)
    if short:
        return f"{waiting_prefix}: {short}"
    return sorted(chosen, key=lambda p: p.key != pod.key)


def _fill_total(found: Tally, chosen: list[Pod], fill: Callable[[str], None]) -> str:
    """Add members until the gang's minMember is reached: members in no subgroup or in a
    complete one first, then whole subgroups; why not, when it cannot be."""
    need = found.group.min_member - found.total()
    for name in [UNASSIGNED, *found.names()]:
        if need <= 0:
            return ""
        if name == UNASSIGNED or found.complete(name):
            extra = found.pending.get(name, [])[:need]
            found.pending[name] = found.pending.get(name, [])[len(extra):]
            chosen.extend(extra)
            found.counted[name] = found.counted.get(name, 0) + len(extra)
            need -= len(extra)
    for name in found.names():
        if need <= 0:
            return ""
        if not found.complete(name) and found.can_complete(name):
            fill(name)
            need = found.group.min_member - found.total()
    if need <= 0:
        return ""
    return (f"{found.total()} of minMember {found.group.min_member} exist in whole "
            "subgroups")


def releasable(found: Tally, pod: Pod) -> bool:
    """Whether a member counted in ``found`` (placed and waiting) may be let go: the gang
    is satisfied and the member's subgroup complete."""
    name = part_of(found.group, pod)
    return found.satisfied() and (name == UNASSIGNED or found.complete(name))


def status_counts(group: PodGroup, members: Sequence[Pod]) -> list[dict[str, object]]:
    """Per subgroup: its minMember, and how many members exist, are bound, are running."""
    assert group.subgroups is not None
    rows: dict[str, dict[str, object]] = {
        s.name: {"name": s.name, "minMember": s.min_member, "members": 0, "scheduled": 0,
                 "running": 0} for s in group.subgroups.listed}
    for pod in members:
        name = part_of(group, pod)
        if not name or pod.deleting:
            continue
        row = rows.setdefault(name, {"name": name, "minMember": minimum(group.subgroups, name),
                                     "members": 0, "scheduled": 0, "running": 0})
        for key, counts in (("members", True), ("scheduled", bool(pod.node_name)),
                            ("running", bool(pod.node_name) and pod.phase == "Running")):
            row[key] = int(str(row[key])) + int(counts)
    return [rows[name] for name in sorted(rows)]


class SubgroupDomains:
    """The topology domain each subgroup of a gang was admitted into (its own rack, say),
    which the Coscheduling Filter holds the subgroup's members to."""

    def __init__(self, cache: SchedulerCache) -> None:
        self.cache = cache
        self._domains: dict[tuple[str, str], Domain] = {}
        # A what-if's trial holds and forgets its made-up gang's domains on its own thread
        # (on a view of the cache) while the loop holds and forgets real ones.
        self._lock = threading.Lock()

    def of(self, group: PodGroup | None, pod: Pod) -> Domain | None:
        if group is None or group.subgroups is None:
            return None
        return self._domains.get((group.key, part_of(group, pod)))

    def forget(self, group_key: str) -> None:
        with self._lock:
            for key in [k for k in self._domains if k[0] == group_key]:
                del self._domains[key]

    def wanted(self, group: PodGroup) -> bool:
        """Whether any subgroup of ``group`` asks for a topology domain."""
        subs = group.subgroups
        if subs is None:
            return False
        return any(s.topology is not None for s in (*subs.listed, subs.template) if s)

    def plan(self, group: PodGroup, members: list[Pod], part: Part) -> Chunks:
        """``members`` placed subgroup by subgroup, all or none, each subgroup inside a
        domain of its own when it asks for one (``part``: how a chunk's members are
        placed)."""
        chunks: dict[str, list[Pod]] = {}
        for pod in members:
            chunks.setdefault(part_of(group, pod), []).append(pod)
        return Chunks(tuple(self._chunk(group, name, chunk, part)
                            for name, chunk in sorted(chunks.items())))

    def _chunk(self, group: PodGroup, name: str, chunk: list[Pod],
               part: Part) -> tuple[str, GangStep]:
        assert group.subgroups is not None
        sub = group.subgroups.get(name)
        key = (group.key, name)
        if sub is None or sub.topology is None:
            return "", part(chunk)

        def placed() -> list[str]:
            cache = self.cache
            nodes = [p.node_name or cache.assumed_node(p.key) or cache.claimed_node(p.key)
                     for p in cache.group_pods(group.key) if part_of(group, p) == name]
            return [n for n in nodes if n]

        def hold(domain: Domain | None) -> None:
            with self._lock:
                if domain is None:
                    self._domains.pop(key, None)
                else:
                    self._domains[key] = domain

        domains = TopologyDomains(self.cache, sub.topology, chunk, placed, hold)
        return f"subgroup {name}: ", InDomain(domains, part(chunk))
