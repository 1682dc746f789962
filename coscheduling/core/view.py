"""Simulations on a view of the cache, never on the live one.

A what-if, and a read-only question (gRPC Filter, Score), run the scheduler's own plugins
and placement, which reach the cache through the same object the scheduling loop uses.
:func:`simulating` takes a view of it, a copy taken under its lock (``Cache.snapshot``: one
pass over node records and pods, milliseconds), and from then on, for the calling thread
alone, that object *is* the view: every attribute it reads through it is the view's. The
lock is free again meanwhile: the loop places and binds pods and the watches change the
live cache while the simulation places, claims and evicts in its view, which is dropped
when it ends. The live cache is never changed by a simulation.

Only while some thread simulates does the live cache route its attributes by thread (its
class is switched for :class:`_Routing` for that time): the loop pays nothing otherwise.

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

_get = object.__getattribute__
_switch = threading.Lock()  # a view registered and the class switched as one step


class _Routing(Cache):
    """The live cache while a thread simulates: that thread reaches its view, others the
    live cache itself."""

    def __getattribute__(self, name: str) -> Any:
        view = _get(self, "views").get(threading.get_ident())
        if view is not None:
            return getattr(view, name)
        return _get(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        view = _get(self, "views").get(threading.get_ident())
        object.__setattr__(view if view is not None else self, name, value)


@contextmanager
def simulating(cache: Cache) -> Iterator[Cache]:
    """A view of the live ``cache`` for the calling thread until the block ends: the lock
    is held only while the view is taken; everything this thread then reads or changes
    through ``cache`` is the view's."""
    views: dict[int, Cache] = _get(cache, "views")
    thread = threading.get_ident()
    assert thread not in views, "a thread simulates on one view at a time"
    assert type(cache) in (Cache, _Routing), "views are taken of the live cache"
    view = _get(cache, "snapshot")()
    with _switch:
        views[thread] = view
        object.__setattr__(cache, "__class__", _Routing)
    try:
        yield view
    finally:
        with _switch:
            del views[thread]
            if not views:
                object.__setattr__(cache, "__class__", Cache)
