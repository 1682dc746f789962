"""Proportion: gangs admitted by their queue's deserved share (kube-batch's proportion).

PreFilter, before Coscheduling: the first member of a gang not yet admitted asks whether its
queue's allocated plus the gang's need stays within the queue's deserved share, or fits in
room that no queue under its share asks for. Members of an admitted gang pass, but for one
that holds nothing but claims (its victims gone, no member started) while that test would
now refuse it: it gives the room back (see ``_give_back``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coscheduling.api.quantity import CPU, add_into
from coscheduling.api.queues import Queue
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import (
    ClusterEventsPlugin,
    PreFilterPlugin,
    QueueSharePlugin,
)
from coscheduling.framework.pacing import Pace
from coscheduling.framework.status import SUCCESS, Status
from coscheduling.plugins.proportion.book import (
    Book,
    QueueLedger,
    admission,
    admitted,
    as_pending,
    build_book,
    fmt,
    gang_need,
    known_queue,
    reserved_for,
)
from coscheduling.plugins.proportion.reclaim import reclaimable_units
from coscheduling.preemption.evaluator import gang_preemptor, gang_priority

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.preemption.search import Victims
    from coscheduling.preemption.units import Unit

NAME = "Proportion"

log = logging.getLogger(__name__)


class Proportion(PreFilterPlugin, ClusterEventsPlugin, QueueSharePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle
        self.queues: dict[str, Queue] = {}  # from the Queue watch
        # Queue name -> the status last computed for it; listeners hear of changes.
        self.statuses: dict[str, dict[str, Any]] = {}
        self.status_listeners: list[Callable[[str], None]] = []
        self.book: Book | None = None  # the latest, for explain and metrics
        self._pace = Pace()  # the once-a-second ledger, paced on large clusters
        self._queues_version = 0
        # Gangs activated for room given back and not tried since: the next room given
        # back goes to the gangs after them.
        self._offered: set[str] = set()

    def _shared(self) -> bool:
        """With one queue and no capability every gang is within its share: skip the sums."""
        return len(self.queues) > 1 or any(q.capability for q in self.queues.values())

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        if group is None or not group.valid:
            return SUCCESS  # Coscheduling says what is wrong with the group
        queue = known_queue(self.queues, group.queue)
        if queue is None:
            return Status.unschedulable(
                f'PodGroup "{group.key}": Queue "{group.queue}" not found; the gang waits '
                "until it exists", plugin=self.name)
        if not queue.valid:
            return Status.unschedulable(
                f'PodGroup "{group.key}": Queue "{group.queue}" is invalid: '
                + "; ".join(queue.errors), plugin=self.name)
        if not self._shared():
            return SUCCESS
        self._offered.discard(group.key)
        members = self.handle.cache.group_pods(group.key)
        if admitted(self.handle, members):
            why = self._give_back(group)
            if why:
                return Status.unschedulable(f'PodGroup "{group.key}": {why}', plugin=self.name)
            return SUCCESS
        need = gang_need(group, members)
        add_into(need, reserved_for(self.handle, group.key), -1)
        why = self.why_waiting(group.queue, {r: v for r, v in need.items() if v > 0})
        if why:
            return Status.unschedulable(f'PodGroup "{group.key}": {why}', plugin=self.name)
        return SUCCESS

    def _give_back(self, group: PodGroup) -> str:
        """Why a gang admitted only by the room it claims gives that room back ("" if it
        keeps it). Its queue fell over its share after it claimed (another queue's gangs
        arrived while its victims went): started, it would only be reclaimed at once, one
        more eviction and wait for everyone. So once its victims are gone, and no member
        is placed yet, it passes the admission of a pending gang again, its queue's newer
        such gangs counted as pending too (the newest give back first). Failing it, its
        claims go and the waiting gangs of queues below their share are tried at once."""
        gangs, cache = self.handle.gangs, self.handle.cache
        if not gangs.kept or any(p.node_name or cache.is_assumed(p.key)
                                    for p in cache.group_pods(group.key)) \
                or self.handle.preemption.victims_left(gang_preemptor(group.key)):
            return ""  # started, or still waiting for its victims: the ledger is not read
        book = self._current_book()
        ledger = book.ledgers.get(group.queue)
        claims = ledger.claim_only.get(group.key) if ledger is not None else None
        if not claims or ledger is None:
            return ""
        age = (group.created, group.key)
        newer = [key for key in ledger.claim_only if key == group.key or (
            (other := self.handle.groups.podgroup(key)) is not None and (other.created, key) > age)]
        why = admission(as_pending(book, group.queue, newer), group.queue, claims)
        if not why:
            return ""
        why = f"gives back the room it claimed, as its queue is over its share now: {why}"
        gangs.give_back(group.key, why)
        self.handle.status.group_event(group, "Normal", "ClaimReturned", why)
        self.handle.activator.capacity_freed()
        takers = self._takers(as_pending(book, group.queue, [group.key]), group.queue, claims)
        log.debug("gang %s gives back its claims, for %s", group.key, ", ".join(takers))
        self.handle.activator.activate(p.key for key in takers for p in cache.group_pods(key))
        return why

    def _takers(self, book: Book, queue_name: str, room: Mapping[str, int]) -> list[str]:
        """The oldest waiting gangs of other queues that their queue's share admits now, as
        many as ``room`` holds (at least one), after those offered earlier room and not
        tried yet: whom returned room is for."""
        cache = self.handle.cache
        waiting = sorted(((group.created, key), name, group)
                         for name, ledger in book.ledgers.items() if name != queue_name
                         for key in ledger.waiting_gangs
                         if (group := self.handle.groups.podgroup(key)) is not None)
        self._offered &= {key for (_, key), _, _ in waiting}
        left = dict(room)
        takers: list[str] = []
        for (_, key), name, group in waiting:
            need = gang_need(group, cache.group_pods(key))
            if key in self._offered or admission(book, name, need):
                continue
            if takers and any(need.get(r, 0) > left.get(r, 0) for r in need):
                break
            add_into(left, need, -1)
            takers.append(key)
        self._offered.update(takers)
        return takers

    def queue(self, name: str) -> Queue | None:
        return known_queue(self.queues, name)

    def may_reserve(self, group_key: str, queue_name: str, more: Mapping[str, int]) -> bool:
        """A reservation grows only as a gang of its queue could start: within the queue's
        share, or into room no queue below its own share asks for."""
        if not self._shared() or known_queue(self.queues, queue_name) is None:
            return True
        return not self.why_waiting(queue_name, more)

    def why_waiting(self, queue_name: str, need: Mapping[str, int]) -> str:
        """Why a pending gang of ``queue_name`` needing ``need`` waits ("" if it may go)."""
        return admission(self._current_book(), queue_name, need)

    def _current_book(self) -> Book:
        """The ledger, rebuilt only when the cache's nodes (what is placed), the pods of
        gangs or the queues changed since the last one: a gang's admission looks at it for
        its pod and again for the first member it places. Kept with the cache it was built
        from (``derived``: a what-if's view of the cache has its own)."""
        cache = self.handle.cache
        keys = cache.group_keys()
        at = (cache.change_seq, self._queues_version, len(keys),
              sum(len(cache.group_pods(k)) for k in keys))
        memo = cache.derived.get(self.name)
        if memo is None or memo[0] != at:
            memo = cache.derived[self.name] = (at, build_book(self.handle, self.queues))
        book: Book = memo[1]
        return book

    # -- reclaim (called by the gang's preemption, under the cache lock) ---------------------
    def reclaimable(self, group: PodGroup, members: Sequence[Pod]) -> list[Unit]:
        """What a gang of a queue below its share may evict from queues over theirs."""
        if not self._shared():
            return []
        queue = known_queue(self.queues, group.queue)
        if queue is None or not queue.valid:
            return []
        need: dict[str, int] = {}
        for member in members:
            add_into(need, member.requests)
        book = self._current_book()
        return reclaimable_units(self.handle, book, group,
                                 {r: v for r, v in need.items() if v > 0},
                                 lambda g, m: gang_priority(self.handle, g, m))

    def reclaimed(self, group: PodGroup, victims: Victims) -> None:
        """Tell each gang that loses members which queue took the room back."""
        evicted: dict[str, int] = {}
        for pod in victims.pods:
            evicted[pod.group_key] = evicted.get(pod.group_key, 0) + 1
        for key, count in sorted(evicted.items()):
            victim = self.handle.groups.podgroup(key)
            if victim is not None:
                self.handle.status.group_event(
                    victim, "Normal", "Reclaimed",
                    f'Queue "{group.queue}" is below its deserved share and takes back the '
                    f'room Queue "{victim.queue}" borrowed: {count} member(s) of this gang '
                    f"are evicted for gang {group.key}")
        self.handle.metrics.queue_reclaims.inc(group.queue)

    # -- queue records (from the Queue watch, under the cache lock) ----------------------
    def set_queue(self, queue: Queue) -> None:
        self.queues[queue.name] = queue
        self._queues_version += 1

    def remove_queue(self, name: str) -> None:
        self.queues.pop(name, None)
        self._queues_version += 1
        self.statuses.pop(name, None)

    # -- status ----------------------------------------------------------------------------
    def housekeeping(self, now: float) -> list[str]:
        """Recompute the ledger about once a second; tell listeners which statuses moved.
        When any share or allocation moved, waiting gangs are retried: one may fit now."""
        if not self.queues or not self._pace.due():
            return []
        with self._pace.run():
            book = self.book = build_book(self.handle, self.queues)
        self.handle.cache.derived.pop(self.name, None)  # the next admission builds anew
        moved = False
        for name, ledger in book.ledgers.items():
            if name not in self.queues:
                continue
            status = {"deserved": fmt(ledger.deserved), "allocated": fmt(ledger.allocated),
                      "pending": ledger.pending, "running": ledger.running}
            self._export(name, ledger)
            if self.statuses.get(name) != status:
                moved = moved or _shares(self.statuses.get(name)) != _shares(status)
                self.statuses[name] = status
                for listener in self.status_listeners:
                    listener(name)
        if not moved:
            return []
        return [key for ledger in book.ledgers.values() for key in ledger.waiting_gangs]

    def _export(self, name: str, ledger: QueueLedger) -> None:
        metrics = self.handle.metrics
        for resource in set(ledger.deserved) | set(ledger.allocated):
            scale = 1000.0 if resource == CPU else 1.0
            metrics.queue_deserved.set(ledger.deserved.get(resource, 0) / scale, name, resource)
            metrics.queue_allocated.set(ledger.allocated.get(resource, 0) / scale, name,
                                        resource)
        metrics.queue_gangs.set(float(ledger.pending), name, "pending")
        metrics.queue_gangs.set(float(ledger.running), name, "running")

    def status_of(self, name: str) -> dict[str, Any] | None:
        """The status to write for queue ``name``; call under the cache lock."""
        return self.statuses.get(name) if name in self.queues else None


def _shares(status: Mapping[str, Any] | None) -> tuple[Any, ...]:
    return (None, None) if status is None else (status["deserved"], status["allocated"])
