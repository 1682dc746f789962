"""Writes PodGroup status through the status subresource, coalesced, in the shape of the
group's own kind (the caller locates and shapes it: this module knows no kind of group).

Events only mark a group dirty; one worker writes each dirty group at most once per
``min_interval``, ``settle`` seconds after it was first marked (so a gang placed within that
time is written once, already Scheduled, instead of once per step on the way), and only when
what it would write differs from what it wrote last: a gang of 1000 pods costs a handful of
writes, not 1000.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from coscheduling.api.times import format_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient

log = logging.getLogger(__name__)

S = TypeVar("S")


class CoalescingWriter(Generic[S]):
    """The coalescing above; ``status_of(key)`` gives what to write (None: nothing, the
    object is gone) and ``_write`` writes it."""

    def __init__(self, client: KubeClient, status_of: Callable[[str], S | None], *,
                 min_interval: float = 1.0, settle: float = 1.0) -> None:
        self.client = client
        self.status_of = status_of
        self.min_interval = min_interval
        self.settle = settle
        self.writes = 0
        # (group key, when) of the latest writes, on the clock the spacing rule uses: what
        # tests check coalescing against, instead of a count that depends on machine speed.
        self.history: deque[tuple[str, float]] = deque(maxlen=1024)
        # Dirty groups -> when they were first marked since their last write.
        self._dirty: dict[str, float] = {}
        self._wake_at = float("inf")  # when the worker looks again on its own
        self._written: dict[str, Any] = {}
        self._last_write: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="podgroup-status", daemon=True)
        self._thread.start()

    def mark(self, group_key: str) -> None:
        with self._cond:
            if group_key not in self._dirty:
                now = time.monotonic()
                self._dirty[group_key] = now
                if self._due(group_key, now) < self._wake_at:
                    self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stop:
                    self._wake_at = float("inf")
                    self._cond.wait()
                if self._stop:
                    return
                now = time.monotonic()
                due = {key: self._due(key, since) for key, since in self._dirty.items()}
                ready = [key for key, at in due.items() if at <= now]
                if not ready:
                    self._wake_at = min(due.values())
                    self._cond.wait(max(0.01, self._wake_at - now))
                    continue
                for key in ready:
                    del self._dirty[key]
            for key in ready:
                try:
                    self._write(key)
                except ApiError as err:
                    if not err.not_found:
                        log.warning("writing status of PodGroup %s failed: %s", key, err)
                        self.mark(key)
                except Exception:
                    log.exception("computing status of PodGroup %s failed", key)

    def _due(self, key: str, since: float) -> float:
        return max(since + self.settle, self._last_write.get(key, -self.min_interval)
                   + self.min_interval)

    def _write(self, key: str) -> None:
        raise NotImplementedError

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._dirty and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)


class StatusTarget(Protocol):
    """One group object's status, shaped for its kind, and where it goes."""

    @property
    def identity(self) -> tuple[str, str]:
        """(apiVersion, uid) of the object: what was written counts only for the same one."""
    @property
    def status(self) -> dict[str, Any]: ...
    @property
    def path(self) -> str:
        """The status subresource."""
    @property
    def fallback_path(self) -> str:
        """The object itself, for a kind whose CRD may lack the status subresource ("")."""


class GroupStatusWriter(CoalescingWriter[StatusTarget]):
    """PodGroup status of every kind; what was last written is compared without times."""

    def _write(self, key: str) -> None:
        target = self.status_of(key)
        if target is None:  # gone, or a label-only group (no object)
            self._written.pop(key, None)
            return
        status, identity = target.status, target.identity
        # A kind of higher rank taking a gang over, or a group recreated under its name,
        # is written afresh.
        written = self._written.get(key)
        previous = written[1] if written is not None and written[0] == identity else None
        if previous is not None and _same(previous, status):
            return
        _keep_transition_times(previous, status)
        now = self._last_write[key] = time.monotonic()
        try:
            self.client.patch(target.path, {"status": status})
        except ApiError as err:
            if not (err.not_found and target.fallback_path):
                raise
            # No status subresource in this kind's CRD (or the object is gone, and this
            # answers 404 as well).
            self.client.patch(target.fallback_path, {"status": status})
        self._written[key] = (identity, status)
        self.writes += 1
        self.history.append((key, now))


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return _without_times(old) == _without_times(new)


def _without_times(status: dict[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                         for c in status.get("conditions") or ()]
    return out


def _keep_transition_times(previous: dict[str, Any] | None, status: dict[str, Any]) -> None:
    """A condition keeps its lastTransitionTime while its status stays the same."""
    before = {c["type"]: c for c in (previous or {}).get("conditions") or ()}
    now = format_rfc3339(time.time())
    for condition in status.get("conditions") or ():
        old = before.get(condition["type"])
        same = old is not None and old.get("status") == condition["status"]
        condition["lastTransitionTime"] = old["lastTransitionTime"] if same and old else now
