"""Pods held at Permit, and the one timer that enforces every deadline on time.

A waiting pod ends in exactly one decision: allowed by every Permit plugin that made it
wait, or rejected (by a plugin, or by its deadline). Decisions are handed to a callback
and to any subscribers (the gRPC stream), never applied inline, so a plugin that rejects a
whole gang from inside another pod's cycle cannot recurse into itself.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coscheduling.framework.status import Code, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod


MAX_UNREAD = 10_000
"""Decisions a subscriber may leave unread before it is cut off."""


@dataclass(eq=False)
class WaitingPod:
    pod: Pod
    node_name: str
    deadline: float
    pending_plugins: set[str]
    since: float
    decision: Status | None = None
    decided_at: float = 0.0
    cycle: object = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(frozen=True)
class Decision:
    """What became of a waiting pod, as the gRPC stream reports it."""

    pod_key: str
    pod_uid: str
    node_name: str
    group_key: str
    status: Status
    waited: float


class WaitingPods:
    def __init__(
        self,
        on_decision: Callable[[WaitingPod], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._on_decision = on_decision
        self._clock = clock
        self._lock = threading.RLock()
        self._pods: dict[str, WaitingPod] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._seq = 0
        self._wake = threading.Condition(self._lock)
        self._subscribers: list[queue.SimpleQueue[Decision | None]] = []
        self._overflowed: set[int] = set()  # ids of subscribers cut off for falling behind
        self._interceptors: list[Callable[[WaitingPod], bool]] = []
        self._stopped = False
        self._timer = threading.Thread(target=self._run_timer, name="permit-timer", daemon=True)
        self._timer.start()

    def add(self, pod: Pod, node_name: str, timeout: float, plugins: set[str]) -> WaitingPod:
        with self._lock:
            now = self._clock()
            waiting = WaitingPod(pod, node_name, now + timeout, set(plugins), now)
            self._pods[pod.key] = waiting
            self._seq += 1
            heapq.heappush(self._deadlines, (waiting.deadline, self._seq, pod.key))
            self._wake.notify()
            return waiting

    def get(self, key: str) -> WaitingPod | None:
        return self._pods.get(key)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

    def allow(self, key: str, plugin: str) -> bool:
        """One plugin lets the pod go; it is released once every waiting plugin has."""
        with self._lock:
            waiting = self._pods.get(key)
            if waiting is None:
                return False
            waiting.pending_plugins.discard(plugin)
            if waiting.pending_plugins:
                return False
            self._decide(waiting, Status())
            return True

    def reject(self, key: str, plugin: str, reason: str) -> bool:
        with self._lock:
            waiting = self._pods.get(key)
            if waiting is None:
                return False
            self._decide(waiting, Status(Code.UNSCHEDULABLE, (reason,), plugin))
            return True

    def _decide(self, waiting: WaitingPod, status: Status) -> None:
        del self._pods[waiting.key]
        waiting.decision = status
        waiting.decided_at = self._clock()
        decision = Decision(
            waiting.pod.key, waiting.pod.uid, waiting.node_name, waiting.pod.group_key,
            status, waiting.decided_at - waiting.since,
        )
        for subscriber in list(self._subscribers):
            if subscriber.qsize() >= MAX_UNREAD:  # a reader this far behind is cut off
                self._subscribers.remove(subscriber)
                self._overflowed.add(id(subscriber))
                subscriber.put(None)
            else:
                subscriber.put(decision)
        for interceptor in self._interceptors:
            if interceptor(waiting):
                return  # e.g. a pod a remote caller reserved: the caller binds it, not us
        self._on_decision(waiting)

    def add_interceptor(self, interceptor: Callable[[WaitingPod], bool]) -> None:
        """Run ``interceptor`` on every decision first; when it answers True the decision is
        its own and the scheduler's callback is not called. Like that callback, it runs under
        this map's lock and must not block or take the cache lock."""
        with self._lock:
            self._interceptors.append(interceptor)

    @property
    def interceptors(self) -> tuple[Callable[[WaitingPod], bool], ...]:
        return tuple(self._interceptors)

    def subscribe(self) -> queue.SimpleQueue[Decision | None]:
        """A queue of every later decision; ``None`` is put when the map stops, or when its
        reader left ``MAX_UNREAD`` decisions unread (it is then cut off, not grown)."""
        subscriber: queue.SimpleQueue[Decision | None] = queue.SimpleQueue()
        with self._lock:
            self._subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: queue.SimpleQueue[Decision | None]) -> bool:
        """Stop the subscription; True when it had been cut off for falling behind."""
        with self._lock:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)
            overflowed = id(subscriber) in self._overflowed
            self._overflowed.discard(id(subscriber))
            return overflowed

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for subscriber in self._subscribers:
                subscriber.put(None)
            self._wake.notify()

    def _run_timer(self) -> None:
        with self._lock:
            while not self._stopped:
                now = self._clock()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, _, key = heapq.heappop(self._deadlines)
                    waiting = self._pods.get(key)
                    if waiting is not None and waiting.deadline <= now:
                        waited = now - waiting.since
                        self._decide(
                            waiting,
                            Status(
                                Code.UNSCHEDULABLE,
                                (f"timed out after {waited:.1f}s waiting at Permit",),
                                "Permit",
                            ),
                        )
                timeout = self._deadlines[0][0] - now if self._deadlines else None
                self._wake.wait(timeout)

    def extend(self, key: str, deadline: float) -> None:
        """Move a waiting pod's deadline (all members of a gang share one)."""
        with self._lock:
            waiting = self._pods.get(key)
            if waiting is None:
                return
            waiting.deadline = deadline
            self._seq += 1
            heapq.heappush(self._deadlines, (deadline, self._seq, key))
            self._wake.notify()
