"""The queues' ledger: what each queue holds and asks for, and its deserved share.

Read from the scheduler's cache under its lock. A gang is *admitted* once any member is
placed, assumed, waiting at Permit or holds a claim; until then it is *pending* and asks for
its need (the requests of minMember of its members).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from coscheduling.api.quantity import PODS, add_into, format_amounts, format_units
from coscheduling.api.queues import DEFAULT_QUEUE, Queue
from coscheduling.plugins.proportion.shares import Demand, deserved_shares

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle


@dataclass(slots=True)
class QueueLedger:
    queue: Queue
    allocated: dict[str, int] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)  # pending gangs' needs
    pending: int = 0
    running: int = 0
    waiting_gangs: list[str] = field(default_factory=list)
    deserved: dict[str, int] = field(default_factory=dict)
    # Gangs admitted only by the room they claim (no member bound or assumed yet) -> what
    # their claims hold: room a gang that has not started may still give back.
    claim_only: dict[str, dict[str, int]] = field(default_factory=dict)

    def over_share(self, resource: str) -> int:
        return self.allocated.get(resource, 0) - self.deserved.get(resource, 0)


@dataclass(slots=True)
class Book:
    capacity: dict[str, int]
    ledgers: dict[str, QueueLedger]


def known_queue(queues: Mapping[str, Queue], name: str) -> Queue | None:
    """The ``default`` Queue exists implicitly until the scheduler has created it."""
    queue = queues.get(name)
    if queue is None and name == DEFAULT_QUEUE:
        return Queue(DEFAULT_QUEUE)
    return queue


def is_placed(handle: Handle, pod: Pod) -> bool:
    """Bound, assumed or claimed on a node that exists: a pod left bound to a deleted node
    (no kubelet or pod GC removed it yet) holds no room a queue could be charged for."""
    cache = handle.cache
    node = pod.node_name or cache.assumed_node(pod.key) or cache.claimed_node(pod.key)
    return bool(node) and cache.node(node) is not None


def gang_need(group: PodGroup, members: Iterable[Pod]) -> dict[str, int]:
    """What admitting the gang takes: the requests of minMember of its live members."""
    live = sorted((p for p in members if not p.deleting and not p.terminal),
                  key=lambda p: p.key)
    need: dict[str, int] = {}
    for pod in live[:group.min_member]:
        add_into(need, pod.requests)
    return {r: v for r, v in need.items() if v > 0}


def admitted(handle: Handle, members: Iterable[Pod]) -> bool:
    return any(is_placed(handle, p) for p in members)


def build_book(handle: Handle, queues: Mapping[str, Queue]) -> Book:
    """Every queue's ledger and deserved share, from the cache (under its lock). What the
    queues divide is the nodes' allocatable less what pods outside every queue hold (pods
    without a PodGroup, other schedulers' pods): room nobody can give them."""
    cache = handle.cache
    capacity: dict[str, int] = {}
    used: dict[str, int] = {}
    for info in cache.nodes():
        if info.node is not None:
            add_into(capacity, info.node.allocatable)
            add_into(used, info.requested)
            add_into(used, info.claimed)
    capacity.pop(PODS, None)
    ledgers = {name: QueueLedger(queue) for name, queue in queues.items()}
    if DEFAULT_QUEUE not in ledgers:
        ledgers[DEFAULT_QUEUE] = QueueLedger(Queue(DEFAULT_QUEUE))
    for group_key in cache.group_keys():
        group = handle.groups.podgroup(group_key)
        members = cache.group_pods(group_key)
        ledger = ledgers.get(group.queue) if group is not None and group.valid else None
        if group is None or ledger is None:
            continue
        placed = [p for p in members if is_placed(handle, p)]
        for pod in placed:
            add_into(ledger.allocated, pod.requests)
        if placed:
            ledger.running += 1
            if not any(p.node_name or cache.is_assumed(p.key) for p in placed):
                claims: dict[str, int] = {}
                for pod in placed:
                    add_into(claims, pod.requests)
                ledger.claim_only[group_key] = claims
        elif any(not p.deleting and not p.gated for p in members):
            ledger.pending += 1
            ledger.waiting_gangs.append(group_key)
            add_into(ledger.asked, gang_need(group, members))
    _add_reservations(handle, ledgers)
    for ledger in ledgers.values():
        add_into(used, ledger.allocated, -1)
    for resource, outside in used.items():
        if resource in capacity and outside > 0:
            capacity[resource] = max(0, capacity[resource] - outside)
    shares = deserved_shares(capacity, {
        name: Demand(ledger.queue.weight, _sum(ledger.allocated, ledger.asked),
                     ledger.queue.capability)
        for name, ledger in ledgers.items() if ledger.queue.valid})
    for name, deserved in shares.items():
        ledgers[name].deserved = deserved
    return Book(capacity, ledgers)


