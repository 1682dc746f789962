"""Simulations on a view of the cache, never on the live one.

A what-if, and a read-only question (gRPC Filter, Score), run the scheduler's own plugins
and placement, which read and change the cache through the same object the scheduling loop
uses. :class:`RoutedCache` is that object: on a thread that simulates it is the view that
thread took, everywhere else the live cache. A view is a copy of the live cache taken under
its lock (``Cache.snapshot``: one pass over node records and pods, milliseconds), after
which the lock is free again: the loop places and binds pods, the watches change the live
cache, while the simulation places, claims and evicts in its view, which is dropped when it
ends. The live cache is never changed by a simulation.

What the plugins keep beside the cache (gang states, reservations, device and volume
stores) is read by a simulation as it is at that moment, without the lock; the answer is
the cluster as the view saw it, with the plugins' state a few cycles newer at most.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from coscheduling.core.cache import Cache

_OWN = frozenset({"simulating", "live", "_here"})


class RoutedCache(Cache):
    """The live cache, or the view the calling thread simulates on (every attribute is the
    one of that cache)."""

    def __init__(self, live: Cache) -> None:  # holds nothing of its own: no Cache.__init__
        object.__setattr__(self, "_live", live)
        object.__setattr__(self, "_views", {})

    def __getattribute__(self, name: str) -> Any:
        if name in _OWN:
            return object.__getattribute__(self, name)
        views: dict[int, Cache] = object.__getattribute__(self, "_views")
        if views:
            view = views.get(threading.get_ident())
            if view is not None:
                return getattr(view, name)
        return getattr(object.__getattribute__(self, "_live"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._here(), name, value)

    def _here(self) -> Cache:
        views: dict[int, Cache] = object.__getattribute__(self, "_views")
        view = views.get(threading.get_ident())
        return view if view is not None else object.__getattribute__(self, "_live")

    @property
    def live(self) -> Cache:
        """The live cache, whichever thread asks."""
        live: Cache = object.__getattribute__(self, "_live")
        return live

    @contextmanager
    def simulating(self) -> Iterator[Cache]:
        """A view of the live cache for the calling thread until the block ends: the lock
        is held only while the view is taken; everything this thread then reads or changes
        through this object is the view's."""
        views: dict[int, Cache] = object.__getattribute__(self, "_views")
        thread = threading.get_ident()
        assert thread not in views, "a thread simulates on one view at a time"
        view = self.live.snapshot()
        views[thread] = view
        try:
            yield view
        finally:
            del views[thread]
