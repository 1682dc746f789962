"""Reclaim: a queue below its deserved share takes back room other queues borrowed.

Only gangs of queues over their share with ``reclaimable: true`` are offered, and of each
such queue only as many gangs as its excess over its share, less what is leaving already
and what its gangs not started yet hold in claims (they give that back instead): reclaim
never pushes a queue below what it deserves. The preemption search then evicts the fewest
of them (whole gangs or surplus members, never a broken gang), and nothing at all if the
gang would still not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from coscheduling.api.quantity import add_into
from coscheduling.plugins.proportion.book import Book, QueueLedger
from coscheduling.preemption.units import Unit, eviction_units

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle

EVERYONE = 2**62  # a priority above any pod's: reclaim is between queues, not priorities


def within_share(ledger: QueueLedger, need: Mapping[str, int]) -> bool:
    return all(ledger.allocated.get(r, 0) + v <= ledger.deserved.get(r, 0)
               for r, v in need.items())


def excess(ledger: QueueLedger) -> dict[str, int]:
    """What the queue holds beyond its deserved share, by resource."""
    return {r: v - ledger.deserved.get(r, 0) for r, v in ledger.allocated.items()
            if v > ledger.deserved.get(r, 0)}


def _ratio(ledger: QueueLedger, capacity: Mapping[str, int]) -> Fraction:
    return max((Fraction(v, capacity[r]) for r, v in excess(ledger).items()
                if capacity.get(r)), default=Fraction(0))


def reclaimable_units(handle: Handle, book: Book, group: PodGroup, need: Mapping[str, int],
                      gang_priority: Callable[[PodGroup, list[Pod]], int]) -> list[Unit]:
    """Units the gang may evict to reclaim its share, least willingly evicted first (the
    search reprieves in that order among equal priorities): the most over-share queue's
    gangs last."""
    ledger = book.ledgers.get(group.queue)
    if ledger is None or not within_share(ledger, need):
        return []
    donors = sorted(
        (other for name, other in book.ledgers.items()
         if name != group.queue and other.queue.reclaimable
         and any(r in need for r in excess(other))),
        key=lambda other: _ratio(other, book.capacity))
    cache = handle.cache
    units: list[Unit] = []
    for donor in donors:
        pods = [p for key in cache.group_keys()
                if (g := handle.groups.podgroup(key)) is not None and g.queue == donor.queue.name
                for p in cache.group_pods(key)]
        # Pods already evicted (for an earlier reclaim) are on their way out: not offered
        # again, and no longer part of the queue's excess.
        going = [p for p in pods if handle.preemption.evicted(p)]
        offered = eviction_units([p for p in pods if not handle.preemption.evicted(p)], EVERYONE,
                                 group.key, handle.groups.podgroup, gang_priority,
                                 lambda p: cache.is_assumed(p.key))
        # Lowest priority, then newest, offered first, while the queue stays at its share.
        offered.sort(key=lambda u: (u.priority, -max(p.created for p in u.pods)))
        budget = excess(donor)
        _within(going, budget, force=True)
        # Gangs of the donor that hold only claims give them back before they start (see
        # Proportion's give-back): that part of the excess is no running gang's to lose.
        for claims in donor.claim_only.values():
            for resource in budget:
                budget[resource] -= claims.get(resource, 0)
        taken: list[Unit] = []
        for unit in offered:
            if not unit.group_key:
                continue
            if _within(unit.pods, budget):
                taken.append(unit)
                continue
            # Too big to go whole: its surplus (members, or whole subgroups) may still go,
            # newest first.
            batches = [b for b in reversed(unit.surplus_batches()) if _within(b, budget)]
            if batches:
                taken.append(Unit([], unit.priority, unit.group_key,
                                  [p for b in batches for p in b], batches))
        units += reversed(taken)
    return units


def _within(pods: Sequence[Pod], budget: dict[str, int], force: bool = False) -> bool:
    """Take ``pods`` out of ``budget`` (only the resources the queue is over on) if they
    fit in it (``force``: whether they fit or not)."""
    held: dict[str, int] = {}
    for pod in pods:
        add_into(held, pod.requests)
    if not force and any(held.get(r, 0) > left for r, left in budget.items()):
        return False
    for r in budget:
        budget[r] -= held.get(r, 0)
    return True
