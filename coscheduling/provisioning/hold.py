"""Room a provisioned scale-up added is held for its gang until the gang is placed there.

The API server does not know that the nodes the autoscaler added are a gang's: without a
hold the next small pods in the queue take them, and the gang (all or nothing) fits no
better than before its request. So once the gang's request is Provisioned, the room its
missing members would take (on the nodes that joined since it asked first, then on room
free elsewhere) is claimed in the cache under placeholders: used, to every filter of every
other pod or gang. The gang's own admission is lent that room. The hold is planned again
when nodes join while it is incomplete (the autoscaler may answer before its nodes boot).
It ends when the gang is placed (or preempts for its room), is deleted, its request is no
longer Provisioned, or ``provisionedHoldSeconds`` after it began; it is not made again for
that request.

All methods run under ``cache.lock``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from coscheduling.api.membership import NO_GROUP
from coscheduling.api.pods import Pod
from coscheduling.api.quantity import CPU, PODS, add_into, format_amounts

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup


class ClaimCache(Protocol):
    @property
    def change_seq(self) -> int: ...
    def changed_since(self, seq: int) -> list[str] | None: ...
    def node_names(self) -> list[str]: ...
    def node(self, name: str) -> object | None: ...
    def claim(self, pod: Pod, node_name: str) -> None: ...
    def drop_claim(self, pod_key: str) -> None: ...


@dataclass
class Hold:
    """One gang's hold, for one request."""

    namespace: str
    name: str  # the gang's name (the placeholders are named after it)
    request: str
    before: frozenset[str]  # the nodes there when the request was asked
    priority: int = 0
    until: float = 0.0  # 0: not begun (the request is not Provisioned yet)
    planned_at: int = -1  # the cache's change_seq after the last plan (-1: none yet)
    room: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> held
    complete: bool = False
    announced: bool = False  # the gang was told its room is held
    ended: bool = False
    lent: bool = False

    def placeholder_key(self, node: str) -> str:
        return f"{self.namespace}/{self.name}~provisioned~{node}"

    def describe(self) -> str:
        return ", ".join(f"{node} ({_amounts(room)})" for node, room in sorted(self.room.items()))


def _amounts(room: dict[str, int]) -> str:
    return ", ".join(f"{r} {v}" for r, v in sorted(format_amounts(room).items()))


def plan_room(members: Sequence[Pod], nodes: Sequence[str],
              place: Callable[[Pod, Sequence[str]], str]) -> tuple[dict[str, dict[str, int]],
                                                                  int]:
    """Room per node for ``members``, each on the first of ``nodes`` that ``place`` finds
    it fits on (``place`` counts the members placed before it); and how many were placed."""
    room: dict[str, dict[str, int]] = {}
    placed = 0
    for member in members:
        node = place(member, nodes)
        if not node:
            continue
        placed += 1
        add_into(room.setdefault(node, {}),
                 {r: v for r, v in member.requests.items() if r != PODS})
    return room, placed


class ProvisionedHolds:
    """The gangs' holds (keyed by group key)."""

    def __init__(self, cache: ClaimCache, seconds: float) -> None:
        self.cache = cache
        self.seconds = seconds
        self._by_group: dict[str, Hold] = {}

    def of(self, group_key: str) -> Hold | None:
        return self._by_group.get(group_key)

    def asked(self, group: PodGroup, request: str, nodes: Iterable[str]) -> None:
        """The gang asked ``request``: the nodes there now are not the ones it brings."""
        self.release(group.key)
        self._by_group[group.key] = Hold(group.namespace, group.name, request,
                                         frozenset(nodes))

    def due(self, provisioned: Callable[[str, str], bool]) -> list[tuple[str, list[str]]]:
        """(gang, nodes to plan over: the new ones first) for every hold to plan now: its
        request is Provisioned and it was not planned yet, or nodes that joined since the
        gang asked changed (joined, became ready...) while it is incomplete, or one of its
        nodes is gone."""
        found = []
        for group_key, hold in self._by_group.items():
            if hold.ended or not provisioned(group_key, hold.request):
                continue
            if hold.planned_at >= 0 and not self._stale(hold):
                continue
            current = set(self.cache.node_names())
            found.append((group_key, sorted(current - hold.before)
                          + sorted(current & hold.before)))
        return found

    def _stale(self, hold: Hold) -> bool:
        """Checked at every pod's cycle while a hold lives: looks at its own nodes and the
        change log, never at every node."""
        if any(self.cache.node(name) is None for name in hold.room):
            return True
        if hold.complete:
            return False
        changed = self.cache.changed_since(hold.planned_at)
        return changed is None or not set(changed) <= hold.before

    def hold(self, group_key: str, room: dict[str, dict[str, int]], complete: bool,
             priority: int, now: float) -> bool:
        """Claim ``room`` for the gang (instead of what it held); its time starts with the
        first call. True when it holds room for the first time (the gang is told)."""
        hold = self._by_group[group_key]
        self._drop(hold)
        if not hold.until:
            hold.until = now + self.seconds
        hold.room, hold.complete, hold.priority = room, complete, priority
        self._claim(hold)
        hold.planned_at = self.cache.change_seq  # its own claims are no reason to plan again
        first = bool(room) and not hold.announced
        hold.announced = hold.announced or first
        return first

    def lend(self, group_key: str) -> None:
        """The gang's own admission (or its replanning) may use the room held for it."""
        hold = self._by_group.get(group_key)
        if hold is not None and not hold.lent:
            self._drop(hold)
            hold.lent = True

    def restore(self, group_key: str) -> None:
        hold = self._by_group.get(group_key)
        if hold is not None and hold.lent:
            self._claim(hold)

    def release(self, group_key: str) -> Hold | None:
        """The gang was placed or deleted: its room is free; no new hold for this request.
        Returns the hold when it held room."""
        hold = self._by_group.get(group_key)
        if hold is None or hold.ended:
            return None
        self._drop(hold)
        hold.ended = True
        return hold if hold.room else None

    def forget(self, group_key: str) -> None:
        self.release(group_key)
        self._by_group.pop(group_key, None)

    def held(self) -> dict[str, Hold]:
        """Holds holding room now (group key -> hold)."""
        return {k: h for k, h in self._by_group.items() if h.room and not h.ended}

    def expired(self, now: float) -> list[tuple[str, Hold]]:
        """Holds past their time, released."""
        gone = [(k, h) for k, h in self.held().items() if h.until <= now]
        for group_key, _ in gone:
            self.release(group_key)
        return gone

    def _claim(self, hold: Hold) -> None:
        hold.lent = False
        for node, room in hold.room.items():
            namespace, name = hold.placeholder_key(node).split("/", 1)
            self.cache.claim(Pod(namespace=namespace, name=name, uid="",
                                 priority=hold.priority, requests=dict(room),
                                 nonzero_cpu=room.get(CPU, 0),
                                 nonzero_memory=room.get("memory", 0), membership=NO_GROUP),
                             node)

    def _drop(self, hold: Hold) -> None:
        for node in hold.room:
            self.cache.drop_claim(hold.placeholder_key(node))