def _add_reservations(handle: Handle, ledgers: Mapping[str, QueueLedger]) -> None:
    """Room reserved for a gang counts toward its queue's share as allocated, and is no
    longer asked for."""
    reserved = handle.gangs.reserved_room()
    for queue_name, held in reserved.values():
        ledger = ledgers.get(queue_name)
        if ledger is not None:
            add_into(ledger.allocated, dict(held))
            for resource, amount in held.items():
                if resource in ledger.asked:
                    ledger.asked[resource] = max(0, ledger.asked[resource] - amount)


def reserved_for(handle: Handle, group_key: str) -> dict[str, int]:
    """What the gang's own reservation holds (its admission does not count it twice)."""
    reserved = handle.gangs.reserved_room()
    found = reserved.get(group_key)
    return dict(found[1]) if found is not None else {}


def as_pending(book: Book, queue_name: str, gangs: Iterable[str]) -> Book:
    """The book as if ``gangs`` of ``queue_name``, admitted only by their claims, were
    pending again. The deserved shares stay: a pending gang asks for what it claimed."""
    ledger = book.ledgers[queue_name]
    allocated = dict(ledger.allocated)
    for key in gangs:
        add_into(allocated, ledger.claim_only.get(key, {}), -1)
    return Book(book.capacity, {**book.ledgers, queue_name: replace(ledger, allocated=allocated)})


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    add_into(out, dict(b))
    return out


def fmt(amounts: Mapping[str, int]) -> dict[str, str]:
    """Quantities for status and messages, zero amounts left out."""
    return format_amounts(amounts)


def admission(book: Book, queue_name: str, need: Mapping[str, int]) -> str:
    """Why a pending gang of ``queue_name`` needing ``need`` may not start now ("" if it
    may): within its deserved share, or borrowing room no queue under its share asks for,
    and never above its capability."""
    ledger = book.ledgers[queue_name]
    capability = ledger.queue.capability
    for resource, amount in need.items():
        cap = capability.get(resource)
        if cap is not None and ledger.allocated.get(resource, 0) + amount > cap:
            return (f'Queue "{queue_name}" would exceed its capability of '
                    f"{format_units(resource, cap)} {resource}")
    if all(ledger.allocated.get(r, 0) + v <= ledger.deserved.get(r, 0) for r, v in need.items()):
        return ""
    for resource, amount in need.items():
        used = sum(other.allocated.get(resource, 0) for other in book.ledgers.values())
        asked = sum(max(0, -other.over_share(resource)) for name, other in book.ledgers.items()
                    if name != queue_name)
        if used + amount + asked > book.capacity.get(resource, 0):
            return (f'Queue "{queue_name}" holds {fmt(ledger.allocated) or "nothing"} of its '
                    f"deserved {fmt(ledger.deserved) or 'nothing'}; this gang needs "
                    f"{fmt(need)} more, and the rest of the cluster's {resource} is asked for "
                    "by queues under their share")
    return ""
