"""The scheduling queue: active heap, backoff, and pods parked until something changes.

* ``active``: a heap ordered by the profile's QueueSort key; the scheduling loop pops it.
* ``backoff``: pods that failed recently wait ``initial * 2**(attempts-1)`` (capped) before
  they may be tried again; when nothing is active, the loop takes one at once (as
  kube-scheduler does since 1.34, KEP-5142: an idle scheduler has no reason to wait), unless
  it failed by an error (the API server's, a bind's), which waits it out.
* A pod that has waited longer than the longest backoff since it was queued is *aged*: its
  backoff no longer puts newer pods before it. The idle loop takes aged pods first, in queue
  order (then the others, the one whose backoff ends first first), and room freed for one
  pod gives the next attempt to the first pod in queue order, aged or active. Without this,
  under churn an old pod (many attempts, the longest backoff) was behind every newer pod
  when room freed, and was bound on its backoff's schedule or once arrivals stopped: W8's
  small jobs waited 70-90 s at p99.
* ``unschedulable``: pods that cannot fit now. They move back only on an event that could
  help them (a node added or freed, a PodGroup created, a sibling arriving) or after
  ``max_unschedulable_seconds`` as a safety net, never by a blind poll.

A pod that fails while an event fired during its own attempt goes to backoff rather than
``unschedulable``: otherwise the event that could have helped it would be lost.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.pods import Pod
from coscheduling.framework.interfaces import ClusterEventsPlugin

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
IN_FLIGHT = "inFlight"
# Attempts owed to queue order at most (one per room-freeing move): room freed faster than
# the loop tries pods is not counted beyond this.
MAX_TURNS = 64


@dataclass(eq=False)
class QueuedPod:
    pod: Pod
    sort_key: tuple[Any, ...]
    added: float
    attempts: int = 0
    where: str = ACTIVE
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    popped_at_move: int = 0
    last_reason: str = ""
    seq: int = field(default=0)
    # Parked by PreEnqueue: an event moves it only once PreEnqueue would let it in.
    held: bool = False
    # Its last attempt failed by an error, not a verdict: its backoff is waited out.
    failed_by_error: bool = False

    @property
    def key(self) -> str:
        return self.pod.key


class SchedulingQueue:
    def __init__(
        self,
        sort_key: Callable[[Pod], tuple[Any, ...]],
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sort_key = sort_key
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_unschedulable = max_unschedulable_seconds
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[tuple[Any, ...], int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        # The backoff pods the loop may take early (not failed by an error), by the end of
        # their backoff; the aged among them in queue order, the others by when they were
        # queued (promoted as they age).
        self._early: list[tuple[float, int, str]] = []
        self._aged: list[tuple[Any, int, str]] = []
        self._young: list[tuple[Any, int, str]] = []
        # Attempts owed to queue order, aged pods included: one per room-freeing move.
        self._turns = 0
        self._seq = 0
        self._moves = 0
        self._closed = False

    # -- adding --------------------------------------------------------------------------
    def add(self, pod: Pod) -> None:
        """A new pending pod, or a fresh record of one already queued."""
        with self._lock:
            queued = self._track(pod)
            if queued is not None:
                self._push_active(queued)

    def park(self, pod: Pod, reason: str) -> None:
        """A new pending pod that PreEnqueue holds back: tracked as unschedulable without
        an attempt, until an event moves it (a pod already tracked is only refreshed)."""
        with self._lock:
            queued = self._track(pod)
            if queued is None:
                return
            queued.last_reason = reason
            queued.where = UNSCHEDULABLE
            queued.unschedulable_since = queued.backoff_until = self._clock()
            queued.held = True

    def _track(self, pod: Pod) -> QueuedPod | None:
        """The new entry for ``pod``; None when it is tracked already (its record is
        refreshed)."""
        queued = self._pods.get(pod.key)
        if queued is not None:
            queued.pod = pod
            return None
        queued = self._pods[pod.key] = QueuedPod(pod, self._sort_key(pod), self._clock())
        return queued

    def held(self, group_key: str) -> list[QueuedPod]:
        """The group's pods that PreEnqueue keeps parked."""
        with self._lock:
            return [q for q in self._pods.values() if q.held and q.where == UNSCHEDULABLE
                    and q.pod.group_key == group_key]

    def note(self, key: str, reason: str) -> None:
        """A parked pod's reason changed (what it waits for is now said differently)."""
        with self._lock:
            queued = self._pods.get(key)
            if queued is not None:
                queued.last_reason = reason

    def delete(self, key: str) -> None:
        with self._lock:
            self._pods.pop(key, None)  # heap entries are dropped lazily

    def _push_active(self, queued: QueuedPod) -> None:
        self._seq += 1
        queued.seq = self._seq
        queued.where = ACTIVE
        heapq.heappush(self._active, (queued.sort_key, self._seq, queued.key))
        self._lock.notify()

    def _push_backoff(self, queued: QueuedPod) -> None:
        self._seq += 1
        queued.seq = self._seq
        queued.where = BACKOFF
        entry = (queued.backoff_until, self._seq, queued.key)
        heapq.heappush(self._backoff, entry)
        if not queued.failed_by_error:
            heapq.heappush(self._early, entry)
            self._index_age(queued)
        self._lock.notify()

    # -- the scheduling loop's side ------------------------------------------------------
    def pop(self, timeout: float | None = None) -> QueuedPod | None:
        """The next pod to schedule; blocks until one is ready or ``timeout`` passes."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._lock:
            while not self._closed:
                self._flush_backoff()
                queued = self._next()
                if queued is not None:
                    queued.where = IN_FLIGHT
                    queued.attempts += 1
                    queued.popped_at_move = self._moves
                    return queued
                wait = self._next_wake()
                if deadline is not None:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._lock.wait(wait)
            return None

    def _index_age(self, queued: QueuedPod) -> None:
        """File a backing-off pod as aged or young."""
        if queued.added <= self._clock() - self._max_backoff:
            heapq.heappush(self._aged, (queued.sort_key, queued.seq, queued.key))
        else:
            heapq.heappush(self._young, (queued.added, queued.seq, queued.key))
        self._compact(self._aged)
        self._compact(self._young)

    def _compact(self, heap: list[tuple[Any, int, str]]) -> None:
        """Drop the entries of pods that moved on once they are half of ``heap``."""
        if len(heap) > 2 * len(self._backoff) + 64:
            heap[:] = [e for e in heap if self._live(e, BACKOFF)]
            heapq.heapify(heap)

    def _first_aged(self) -> Any:
        """The queue-order key of the first aged pod backing off, or None."""
        limit = self._clock() - self._max_backoff
        young = self._young
        while young and young[0][0] <= limit:
            entry = heapq.heappop(young)
            if self._live(entry, BACKOFF):
                heapq.heappush(self._aged, (self._pods[entry[2]].sort_key, *entry[1:]))
        return self._head(self._aged, BACKOFF)

    def _next(self) -> QueuedPod | None:
        """The active head, unless an aged pod comes before it and room was freed; when
        nothing is active, the first aged pod, else the first pod whose backoff ends."""
        active = self._head(self._active, ACTIVE)
        aged = self._first_aged()
        turn, self._turns = self._turns > 0, max(0, self._turns - 1)
        if aged is not None and (active is None or (turn and aged < active)):
            return self._take(self._aged)
        if active is not None:
            return self._take(self._active)
        if self._head(self._early, BACKOFF) is not None:
            return self._take(self._early)
        self._turns += turn
        return None

    def _live(self, entry: tuple[Any, int, str], where: str) -> bool:
        queued = self._pods.get(entry[2])
        return queued is not None and queued.seq == entry[1] and queued.where == where

    def _head(self, heap: list[tuple[Any, int, str]], where: str) -> Any:
        """The key of ``heap``'s first live entry, or None (entries of pods that moved on are
        dropped on the way)."""
        while heap and not self._live(heap[0], where):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _take(self, heap: list[tuple[Any, int, str]]) -> QueuedPod:
        """Pop the live head :meth:`_head` found."""
        return self._pods[heapq.heappop(heap)[2]]

    def _next_wake(self) -> float | None:
        if not self._backoff:
            return None
        head: float = self._backoff[0][0]
        return float(max(0.0, head - self._clock()))

    def _flush_backoff(self) -> None:
        now = self._clock()
        # Early entries this flush covers (or of pods gone): so they stay as many as the pods
        # still backing off, however long the loop never idles.
        while self._early and self._early[0][0] <= now:
            heapq.heappop(self._early)
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, key = heapq.heappop(self._backoff)
            queued = self._pods.get(key)
            if queued is not None and queued.seq == seq and queued.where == BACKOFF:
                self._push_active(queued)

    def _backoff_for(self, attempts: int) -> float:
        delay: float = self._initial_backoff * 2 ** max(0, attempts - 1)
        return min(self._max_backoff, delay)

    def done(self, key: str) -> None:
        """The pod left the queue for good (placed, or handed to the binding cycle)."""
        with self._lock:
            queued = self._pods.get(key)
            if queued is not None and queued.where == IN_FLIGHT:
                del self._pods[key]

    def requeue(self, pod: Pod, reason: str, *, unschedulable: bool, attempts: int = 0) -> None:
        """A pod that failed an attempt (or was rejected at Permit) goes back to wait.

        ``unschedulable`` pods are parked until an event; the others back off. A pod no
        longer tracked (it left the queue for binding) is tracked again with its attempts.
        """
        with self._lock:
            queued = self._pods.get(pod.key)
            if queued is None:
                queued = QueuedPod(pod, self._sort_key(pod), self._clock(), attempts=attempts)
                queued.popped_at_move = self._moves
                self._pods[pod.key] = queued
            queued.pod = pod
            queued.last_reason = reason
            queued.failed_by_error = not unschedulable
            now = self._clock()
            queued.backoff_until = now + self._backoff_for(max(1, queued.attempts))
            if unschedulable and queued.popped_at_move == self._moves:
                queued.where = UNSCHEDULABLE
                queued.unschedulable_since = now
                queued.seq = 0
            else:
                self._push_backoff(queued)

    # -- events --------------------------------------------------------------------------
    def move(self, predicate: Callable[[QueuedPod], bool] | None = None, *,
             room_freed: bool = False) -> int:
        """Move unschedulable pods that ``predicate`` picks (all when None) back to retry.

        Pods still inside their backoff go to the backoff heap, the others to active. When
        the move is for ``room_freed``, the next attempt goes by queue order, aged pods
        included.
        """
        with self._lock:
            self._moves += 1
            if room_freed:
                self._turns = min(self._turns + 1, MAX_TURNS)
            return self._move_locked(predicate)

    def _move_locked(self, predicate: Callable[[QueuedPod], bool] | None) -> int:
        now = self._clock()
        moved = 0
        for queued in list(self._pods.values()):
            if queued.where != UNSCHEDULABLE:
                continue
            if predicate is not None and not predicate(queued):
                continue
            moved += 1
            if queued.backoff_until > now:
                self._push_backoff(queued)
            else:
                self._push_active(queued)
        return moved

    def move_keys(self, keys: Iterable[str], *, skip_backoff: bool = False,
                  predicate: Callable[[QueuedPod], bool] | None = None) -> int:
        """Move the named pods (e.g. a gang's members) back to active."""
        wanted = set(keys)
        with self._lock:
            self._moves += 1
            moved = 0
            for key in wanted:
                queued = self._pods.get(key)
                if queued is None or queued.where not in (UNSCHEDULABLE, BACKOFF):
                    continue
                if predicate is not None and not predicate(queued):
                    continue
                moved += 1
                if skip_backoff or queued.backoff_until <= self._clock():
                    self._push_active(queued)
                else:
                    self._push_backoff(queued)
            return moved

    def flush_stale(self) -> int:
        """Safety net: retry pods parked longer than ``max_unschedulable_seconds``."""
        limit = self._clock() - self._max_unschedulable
        return self.move(lambda q: q.unschedulable_since <= limit)

    def rekey(self) -> None:
        """Recompute every queued pod's sort key (the QueueSort plugin's inputs changed)."""
        with self._lock:
            for queued in self._pods.values():
                queued.sort_key = self._sort_key(queued.pod)
            active = [q for q in self._pods.values() if q.where == ACTIVE]
            self._active = []
            for queued in active:
                self._push_active(queued)
            self._aged, self._young = [], []
            for queued in self._pods.values():
                if queued.where == BACKOFF and not queued.failed_by_error:
                    self._index_age(queued)

    # -- reading -------------------------------------------------------------------------
    def get(self, key: str) -> QueuedPod | None:
        return self._pods.get(key)

    def pending_pods(self) -> list[Pod]:
        """Every pod the queue holds (active, backing off or parked)."""
        with self._lock:
            return [queued.pod for queued in self._pods.values() if queued.where != IN_FLIGHT]

    def counts(self) -> dict[str, int]:
        with self._lock:
            out = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, IN_FLIGHT: 0}
            for queued in self._pods.values():
                out[queued.where] += 1
            return out

    def __len__(self) -> int:
        return len(self._pods)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()


