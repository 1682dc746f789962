"""Proportion: gangs admitted by their queue's deserved share (kube-batch's proportion).

PreFilter, before Coscheduling: the first member of a gang not yet admitted asks whether its
queue's allocated plus the gang's need stays within the queue's deserved share, or fits in
room that no queue under its share asks for. Members of an admitted gang pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.queues import Queue
from coscheduling.framework.interfaces import ClusterEventsPlugin, Handle, PreFilterPlugin
from coscheduling.framework.status import SUCCESS, Status
from coscheduling.plugins.proportion.book import (
    Book,
    admission,
    admitted,
    build_book,
    fmt,
    gang_need,
    known_queue,
)

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState

NAME = "Proportion"


class Proportion(PreFilterPlugin, ClusterEventsPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle
        self.queues: dict[str, Queue] = {}  # from the Queue watch
        # Queue name -> the status last computed for it; listeners hear of changes.
        self.statuses: dict[str, dict[str, Any]] = {}
        self.status_listeners: list[Callable[[str], None]] = []
        self.book: Book | None = None  # the latest, for explain and metrics

    def _shared(self) -> bool:
        """With one queue and no capability every gang is within its share: skip the sums."""
        return len(self.queues) > 1 or any(q.capability for q in self.queues.values())

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        group = self.handle.podgroup(pod.group_key) if pod.group_key else None
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
        members = self.handle.cache.group_pods(group.key)
        if admitted(self.handle, members):
            return SUCCESS
        why = self.why_waiting(group.queue, gang_need(group, members))
        if why:
            return Status.unschedulable(f'PodGroup "{group.key}": {why}', plugin=self.name)
        return SUCCESS

    def why_waiting(self, queue_name: str, need: Mapping[str, int]) -> str:
        """Why a pending gang of ``queue_name`` needing ``need`` waits ("" if it may go)."""
        self.book = build_book(self.handle, self.queues)
        return admission(self.book, queue_name, need)

    # -- queue records (from the Queue watch, under the cache lock) ----------------------
    def set_queue(self, queue: Queue) -> None:
        self.queues[queue.name] = queue

    def remove_queue(self, name: str) -> None:
        self.queues.pop(name, None)
        self.statuses.pop(name, None)

    # -- status ----------------------------------------------------------------------------
    def housekeeping(self, now: float) -> list[str]:
        """Recompute the ledger about once a second; tell listeners which statuses moved.
        When any share or allocation moved, waiting gangs are retried: one may fit now."""
        if not self.queues:
            return []
        book = self.book = build_book(self.handle, self.queues)
        moved = False
        for name, ledger in book.ledgers.items():
            if name not in self.queues:
                continue
            status = {"deserved": fmt(ledger.deserved), "allocated": fmt(ledger.allocated),
                      "pending": ledger.pending, "running": ledger.running}
            if self.statuses.get(name) != status:
                moved = moved or _shares(self.statuses.get(name)) != _shares(status)
                self.statuses[name] = status
                for listener in self.status_listeners:
                    listener(name)
        if not moved:
            return []
        return [key for ledger in book.ledgers.values() for key in ledger.waiting_gangs]

    def status_of(self, name: str) -> dict[str, Any] | None:
        with self.handle.cache.lock:
            return self.statuses.get(name) if name in self.queues else None


def _shares(status: Mapping[str, Any] | None) -> tuple[Any, ...]:
    return (None, None) if status is None else (status["deserved"], status["allocated"])
