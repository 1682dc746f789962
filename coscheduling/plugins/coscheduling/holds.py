"""Held slots: a running gang's lost member's room, kept for its replacement.

When one member of a gang that reached minMember dies and its controller recreates it, the
freed room would otherwise go to whoever is next in the queue, and the gang would be stuck
one member short while it holds everything else. A hold is a claim in the cache, under a
placeholder of the lost pod, that no other pod can take; the group's next pending member
takes it over if it fits there. Holds run out after the PodGroup's
``spec.replacementHoldSeconds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle


@dataclass(frozen=True)
class Hold:
    """A claim in the cache under ``key`` (a placeholder of the pod ``lost``) on ``node``,
    until ``until``."""

    key: str
    node: str
    until: float
    lost: str


class HeldSlots:
    """The holds of every group. All methods run under ``cache.lock``."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self._holds: dict[str, list[Hold]] = {}

    def __contains__(self, group_key: object) -> bool:
        return group_key in self._holds

    def __bool__(self) -> bool:
        return bool(self._holds)

    def of(self, group_key: str) -> tuple[Hold, ...]:
        return tuple(self._holds.get(group_key, ()))

    def hold(self, lost: Pod, group: PodGroup) -> Hold | None:
        """Hold ``lost``'s room if its gang had reached minMember (with it)."""
        if group.replacement_hold_seconds <= 0 or not lost.node_name:
            return None
        cache = self.handle.cache
        bound = sum(1 for m in cache.group_pods(group.key)
                    if m.node_name and not m.terminal and m.key != lost.key)
        if bound + 1 < group.min_member or cache.node(lost.node_name) is None:
            return None
        placeholder = replace(lost, name=f"{lost.name}~held-{lost.uid[:8]}", node_name="")
        cache.claim(placeholder, lost.node_name)
        held = Hold(placeholder.key, lost.node_name,
                    self.handle.clock.now() + group.replacement_hold_seconds, lost.key)
        self._holds.setdefault(group.key, []).append(held)
        return held

    def drop_if_gone(self, group_key: str, lost: str) -> bool:
        """A gang with no member bound any more is being torn down, not repaired: its holds
        would only keep others out. True if holds were dropped."""
        if group_key not in self._holds or any(
                m.node_name and not m.terminal and m.key != lost
                for m in self.handle.cache.group_pods(group_key)):
            return False
        self.drop(group_key)
        return True

    def drop(self, group_key: str) -> None:
        for held in self._holds.pop(group_key, ()):
            self.handle.cache.drop_claim(held.key)

    def take(self, pod: Pod, fits: Callable[[str], bool]) -> str:
        """Hand one of its gang's holds to ``pod``: a claim on the held node if it fits
        there (its node, then; "" and the room set free otherwise)."""
        holds = self._holds.get(pod.group_key)
        if not holds:
            return ""
        held = holds.pop(0)
        if not holds:
            del self._holds[pod.group_key]
        cache = self.handle.cache
        cache.drop_claim(held.key)
        if fits(held.node):
            cache.claim(pod, held.node)
            return held.node
        return ""

    def expire(self, now: float) -> list[tuple[str, Hold]]:
        """Drop the holds whose time ran out; (group, hold) for each."""
        expired = []
        for group_key, holds in list(self._holds.items()):
            for held in [h for h in holds if h.until <= now]:
                holds.remove(held)
                self.handle.cache.drop_claim(held.key)
                expired.append((group_key, held))
            if not holds:
                del self._holds[group_key]
        return expired
