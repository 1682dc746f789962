"""Objects the scheduler cannot read: which, why, and who is told.

An informer that cannot decode or parse one object sets it aside (see ``informer``) and
records it here; so do records kept with a parse error that blocks a node (a bound pod, a
node). Each gets a Warning event ``Unreadable`` naming the field and why, at most once per
resourceVersion and once per ``repeat_after`` seconds per object (an object rewritten every
second costs one event per interval, a relist none), and a Normal ``Readable`` event when it
can be read again. The count per kind goes to ``on_count`` (a gauge).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from coscheduling.api.objectref import ObjectRef

log = logging.getLogger(__name__)

UNREADABLE = "Unreadable"
READABLE = "Readable"
REPEAT_AFTER = 600.0
SET_ASIDE = " and sets it aside until it can: "
"""In an Unreadable event's message, before the field and why (explain reads them)."""


class EventSink(Protocol):
    """Where events about objects go (``reporter.Reporter``)."""

    def object_event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Unreadable:
    """One object set aside: its kind (``resourceclaims.resource.k8s.io``), the object,
    the version read, the field that failed ("" when unknown) and why."""

    kind: str
    ref: ObjectRef
    resource_version: str
    field: str
    why: str
    # The informer's key for it where that is not namespace/name (name@tag for the groups
    # of other producers), so that reading or deleting it again finds this entry.
    store_key: str = ""

    @property
    def key(self) -> str:
        if self.store_key:
            return self.store_key
        return f"{self.ref.namespace}/{self.ref.name}" if self.ref.namespace else self.ref.name

    @property
    def message(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return (f"the scheduler cannot read this {self.ref.kind or 'object'}{SET_ASIDE}"
                f"{where}{self.why}")


class UnreadableObjects:
    """The objects set aside now, by kind and key, shared by every informer."""

    def __init__(self, reporter: EventSink | None = None,
                 on_count: Callable[[str, int], None] | None = None, *,
                 repeat_after: float = REPEAT_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reporter = reporter
        self.on_count = on_count
        self.repeat_after = repeat_after
        self.clock = clock
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Unreadable]] = {}
        # (kind, key) -> (resourceVersion, when) of the last Warning written.
        self._warned: dict[tuple[str, str], tuple[str, float]] = {}

    def set_aside(self, entry: Unreadable) -> None:
        with self._lock:
            objects = self._objects.setdefault(entry.kind, {})
            fresh = entry.key not in objects
            objects[entry.key] = entry
            count = len(objects)
            warn = self._due(entry)
        if fresh:
            log.warning("%s %s: %s", entry.kind, entry.key, entry.message)
            self._count(entry.kind, count)
        if warn and self.reporter is not None:
            self.reporter.object_event(entry.ref, "Warning", UNREADABLE, entry.message)

    def _due(self, entry: Unreadable) -> bool:
        """Whether a Warning is due for ``entry`` (under the lock), noting it if so."""
        now = self.clock()
        last = self._warned.get((entry.kind, entry.key))
        if last is not None and (last[0] == entry.resource_version
                                 or now - last[1] < self.repeat_after):
            return False
        self._warned[entry.kind, entry.key] = (entry.resource_version, now)
        return True

    def readable(self, kind: str, key: str, *, deleted: bool = False) -> None:
        """``key`` was read, or ``deleted``: no longer set aside. A Normal event follows
        the Warning, so that ``explain`` stops listing the object."""
        with self._lock:
            entry = self._objects.get(kind, {}).pop(key, None)
            count = len(self._objects.get(kind, ()))
            warned = (self._warned.pop((kind, key), None) if deleted
                      else self._warned.get((kind, key)))
        if entry is None:
            return
        log.info("%s %s: %s", kind, key, "deleted" if deleted else "can be read again")
        self._count(kind, count)
        if self.reporter is not None and warned is not None:
            self.reporter.object_event(entry.ref, "Normal", READABLE, (
                "deleted" if deleted else "the scheduler can read this object again"))

    def gone(self, kind: str, key: str) -> None:
        """``key`` was deleted: forgotten, its rate limit too."""
        self.readable(kind, key, deleted=True)

    def warn_again(self) -> None:
        """A new leader writes the Warnings anew: a follower's were refused by the fencing
        policy, yet counted as written (the rate limit would delay them by minutes)."""
        with self._lock:
            self._warned.clear()
            entries = [e for objects in self._objects.values() for e in objects.values()]
            for entry in entries:
                self._due(entry)
        if self.reporter is not None:
            for entry in entries:
                self.reporter.object_event(entry.ref, "Warning", UNREADABLE, entry.message)

    def keys(self, kind: str) -> set[str]:
        with self._lock:
            return set(self._objects.get(kind, ()))

    def entries(self) -> list[Unreadable]:
        with self._lock:
            return [e for objects in self._objects.values() for e in objects.values()]

    def _count(self, kind: str, count: int) -> None:
        if self.on_count is not None:
            self.on_count(kind, count)