class Activator:
    """Moves pending pods back to the active queue: named ones, a group's, or every parked
    one when room appears (kube-scheduler's PodActivator). The plugins that keep state across
    cycles hear of freed room first (frozen gangs thaw)."""

    def __init__(self, queue: SchedulingQueue, lock: threading.RLock,
                 plugins: Callable[[], Iterable[ClusterEventsPlugin]],
                 waits_for_victims: Callable[[str], bool] = lambda key: False,
                 pre_enqueue: Callable[[Pod], bool] = lambda pod: True) -> None:
        self._queue = queue
        self._lock = lock
        self._plugins = plugins
        # Preemptors whose victims still terminate: only the last one's departure moves them
        # (the preemption ledger activates them then), not every event in the cluster.
        self._waits = waits_for_victims
        self._pre_enqueue = pre_enqueue

    def _may_enter(self, queued: QueuedPod) -> bool:
        """A pod PreEnqueue parked moves only once it would pass (as kube-scheduler runs
        PreEnqueue again before a move to the active queue); then it is held no more."""
        if queued.held:
            if not self._pre_enqueue(queued.pod):
                return False
            queued.held = False
        return True

    def activate(self, pod_keys: Iterable[str]) -> None:
        with self._lock:  # PreEnqueue reads the cache; the cache lock comes before the queue's
            self._queue.move_keys(pod_keys, skip_backoff=True, predicate=self._may_enter)

    def move_groups(self, group_keys: Iterable[str]) -> None:
        keys = set(group_keys)
        if keys:
            with self._lock:
                self._queue.move(lambda q: q.pod.group_key in keys
                                 and not self._waits(q.key) and self._may_enter(q))

    def capacity_freed(self) -> None:
        with self._lock:
            self.capacity_freed_locked()

    def capacity_freed_locked(self, exclude: str = "") -> None:
        """Room appeared: frozen gangs and parked pods may fit now (not ``exclude``'s)."""
        for plugin in self._plugins():
            plugin.capacity_freed(exclude)

        def movable(queued: QueuedPod) -> bool:
            if exclude and queued.pod.group_key == exclude:
                return False
            return not self._waits(queued.key) and self._may_enter(queued)

        self._queue.move(movable, room_freed=True)
