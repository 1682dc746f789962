"""Telling people what the scheduler decided: pod conditions and events.

Writes go through a small queue drained by writers, with their own client (and so their own
rate limit, as kube-scheduler's event broadcaster has), so reporting never slows binding.
Reports for the same pod coalesce: only the latest unsent one is written, a message already
written is not written again (a repeat is no write at all, where kube-scheduler's broadcaster
counts it in an event series), and one object's reports are written one at a time, in order.

A bind's Scheduled event goes first: it waits only for other Scheduled events, never behind
the failures, waits and conditions of pods still pending, so it lands within a second of the
bind while they queue. Each write is one request that waits on the API server (tens of ms
under load), so the writers, not the CPU, set the pace: WRITERS of them keep as many requests
in flight, each on a kept-alive connection of its own.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from coscheduling.api.times import format_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient, q

if TYPE_CHECKING:
    from coscheduling.api.objectref import ObjectRef
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod

log = logging.getLogger(__name__)

MAX_PENDING = 50_000
# 4 wrote 2855 of W2's 10000 Scheduled events inside the run (scale 1), 16 wrote 6466; W1
# binds 300-450 pods/s, at 50-100 ms a write under that load: 64 requests in flight.
WRITERS = 64
# Lanes, drained in this order: binds' Scheduled events, then everything else.
BOUND, OTHER = 0, 1
# A report whose object has a write in flight waits this long before it is looked at again.
IN_FLIGHT_RETRY = 0.02


@dataclass(frozen=True, slots=True)
class Report:
    """One queued write: an Event about a pod, and with ``condition`` its PodScheduled=False
    condition too. Plain data, not the Pod record nor a closure over it: under load thousands
    wait behind the reporter's own rate limit, and a record would keep a superseded version
    of every such pod alive until its report is written."""

    namespace: str
    name: str
    uid: str
    kind: str  # the Event's type: Normal, Warning
    reason: str
    message: str
    condition: bool = False
    condition_reason: str = "Unschedulable"  # PodScheduled=False's reason
    # What the event is about: a Pod, or (for gang-wide news) a PodGroup.
    api_version: str = "v1"
    object_kind: str = "Pod"

    @classmethod
    def about(cls, pod: Pod, kind: str, reason: str, message: str, *,
              condition: bool = False) -> Report:
        return cls(pod.namespace, pod.name, pod.uid, kind, reason, message, condition)


class Reporter:
    def __init__(self, client: KubeClient, component: str, *,
                 waiting_delay: float = 1.0, writers: int = WRITERS) -> None:
        self.client = client
        self.component = component
        # A gang member's reports ("waiting for members", "waiting at Permit") are held this
        # long: a gang placed within it gets only its Scheduled events written.
        self.waiting_delay = waiting_delay
        self._pending: dict[str, tuple[int, Report]] = {}
        # Per lane, a heap of (when due, sequence, object key); superseded entries are
        # skipped when met.
        self._due: tuple[list[tuple[float, int, str]], ...] = ([], [])
        self._seq = 0
        # Pod uid -> (reason, message) last reported: the same again is not written twice.
        self._reported: dict[str, tuple[str, str]] = {}
        self._lock = threading.Condition()
        self._stop = False
        self.writes = 0
        self._in_flight: set[str] = set()  # objects with a write under way
        # When each timekeeper (a writer waiting for a due time) wakes; another becomes one
        # only for a report due before them all.
        self._keepers: list[float] = []
        self._threads = [threading.Thread(target=self._run, name=f"reporter-{i}", daemon=True)
                         for i in range(writers)]
        for thread in self._threads:
            thread.start()

    # -- what the scheduler calls ---------------------------------------------------------
    def unschedulable(self, pod: Pod, message: str) -> None:
        if self._reported.get(pod.uid) == ("FailedScheduling", message):
            return
        self._reported[pod.uid] = ("FailedScheduling", message)
        delay = self.waiting_delay if pod.group_key else 0.0
        self._submit(pod.key, delay, Report.about(pod, "Warning", "FailedScheduling", message,
                                              condition=True))

    def gated(self, pod: Pod, message: str) -> None:
        """A member waits only for siblings that scheduling gates hold back: no failure
        (no FailedScheduling warning; PodScheduled=False says SchedulingGated, as on the
        gated pods, so autoscalers add no node for it), a Normal event."""
        if self._reported.get(pod.uid) == ("SchedulingGated", message):
            return
        self._reported[pod.uid] = ("SchedulingGated", message)
        report = Report.about(pod, "Normal", "Waiting", message, condition=True)
        self._submit(pod.key, self.waiting_delay,
                     replace(report, condition_reason="SchedulingGated"))

    def waiting(self, pod: Pod, node_name: str, message: str) -> None:
        """A member waits at Permit: PodScheduled=False (so autoscalers see it) + an event."""
        text = f"{message} (assumed on {node_name})"
        if self._reported.get(pod.uid) == ("Waiting", text):
            return
        self._reported[pod.uid] = ("Waiting", text)
        self._submit(pod.key, self.waiting_delay,
                     Report.about(pod, "Normal", "Waiting", text, condition=True))

    def scheduled(self, pod: Pod, node_name: str) -> None:
        self._reported.pop(pod.uid, None)
        text = f"Successfully assigned {pod.key} to {node_name}"
        self._submit(pod.key, 0.0, Report.about(pod, "Normal", "Scheduled", text), BOUND)

    def event(self, pod: Pod, kind: str, reason: str, message: str) -> None:
        """An event about ``pod`` alone (no condition), such as Preempted on a victim."""
        self._submit(pod.key, 0.0, Report.about(pod, kind, reason, message))

    def group_event(self, group: PodGroup, kind: str, reason: str, message: str) -> None:
        """An event about a PodGroup (a released hold, say), of whichever kind it is; a
        label-only group has no object to attach one to."""
        if not group.api_version:
            return
        self._submit(f"podgroup:{group.key}", 0.0, Report(
            group.namespace, group.name, group.uid, kind, reason, message,
            api_version=group.api_version, object_kind="PodGroup"))

    def object_event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        """An event about any object; one of a cluster-scoped object goes to "default"."""
        namespace = ref.namespace or "default"
        self._submit(f"{ref.kind}:{namespace}/{ref.name}:{reason}", 0.0, Report(
            namespace, ref.name, ref.uid, kind, reason, message, api_version=ref.api_version,
            object_kind=ref.kind))

    def forget(self, pod: Pod) -> None:
        """The pod is gone: its unsent reports of scheduling state (why it waits, a
        PodScheduled condition) are dropped, but not an event of something done to it
        (Preempted, Scheduled): a victim's delete often arrives before that is written."""
        self._reported.pop(pod.uid, None)
        with self._lock:
            entry = self._pending.get(pod.key)
            if entry is not None and entry[1].condition:
                del self._pending[pod.key]

    # -- writing --------------------------------------------------------------------------
    def _submit(self, key: str, delay: float, report: Report, lane: int = OTHER) -> None:
        """Queue an object's latest report; an older unsent one for it is dropped."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING and key not in self._pending:
                return  # never block the scheduler; the next state change reports again
            self._seq += 1
            self._pending[key] = (self._seq, report)
            heapq.heappush(self._due[lane], (time.monotonic() + delay, self._seq, key))
            self._lock.notify()

    def _next(self) -> tuple[str, Report] | None:
        """The next report due, the bound lane's first; blocks until one is.

        One idle writer waits for the next report to fall due (the timekeeper; a second only
        for a report due before that); the others sleep until a report is queued or handed
        on. With every writer waiting on the same due time, each due report woke all of
        them, and they took the GIL in turn for nothing (a W9 profile: a tenth of the
        scheduler's GIL samples in that wait)."""
        with self._lock:
            while not self._stop:
                wake: float | None = None
                for lane in self._due:
                    found, due = self._take_due(lane)
                    if found is not None:
                        if any(self._due):
                            self._lock.notify()  # more may be due: hand on to another writer
                        return found
                    if due is not None:
                        wake = due if wake is None else min(wake, due)
                keepers = self._keepers
                if wake is None or (keepers and min(keepers) <= wake):
                    self._lock.wait()  # nothing due, or a timekeeper wakes in time for it
                    continue
                keepers.append(wake)
                try:
                    self._lock.wait(max(0.0, wake - time.monotonic()))
                finally:
                    keepers.remove(wake)
            return None

    def _take_due(self, lane: list[tuple[float, int, str]]
                  ) -> tuple[tuple[str, Report] | None, float | None]:
        """From one lane (the lock held): the first report due whose object has no write
        in flight, else None and when the lane's next report falls due."""
        while lane:
            due, seq, key = lane[0]
            entry = self._pending.get(key)
            if entry is None or entry[0] != seq:
                heapq.heappop(lane)  # superseded
                continue
            if due > time.monotonic():
                return None, due
            heapq.heappop(lane)
            if key in self._in_flight:  # its earlier report is being written
                heapq.heappush(lane, (time.monotonic() + IN_FLIGHT_RETRY, seq, key))
                continue
            del self._pending[key]
            self._in_flight.add(key)
            return (key, entry[1]), None
        return None, None

    def _run(self) -> None:
        while True:
            found = self._next()
            if found is None:
                return
            key, report = found
            try:
                self._write(report)
                with self._lock:
                    self.writes += 1
            except ApiError as err:
                if not err.not_found:
                    log.warning("report failed: %s", err)
            finally:
                with self._lock:
                    self._in_flight.discard(key)

    def _write(self, report: Report) -> None:
        now = format_rfc3339(time.time())
        if report.condition:
            condition = {
                "type": "PodScheduled", "status": "False", "reason": report.condition_reason,
                "message": report.message, "lastTransitionTime": now,
            }
            self.client.patch(
                f"/api/v1/namespaces/{q(report.namespace)}/pods/{q(report.name)}/status",
                {"status": {"conditions": [condition]}}, kind="strategic", answer=False,
            )
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{report.name}.{time.time_ns():x}",
                         "namespace": report.namespace},
            "involvedObject": {"apiVersion": report.api_version, "kind": report.object_kind,
                               "namespace": report.namespace, "name": report.name,
                               "uid": report.uid},
            "reason": report.reason,
            "message": report.message[:1024],
            "type": report.kind,
            "source": {"component": self.component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.client.create(f"/api/v1/namespaces/{q(report.namespace)}/events", body,
                           answer=False)

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while (self._pending or self._in_flight) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
