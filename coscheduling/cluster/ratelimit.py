"""A token bucket: the scheduler's client QPS and burst, shared by every thread."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self._rate = qps
        self._capacity = float(max(1, burst))
        self._tokens = self._capacity
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Block until a request may be sent."""
        if self._rate <= 0:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                wait = (1 - self._tokens) / self._rate
            time.sleep(wait)
