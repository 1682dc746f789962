"""The one record of preemption's evictions: which pods were evicted, for which preemptor,
and which pods take the room they free.

Until a victim is gone its room is *handed over* in the cache (counted once, for the victim
and the claims that take it). When the last victim of a preemption is gone, the pods it made
room for are activated at once: their room is claimed, so a backoff would only leave it idle.
A victim whose eviction could not be sent is no victim any more, and its room is its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetools import LRUCache

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache
    from coscheduling.framework.metrics import SchedulerMetrics
    from coscheduling.preemption.evict import Evictor


@dataclass
class _Eviction:
    """One preemption: its victims (key -> uid) and the pods waiting for their room."""

    takers: tuple[str, ...]
    victims: dict[str, str]
    left: set[str]  # uids of victims not seen gone


class Ledger:
    """Evictions and nominations go through here, and nothing else writes them."""

    def __init__(self, cache: SchedulerCache, activate: Callable[[Iterable[str]], None],
                 metrics: SchedulerMetrics, evictor: Evictor | None,
                 writes: Executor) -> None:
        self._cache = cache
        self._activate = activate
        self._metrics = metrics
        self._writes = writes
        self.evictor = evictor
        self._lock = threading.Lock()  # the evictor's threads report failures here
        # Victim uid -> its preemption, the latest few thousand.
        self._by_victim: LRUCache[str, _Eviction] = LRUCache(maxsize=10_000)
        # Preemptor ("pod ns/p" or "gang ns/g") -> its latest preemption.
        self._by_preemptor: dict[str, _Eviction] = {}
        # Pod key -> the preemption whose victims it waits for (until they are all gone).
        self._by_taker: dict[str, _Eviction] = {}

    def evict(self, victims: Sequence[Pod], preemptor: str, takers: Sequence[str]) -> None:
        """Called under the cache lock: the room is handed over now, the writes go out on
        the evictor's threads."""
        self._metrics.preemption_victims.observe(float(len(victims)))
        self._cache.hand_over(victims, takers)
        eviction = _Eviction(tuple(takers), {v.key: v.uid for v in victims},
                             {v.uid for v in victims})
        with self._lock:
            self._by_preemptor[preemptor] = eviction
            for victim in victims:
                self._by_victim[victim.uid] = eviction
            if victims:
                for taker in takers:
                    self._by_taker[taker] = eviction
        if self.evictor is not None and victims:
            self.evictor.evict(list(victims), preemptor)

    def nominate(self, pod: Pod, node_name: str) -> None:
        evictor = self.evictor
        if evictor is not None:
            self._writes.submit(evictor.nominate, pod, node_name)

    def evicted(self, pod: Pod) -> bool:
        return pod.uid in self._by_victim

    def victims_left(self, preemptor: str) -> int:
        """How many of ``preemptor``'s victims are still in the cache and still being
        evicted (not if their eviction failed); forgotten once none is."""
        eviction = self._by_preemptor.get(preemptor)
        if eviction is None:
            return 0
        cache = self._cache
        left = {key: uid for key, uid in eviction.victims.items()
                if (p := cache.pod(key)) is not None and p.uid == uid and self.evicted(p)}
        eviction.victims = left
        if not left:
            self._by_preemptor.pop(preemptor, None)
        return len(left)

    def waiting(self, pod_key: str) -> bool:
        """Whether the pod waits for victims still terminating: no event but the last one's
        departure (which activates it) can help it, so it is not retried meanwhile."""
        eviction = self._by_taker.get(pod_key)
        return eviction is not None and bool(eviction.left) and pod_key in eviction.takers

    def _release_takers(self, eviction: _Eviction) -> tuple[str, ...]:
        takers, eviction.takers = eviction.takers, ()
        with self._lock:
            for key in takers:
                if self._by_taker.get(key) is eviction:
                    del self._by_taker[key]
        return takers

    def gone(self, pod: Pod) -> None:
        """A pod preemption evicted is gone; once all of its preemption's victims are, the
        pods they made room for go straight to the active queue."""
        eviction = self._by_victim.get(pod.uid)
        if eviction is None:
            return
        eviction.left.discard(pod.uid)
        if not eviction.left and eviction.takers:
            self._activate(self._release_takers(eviction))

    def failed(self, pod: Pod) -> None:
        """``pod``'s eviction could not be sent: its room is its own again, and the pods that
        waited for it stop waiting (at their next attempt, after their backoff, they find
        room elsewhere or preempt again). A victim already seen terminating was evicted
        after all (an answer was lost)."""
        with self._cache.lock:
            current = self._cache.pod(pod.key)
            if current is not None and current.uid == pod.uid and current.deleting:
                return
            with self._lock:
                eviction = self._by_victim.pop(pod.uid, None)
            self._cache.take_back(pod)
            if eviction is not None:
                eviction.left.discard(pod.uid)
                self._release_takers(eviction)
