"""Telling people what the scheduler decided: pod conditions and events.

Writes go through a small queue drained by one worker, with its own client (and so its own
rate limit, as kube-scheduler's event broadcaster has), so reporting never slows binding.
Reports for the same pod coalesce: only the latest unsent one is written, and a message
already written is not written again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coscheduling.api.times import format_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient, q

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod

log = logging.getLogger(__name__)

MAX_PENDING = 50_000


class Reporter:
    def __init__(self, client: KubeClient, component: str) -> None:
        self.client = client
        self.component = component
        self._pending: OrderedDict[tuple[str, str], Callable[[], None]] = OrderedDict()
        self._reported: dict[str, str] = {}
        self._lock = threading.Condition()
        self._stop = False
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="reporter", daemon=True)
        self._thread.start()

    # -- what the scheduler calls ---------------------------------------------------------
    def unschedulable(self, pod: Pod, message: str) -> None:
        if self._reported.get(pod.uid) == message:
            return
        self._reported[pod.uid] = message
        self._submit("condition", pod, lambda: self._write_unschedulable(pod, message))

    def waiting(self, pod: Pod, node_name: str, message: str) -> None:
        text = f"assumed on {node_name}; {message}"
        self._submit("event", pod, lambda: self.event(pod, "Normal", "Waiting", text))

    def scheduled(self, pod: Pod, node_name: str) -> None:
        self._reported.pop(pod.uid, None)
        text = f"Successfully assigned {pod.key} to {node_name}"
        self._submit("event", pod, lambda: self.event(pod, "Normal", "Scheduled", text))

    def forget(self, pod: Pod) -> None:
        self._reported.pop(pod.uid, None)

    # -- writing --------------------------------------------------------------------------
    def _submit(self, kind: str, pod: Pod, write: Callable[[], None]) -> None:
        with self._lock:
            key = (kind, pod.key)
            self._pending.pop(key, None)
            if len(self._pending) >= MAX_PENDING:
                self._pending.popitem(last=False)  # drop the oldest report, never block
            self._pending[key] = write
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stop:
                    self._lock.wait()
                if self._stop and not self._pending:
                    return
                _, write = self._pending.popitem(last=False)
            try:
                write()
                self.writes += 1
            except ApiError as err:
                if not err.not_found:
                    log.warning("report failed: %s", err)

    def _write_unschedulable(self, pod: Pod, message: str) -> None:
        now = time.time()
        condition = {
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message, "lastTransitionTime": format_rfc3339(now),
        }
        self.client.patch(
            f"/api/v1/namespaces/{q(pod.namespace)}/pods/{q(pod.name)}/status",
            {"status": {"conditions": [condition]}}, kind="strategic",
        )
        self.event(pod, "Warning", "FailedScheduling", message)

    def event(self, pod: Pod, kind: str, reason: str, message: str) -> None:
        """A core/v1 Event about ``pod``."""
        now = time.time()
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                               "name": pod.name, "uid": pod.uid},
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": self.component},
            "firstTimestamp": format_rfc3339(now),
            "lastTimestamp": format_rfc3339(now),
            "count": 1,
        }
        self.client.create(f"/api/v1/namespaces/{q(pod.namespace)}/events", body)

    def flush(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        self._thread.join(timeout=5)
