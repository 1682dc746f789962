"""A rate per caller, for the calls that cost the leader real work (Simulate)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class PerCaller:
    """A token bucket per caller identity: ``per_minute`` calls a minute, in bursts of at
    most ``burst``. A what-if places a whole hypothetical gang (on a view of the cache, but
    on the scheduler's cores), so one caller asking in a loop would slow every placement;
    the others keep their own rate."""

    def __init__(self, per_minute: int, burst: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / 60.0
        self._burst = float(burst if burst is not None else max(1, per_minute // 6))
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # identity -> (tokens, when)

    def take(self, identity: str) -> float:
        """Spend one call of ``identity``'s; 0 when allowed, else the seconds until one is."""
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(identity, (self._burst, now))
            tokens = min(self._burst, tokens + (now - then) * self._rate)
            if tokens < 1.0:
                self._buckets[identity] = (tokens, now)
                return (1.0 - tokens) / self._rate
            self._buckets[identity] = (tokens - 1.0, now)
            return 0.0
