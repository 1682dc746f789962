"""What a gang that does not fit is short of: per resource, per topology domain, and in
nodes of a shape the cluster already has ("needs 2 more nodes like gpu-a: 8 nvidia.com/gpu
each").

Room is counted by requests on the nodes each member could use at all (its filters pass
there on the empty cluster: node selectors, taints and size already decided), so a node the
gang may never use does not hide the gap. It is arithmetic for people, not a placement:
whether the gang fits is the admission's answer, not this.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from coscheduling.api.quantity import add_into, format_units

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache
    from coscheduling.framework.nodeinfo import NodeInfo

class Usable(Protocol):
    """Whether a member could go to a node on the empty cluster; members of one ``shape``
    get the same answers (their filters read the same parts of them)."""

    def __call__(self, pod: Pod, info: NodeInfo) -> bool: ...

    def shape(self, pod: Pod) -> object: ...


@dataclass(frozen=True)
class ResourceGap:
    resource: str
    need: int
    free: int
    allocatable: int

    def text(self) -> str:
        return (f"{self.resource}: needs {format_units(self.resource, self.need)}, "
                f"{format_units(self.resource, self.free)} free of "
                f"{format_units(self.resource, self.allocatable)} on the nodes it may use")


@dataclass(frozen=True)
class DomainGap:
    domain: str
    fit_now: int
    fit_empty: int
    need: int

    def text(self) -> str:
        return (f"{self.domain}: room for {self.fit_now} of {self.need} members now, "
                f"{self.fit_empty} when empty")


@dataclass
class Shortfall:
    need: int  # members the gang must place at once
    fit_now: int  # of those, how many the free room holds
    fit_empty: int  # and how many the whole cluster would hold, empty
    resources: list[ResourceGap] = field(default_factory=list)
    domains: list[DomainGap] = field(default_factory=list)
    nodes_needed: str = ""
    # The same for the members the free room cannot hold: what a scale-up would add.
    nodes_to_add: str = ""


def shortfall(cache: SchedulerCache, group: PodGroup, members: Sequence[Pod],
              usable: Usable) -> Shortfall:
    """The gap of ``members`` (the ones the gang must place at once)."""
    nodes = [info for info in cache.nodes() if info.node is not None]
    by_shape: dict[object, list[NodeInfo]] = {}  # a gang's identical members share a list
    eligible = {}
    for member in members:
        shape = usable.shape(member)
        if shape not in by_shape:
            by_shape[shape] = [n for n in nodes if usable(member, n)]
        eligible[member.key] = by_shape[shape]
    found = Shortfall(len(members), _fit(members, eligible, free=True),
                      _fit(members, eligible, free=False))
    found.resources = _resource_gaps(members, eligible)
    found.nodes_needed = _nodes_needed(members, eligible, found.need - found.fit_empty)
    found.nodes_to_add = _nodes_needed(members, eligible, found.need - found.fit_now)
    if group.topology is not None:
        found.domains = _domains(group, members, eligible)
    return found


def _room(info: NodeInfo, free: bool) -> dict[str, int]:
    assert info.node is not None
    room = dict(info.node.allocatable)
    if free:
        for resource in list(room):
            room[resource] -= info.used(resource)
    return room


def _fit(members: Sequence[Pod], eligible: Mapping[str, Sequence[NodeInfo]], free: bool,
         within: frozenset[str] | None = None) -> int:
    """How many members a first-fit by requests places (free room, or empty nodes).

    Room only shrinks as members are placed, so a node that could not hold a member cannot
    hold a later one of the same requests and node list: each such class resumes where the
    last of it went (members times nodes only once per class, not per member)."""
    rooms: dict[str, dict[str, int]] = {}
    resume: dict[tuple[int, tuple[tuple[str, int], ...]], int] = {}
    placed = 0
    for member in members:
        infos = eligible[member.key]
        kind = (id(infos), tuple(sorted(member.requests.items())))
        start = resume.get(kind, 0)
        resume[kind] = len(infos)
        for index in range(start, len(infos)):
            info = infos[index]
            if within is not None and info.name not in within:
                continue
            room = rooms.setdefault(info.name, _room(info, free))
            if all(room.get(r, 0) >= v for r, v in member.requests.items() if v > 0):
                add_into(room, member.requests, -1)
                placed += 1
                resume[kind] = index
                break
    return placed


def _resource_gaps(members: Sequence[Pod],
                   eligible: Mapping[str, Sequence[NodeInfo]]) -> list[ResourceGap]:
    need: dict[str, int] = {}
    for member in members:
        add_into(need, member.requests)
    usable = {info.name: info for infos in eligible.values() for info in infos}
    gaps = []
    for resource, amount in sorted(need.items()):
        if amount <= 0:
            continue
        allocatable = sum(i.node.allocatable.get(resource, 0) for i in usable.values()
                          if i.node is not None)
        free = sum(max(0, (i.node.allocatable.get(resource, 0) if i.node else 0)
                       - i.used(resource)) for i in usable.values())
        if amount > free:
            gaps.append(ResourceGap(resource, amount, free, allocatable))
    return gaps


def _per_node(member: Pod, info: NodeInfo) -> int:
    assert info.node is not None
    asked = [(r, v) for r, v in member.requests.items() if v > 0]
    if not asked:
        return 0
    return min(info.node.allocatable.get(r, 0) // v for r, v in asked)


def _nodes_needed(members: Sequence[Pod], eligible: Mapping[str, Sequence[NodeInfo]],
                  missing: int) -> str:
    """How many more nodes of the best shape the cluster has would hold the members the
    empty cluster cannot ("" when it can hold them all)."""
    if missing <= 0 or not members:
        return ""
    member = members[-1]
    shapes = [(_per_node(member, info), info) for info in eligible[member.key]]
    if not shapes:
        asked = ", ".join(f"{r} {format_units(r, v)}" for r, v in sorted(
            member.requests.items()) if v > 0)
        return (f"no node can hold one member ({asked}, and its node selectors, "
                "affinity and tolerations): needs nodes that can")
    per_node, best = max(shapes, key=lambda s: (s[0], s[1].name))
    assert best.node is not None
    shown = ", ".join(f"{format_units(r, best.node.allocatable.get(r, 0))} {r}"
                      for r, v in sorted(member.requests.items()) if v > 0)
    count = math.ceil(missing / max(per_node, 1))
    return f"needs {count} more node(s) like {best.name}: {shown} each"


def _domains(group: PodGroup, members: Sequence[Pod],
             eligible: Mapping[str, Sequence[NodeInfo]]) -> list[DomainGap]:
    """For each domain of the gang's narrowest topology key, the members it holds: the
    best first, at most five."""
    assert group.topology is not None
    key = group.topology.keys[0]
    values: dict[str, set[str]] = {}
    for infos in eligible.values():
        for info in infos:
            if info.node is not None and key in info.node.labels:
                values.setdefault(info.node.labels[key], set()).add(info.name)
    gaps = [DomainGap(f"{key}={value}", _fit(members, eligible, True, frozenset(names)),
                      _fit(members, eligible, False, frozenset(names)), len(members))
            for value, names in values.items()]
    gaps.sort(key=lambda g: (-g.fit_now, -g.fit_empty, g.domain))
    return gaps[:5]
