"""Periodic recomputations that grow with the cluster, kept to a share of the time.

Housekeeping sums every node and pod once a second (queue ledgers, dominant shares) while
holding the cache lock. On a few hundred nodes that is nothing; on 5000 nodes and 10000
pods each pass takes a large slice of the second, taken from scheduling. A paced task
runs again only after ``took / share`` seconds, so it never costs more than ``share`` of
the time; passes cheaper than ``cheap`` are never held back (small clusters, tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_SHARE = 0.05
CHEAP_SECONDS = 0.01


class Pace:
    def __init__(self, share: float = DEFAULT_SHARE, cheap: float = CHEAP_SECONDS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share, self.cheap, self.clock = share, cheap, clock
        self._next = float("-inf")

    def due(self) -> bool:
        return self.clock() >= self._next

    @contextmanager
    def run(self) -> Iterator[None]:
        """Time one pass; the next is due once it has cost no more than the share."""
        started = self.clock()
        try:
            yield
        finally:
            ended = self.clock()
            took = ended - started
            self._next = ended + (took / self.share if took >= self.cheap else 0.0)
