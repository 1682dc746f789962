"""The gang extension points of a profile (kube-scheduler's workload manager role).

Three decisions about gangs belong to plugins other than the one that keeps gangs: the order
between gangs (:class:`GangOrderPlugin`, DRF), what a gang may take back from queues over
their share and how far its reservation may grow (:class:`QueueSharePlugin`, Proportion),
and the gangs' own claims and reservations (:class:`GangKeeperPlugin`, Coscheduling). A
plugin implements the interface; the scheduler installs the profile's plugins here once they
are built, and each plugin calls the others only through these points, each with a neutral
answer when the profile has no plugin for it. No plugin writes to the Handle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import (
    GangKeeperPlugin,
    GangOrderPlugin,
    Plugin,
    QueueSharePlugin,
)

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.api.queues import Queue

def _the_one(plugins: Sequence[Plugin], kind: type[Any]) -> Any:
    """The profile's plugin implementing ``kind``; two are a profile error (which one
    decides would depend on the order they were built in)."""
    found = [p for p in plugins if isinstance(p, kind)]
    if len(found) > 1:
        names = ", ".join(sorted(p.name for p in found))
        raise TypeError(f"plugins {names} all implement {kind.__name__}; "
                        "a profile enables at most one of them")
    return found[0] if found else None


class GangExtensions:
    """The gang extension points, filled by :meth:`install`."""

    def __init__(self) -> None:
        self._order: GangOrderPlugin | None = None
        self._shares: QueueSharePlugin | None = None
        self._keeper: GangKeeperPlugin | None = None

    def install(self, plugins: Iterable[Plugin]) -> None:
        """The profile's plugins, once built: each point gets the one implementing it."""
        built = list(plugins)
        self._order = _the_one(built, GangOrderPlugin)
        self._shares = _the_one(built, QueueSharePlugin)
        self._keeper = _the_one(built, GangKeeperPlugin)

    def order(self, group: PodGroup, pod: Pod, partial: int) -> tuple[Any, ...] | None:
        """The order plugin's QueueSort key for a member; None without one."""
        return self._order.gang_key(group, pod, partial) if self._order is not None else None

    def reclaimable(self, group: PodGroup, members: Sequence[Pod]) -> list[Any]:
        return self._shares.reclaimable(group, members) if self._shares is not None else []

    def reclaimed(self, group: PodGroup, victims: Any) -> None:
        if self._shares is not None:
            self._shares.reclaimed(group, victims)

    def may_reserve(self, group_key: str, queue: str, more: Mapping[str, int]) -> bool:
        return self._shares is None or self._shares.may_reserve(group_key, queue, more)

    def queue(self, name: str) -> Queue | None:
        """The Queue record the share plugin keeps (a gang's per-queue settings); None
        without one."""
        return self._shares.queue(name) if self._shares is not None else None

    @property
    def kept(self) -> bool:
        """Whether a plugin keeps gangs (their claims can be given back)."""
        return self._keeper is not None

    def give_back(self, group_key: str, reason: str) -> None:
        if self._keeper is not None:
            self._keeper.give_back(group_key, reason)

    def reserved_room(self) -> Mapping[str, tuple[str, Mapping[str, int]]]:
        return self._keeper.reserved_room() if self._keeper is not None else {}
